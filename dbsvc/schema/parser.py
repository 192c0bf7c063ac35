"""Tokens -> parse tree (`dbsvc.schema.syntax`), by recursive descent, with recovery.

Grammar (NEWLINE ends a line; `#` comments are gone already)::

    file     := { NEWLINE | table | model | attr eol } EOF    top-level attr: `@allow(replicate, ...)`
    table    := '[' IDENT ']' eol { NEWLINE | entry }
    entry    := IDENT '=' literal eol
    model    := 'model' IDENT '{' { NEWLINE | field | modelattr } '}' eol
    field    := IDENT type { attr } (eol | before a final '}')
    type     := IDENT [ '(' [ IDENT { ',' IDENT } ] ')' ] [ '?' ]     members only for enum
    attr     := '@' IDENT [ '(' [ literal { ',' literal } ] ')' ]
              | '@' 'allow' '(' IDENT { IDENT } [ ',' or ] ')'      an access rule, on one line
    modelattr:= attr { attr } (eol | before a final '}')
    literal  := INT | FLOAT | STRING | IDENT | claim   true/false/null are IDENTs given meaning here
    claim    := 'token' '.' name { '.' name }          name := IDENT | STRING
    eol      := NEWLINE | EOF

Rule expressions (`@allow`), loosest first; `and`, `or`, `not`, `in` are words::

    or       := and { 'or' and }
    and      := not { 'and' not }
    not      := 'not' not | compare
    compare  := operand [ ('==' | '!=' | '<' | '<=' | '>' | '>=' | 'in') operand ]
    operand  := ('record' | 'new') '.' IDENT | claim | scalar | '[' [ scalar { ',' scalar } ] ']'
              | '(' or ')'
    scalar   := INT | FLOAT | STRING | 'true' | 'false' | 'null'

A table's entries run until a line that starts a model (`model Name`), a table (`[`) or a
top-level attribute (`@`).

Recovery: a syntax error is recorded and raises `_Resync`; the rule that owns the current
line catches it and skips ahead:

- a table entry or a model member (field, model attribute) to the end of its line, or to
  a `}` that ends the line, so `model A { id int @id }` still closes (a `}` with more
  after it on its line is a stray, not the end of the model);
- a model whose header is broken (`model {`, `model A` with no `{`), or anything else
  unexpected at top level, to the next line starting a model or a table. A skipped model
  sets `SchemaFile.lost_model`, so references to it are not also reported as unknown;
- a model body that meets the next `model Name {` or `[table]` line reports the missing
  `}` and hands over to the top level.

So one run reports every independent error, and a typo rarely reports twice.

Meaning (known types, attributes, argument kinds) is not decided here; see `checks`.
Imports nothing from dbsvc but `dbsvc.errors` and `dbsvc.schema.*`.
"""

from __future__ import annotations

from dbsvc.errors import SchemaError
from dbsvc.schema.lexer import Token, TokenKind
from dbsvc.schema.syntax import (
    Attribute,
    BoolOp,
    Compare,
    Expr,
    FieldDecl,
    ListLit,
    Literal,
    LiteralKind,
    ModelDecl,
    Not,
    Ref,
    RuleDecl,
    SchemaFile,
    TableDecl,
    TableEntry,
    TypeRef,
)

_KEYWORD_LITERALS: dict[str, tuple[LiteralKind, object]] = {
    "true": (LiteralKind.BOOL, True),
    "false": (LiteralKind.BOOL, False),
    "null": (LiteralKind.NULL, None),
}
_TOKEN_LITERALS = {
    TokenKind.INT: LiteralKind.INT,
    TokenKind.FLOAT: LiteralKind.FLOAT,
    TokenKind.STRING: LiteralKind.STRING,
    TokenKind.BAD: LiteralKind.BAD,
}


class _Resync(Exception):
    """Raised after a syntax error has been recorded; the catcher skips ahead."""


COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
REFERENCE_ROOTS = ("record", "new", "token")


class _Parser:
    def __init__(self, tokens: list[Token], path: str, source: str = "") -> None:
        assert tokens and tokens[-1].kind is TokenKind.EOF
        self.tokens = tokens
        self.path = path
        self.lines = source.splitlines()
        self.pos = 0
        self.errors: list[SchemaError] = []

    # -- token helpers -------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, offset: int) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind is not TokenKind.EOF:
            self.pos += 1
        return token

    def at_punct(self, ch: str) -> bool:
        return self.tok.kind is TokenKind.PUNCT and self.tok.text == ch

    def at_word(self, word: str) -> bool:
        return self.tok.kind is TokenKind.IDENT and self.tok.text == word

    def at_eol(self) -> bool:
        return self.tok.kind in (TokenKind.NEWLINE, TokenKind.EOF)

    def fail(self, expected: str, token: Token | None = None) -> _Resync:
        token = token or self.tok
        self.errors.append(
            SchemaError(f"expected {expected}, got {token.describe()}", token.line, token.col, self.path)
        )
        return _Resync()

    def expect_punct(self, ch: str, expected: str) -> Token:
        if not self.at_punct(ch):
            raise self.fail(expected)
        return self.advance()

    def expect_ident(self, expected: str) -> Token:
        if self.tok.kind is not TokenKind.IDENT:
            raise self.fail(expected)
        return self.advance()

    def expect_eol(self, expected: str) -> None:
        if not self.at_eol():
            raise self.fail(expected)
        self.advance()

    def at_closing_brace(self) -> bool:
        """A `}` that ends its line closes the model; one with more after it is a stray."""
        return self.at_punct("}") and self.peek(1).kind in (TokenKind.NEWLINE, TokenKind.EOF)

    def skip_line(self, stop_at_brace: bool = False) -> None:
        while not self.at_eol():
            if stop_at_brace and self.at_closing_brace():
                return
            self.advance()
        self.advance()

    def at_line_start(self) -> bool:
        return self.pos == 0 or self.tokens[self.pos - 1].kind is TokenKind.NEWLINE

    def at_model_start(self) -> bool:
        return self.tok.kind is TokenKind.IDENT and self.tok.text == "model" and self.peek(1).kind is TokenKind.IDENT

    def at_model_header(self) -> bool:
        """`model Name {`: inside a model body only this means the `}` is missing, since
        `model str` there is a field named `model`."""
        return self.at_model_start() and self.peek(2).kind is TokenKind.PUNCT and self.peek(2).text == "{"

    def at_section_start(self) -> bool:
        """A line that opens a model or a table: where top-level recovery resumes.
        `model` opens one unless it is a table key (`model = ...`)."""
        if not self.at_line_start():
            return False
        if self.tok.kind is TokenKind.IDENT and self.tok.text == "model":
            after = self.peek(1)
            return not (after.kind is TokenKind.PUNCT and after.text == "=")
        return self.at_punct("[") or self.at_punct("@")

    def skip_to_section(self) -> None:
        self.advance()
        while self.tok.kind is not TokenKind.EOF and not self.at_section_start():
            self.advance()

    # -- file ------------------------------------------------------------------------

    def parse_file(self) -> SchemaFile:
        tables: list[TableDecl] = []
        models: list[ModelDecl] = []
        rules: list[Attribute] = []
        lost_model = False
        while self.tok.kind is not TokenKind.EOF:
            if self.tok.kind is TokenKind.NEWLINE:
                self.advance()
                continue
            start = self.pos
            try:
                if self.at_punct("["):
                    tables.append(self.parse_table())
                elif self.tok.kind is TokenKind.IDENT and self.tok.text == "model":
                    models.append(self.parse_model())
                elif self.at_punct("@"):
                    rules.append(self.parse_attribute())
                    self.expect_eol("the end of the line after a top-level attribute")
                else:
                    raise self.fail("'model', a '[table]' header or '@allow(replicate, ...)'")
            except _Resync:
                if self.tokens[start].text == "model":
                    lost_model = True
                if self.pos == start or not self.at_section_start():
                    self.skip_to_section()
        return SchemaFile(tuple(tables), tuple(models), lost_model, tuple(rules))

    # -- tables ----------------------------------------------------------------------

    def parse_table(self) -> TableDecl:
        self.advance()
        name = self.expect_ident("a table name after '['")
        self.expect_punct("]", f"']' after table name {name.text!r}")
        self.expect_eol(f"end of line after '[{name.text}]'")
        entries: list[TableEntry] = []
        while self.tok.kind is not TokenKind.EOF and not self.at_section_start():
            if self.tok.kind is TokenKind.NEWLINE:
                self.advance()
                continue
            try:
                entries.append(self.parse_entry())
            except _Resync:
                self.skip_line()
        return TableDecl(name.text, tuple(entries), name.line, name.col)

    def parse_entry(self) -> TableEntry:
        key = self.expect_ident("a key name or a '[table]' header")
        self.expect_punct("=", f"'=' after key {key.text!r}")
        value = self.parse_literal(f"a value after '{key.text} ='")
        self.expect_eol(f"end of line after the value of {key.text!r}")
        return TableEntry(key.text, value, key.line, key.col)

    # -- models ----------------------------------------------------------------------

    def parse_model(self) -> ModelDecl:
        self.advance()
        name = self.expect_ident("a model name after 'model'")
        if not self.at_punct("{"):
            raise self.fail(f"'{{' after model name {name.text!r}")
        self.advance()
        fields: list[FieldDecl] = []
        attributes: list[Attribute] = []
        broken: list[str] = []
        incomplete = False

        def model() -> ModelDecl:
            return ModelDecl(
                name.text, tuple(fields), tuple(attributes), name.line, name.col, tuple(broken), incomplete
            )

        while True:
            tok = self.tok
            if tok.kind is TokenKind.NEWLINE:
                self.advance()
            elif self.at_closing_brace():
                self.advance()
                break
            elif tok.kind is TokenKind.EOF or (self.at_line_start() and (self.at_punct("[") or self.at_model_header())):
                # Missing '}': report it and let the top level carry on from here.
                self.fail(f"'}}' to close model {name.text!r}")
                return model()
            else:
                member = self.pos
                try:
                    if self.at_punct("@"):
                        attributes.extend(self.parse_model_attributes())
                    elif tok.kind is TokenKind.IDENT:
                        fields.append(self.parse_field())
                    else:
                        raise self.fail("a field name, a model attribute such as '@projection', or '}'")
                except _Resync:
                    incomplete = True
                    self.skip_line(stop_at_brace=True)
                    # Any name on the broken line may be the field it meant to declare.
                    broken.extend(t.text for t in self.tokens[member : self.pos] if t.kind is TokenKind.IDENT)
        self.advance()  # the NEWLINE or EOF after the closing brace
        return model()

    def parse_model_attributes(self) -> list[Attribute]:
        attributes = [self.parse_attribute()]
        while self.at_punct("@"):
            attributes.append(self.parse_attribute())
        self.end_of_member("a model attribute")
        return attributes

    def end_of_member(self, what: str) -> None:
        """A field or model attribute line ends at a newline, or just before the model's '}'."""
        if self.at_closing_brace():
            return
        if not self.at_eol():
            raise self.fail(f"{what} or the end of the line")
        self.advance()

    def parse_field(self) -> FieldDecl:
        name = self.advance()
        type_ref = self.parse_type(name.text)
        attributes: list[Attribute] = []
        while self.at_punct("@"):
            attributes.append(self.parse_attribute())
        self.end_of_member("an attribute such as '@filter'")
        return FieldDecl(name.text, type_ref, tuple(attributes), name.line, name.col)

    def parse_type(self, field_name: str) -> TypeRef:
        name = self.expect_ident(f"a type after field name {field_name!r}")
        members: list[Literal] = []
        if name.text == "enum":
            self.expect_punct("(", "'(' after 'enum'")
            if not self.at_punct(")"):
                while True:
                    member = self.expect_ident("an enum member name")
                    members.append(Literal(LiteralKind.IDENT, member.text, member.text, member.line, member.col))
                    if not self.at_punct(","):
                        break
                    self.advance()
            self.expect_punct(")", "',' or ')' in the enum member list")
        nullable = False
        if self.at_punct("?"):
            self.advance()
            nullable = True
        return TypeRef(name.text, tuple(members), nullable, name.line, name.col)

    def parse_attribute(self) -> Attribute:
        at = self.advance()
        name = self.tok
        if name.kind is not TokenKind.IDENT or name.line != at.line or name.col != at.col + 1:
            raise self.fail("an attribute name right after '@'")
        self.advance()
        if name.text == "allow":
            return Attribute(name.text, (), at.line, at.col, self.parse_rule(at))
        args: list[Literal] = []
        if self.at_punct("("):
            self.advance()
            if not self.at_punct(")"):
                while True:
                    args.append(self.parse_literal(f"an argument of '@{name.text}'"))
                    if not self.at_punct(","):
                        break
                    self.advance()
            self.expect_punct(")", f"',' or ')' in the arguments of '@{name.text}'")
        return Attribute(name.text, tuple(args), at.line, at.col)

    # -- access rules ----------------------------------------------------------------

    def parse_rule(self, at: Token) -> RuleDecl:
        """`@allow(OPERATIONS[, EXPRESSION])` after the `@allow`: one line, since a newline is a token and ends it."""
        self.expect_punct("(", "'(' after '@allow'")
        operations: list[Literal] = []
        while self.tok.kind is TokenKind.IDENT:
            word = self.advance()
            operations.append(Literal(LiteralKind.IDENT, word.text, word.text, word.line, word.col))
        if not operations:
            raise self.fail("an operation such as 'read' or 'update' after '@allow('")
        expr: Expr | None = None
        if self.at_punct(","):
            self.advance()
            expr = self.parse_or()
            close = self.expect_punct(")", "'and', 'or', a comparison or ')' in the rule of '@allow'")
        else:
            close = self.expect_punct(")", "',' then the rule, or ')' after the operations of '@allow'")
        line = self.lines[at.line - 1] if at.line <= len(self.lines) else ""
        return RuleDecl(tuple(operations), expr, line[at.col - 1 : close.col], at.line, at.col)

    def parse_or(self) -> Expr:
        first = self.parse_and()
        operands = [first]
        while self.at_word("or"):
            self.advance()
            operands.append(self.parse_and())
        return first if len(operands) == 1 else BoolOp("or", tuple(operands), first.line, first.col)

    def parse_and(self) -> Expr:
        first = self.parse_not()
        operands = [first]
        while self.at_word("and"):
            self.advance()
            operands.append(self.parse_not())
        return first if len(operands) == 1 else BoolOp("and", tuple(operands), first.line, first.col)

    def parse_not(self) -> Expr:
        if self.at_word("not"):
            word = self.advance()
            return Not(self.parse_not(), word.line, word.col)
        left = self.parse_operand()
        if (self.tok.kind is TokenKind.PUNCT and self.tok.text in COMPARISONS) or self.at_word("in"):
            op = self.advance()
            return Compare(op.text, left, self.parse_operand(), op.line, op.col)
        return left

    def parse_operand(self) -> Expr:
        tok = self.tok
        if self.at_punct("("):
            self.advance()
            inner = self.parse_or()
            self.expect_punct(")", "'and', 'or', a comparison or ')'")
            return inner
        if self.at_punct("["):
            self.advance()
            items: list[Literal] = []
            if not self.at_punct("]"):
                while True:
                    items.append(self.parse_scalar("a value in the list"))
                    if not self.at_punct(","):
                        break
                    self.advance()
            self.expect_punct("]", "',' or ']' in the list")
            return ListLit(tuple(items), tok.line, tok.col)
        if tok.kind is TokenKind.IDENT and tok.text in REFERENCE_ROOTS:
            return self.parse_ref()
        return self.parse_scalar("'record.FIELD', 'new.FIELD', 'token.CLAIM', a value, '[' or '('")

    def parse_scalar(self, expected: str) -> Literal:
        tok = self.tok
        if tok.kind in _TOKEN_LITERALS:
            self.advance()
            return Literal(_TOKEN_LITERALS[tok.kind], tok.value, tok.text, tok.line, tok.col)
        if tok.kind is TokenKind.IDENT and tok.text in _KEYWORD_LITERALS:
            self.advance()
            kind, value = _KEYWORD_LITERALS[tok.text]
            return Literal(kind, value, tok.text, tok.line, tok.col)
        raise self.fail(expected)

    def parse_ref(self) -> Ref:
        """`record.f`, `new.f`, `token.a.b` (a claim step may be a string: `token."https://x/roles"`)."""
        root = self.advance()
        what = "a claim name" if root.text == "token" else "a field name"
        path: list[str] = []
        cols: list[int] = []
        while True:
            if not self.at_punct("."):  # only before the first step: the loop goes on at a '.'
                raise self.fail(f"'.' and {what} after {root.text!r}")
            self.advance()
            step = self.tok
            if step.kind is TokenKind.IDENT or (root.text == "token" and step.kind is TokenKind.STRING):
                self.advance()
                path.append(str(step.value))
                cols.append(step.col)
            else:
                raise self.fail(f"{what} after '.'")
            if root.text != "token" or not self.at_punct("."):
                return Ref(root.text, tuple(path), tuple(cols), root.line, root.col)

    # -- literals --------------------------------------------------------------------

    def parse_literal(self, expected: str) -> Literal:
        tok = self.tok
        if tok.kind in _TOKEN_LITERALS:
            self.advance()
            return Literal(_TOKEN_LITERALS[tok.kind], tok.value, tok.text, tok.line, tok.col)
        if self.at_word("token") and self.peek(1).kind is TokenKind.PUNCT and self.peek(1).text == ".":
            ref = self.parse_ref()
            return Literal(LiteralKind.CLAIM, ref.path, ref.text, ref.line, ref.col)
        if tok.kind is TokenKind.IDENT:
            self.advance()
            kind, value = _KEYWORD_LITERALS.get(tok.text, (LiteralKind.IDENT, tok.text))
            return Literal(kind, value, tok.text, tok.line, tok.col)
        raise self.fail(expected)


def parse_tokens(tokens: list[Token], path: str = "<schema>", source: str = "") -> tuple[SchemaFile, list[SchemaError]]:
    """Build the parse tree from `tokens` (ending with EOF), plus every syntax error;
    `source` is the text the tokens came from (a rule keeps its source line)."""
    parser = _Parser(tokens, path, source)
    tree = parser.parse_file()
    return tree, parser.errors
