"""The parse tree: what the source says, with a location on every piece, nothing checked.

The parser (`dbsvc.schema.parser`) builds these; the checks (`dbsvc.schema.checks`)
read them, report every problem at the exact line and column of the offending piece,
and build the IR (`dbsvc.schema.ir`) from the trees that pass. Nothing outside
`dbsvc.schema` sees these classes. Lines and columns are 1-based.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class LiteralKind(enum.Enum):
    INT = "integer"
    FLOAT = "float"
    STRING = "string"
    BOOL = "boolean"
    NULL = "null"
    IDENT = "identifier"
    CLAIM = "token claim"  # `token.a.b` (in `@default`); `value` is the path, ("a", "b")
    BAD = "invalid literal"  # already reported by the lexer; checks stay silent about it


@dataclass(frozen=True, slots=True)
class Literal:
    """A value as written. `value` is decoded (int, float, str, bool, None);
    for IDENT it is the identifier text; `text` is the exact source slice."""

    kind: LiteralKind
    value: object
    text: str
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class Attribute:
    """`@name` or `@name(arg, ...)`; `line`/`col` point at the `@`.
    `@allow(...)` has no `args` but a `rule` (its operations and expression)."""

    name: str
    args: tuple[Literal, ...]
    line: int
    col: int
    rule: RuleDecl | None = None


# -- access rules: `@allow(OPERATIONS, EXPRESSION)` ----------------------------------------


@dataclass(frozen=True, slots=True)
class Ref:
    """`record.FIELD`, `new.FIELD` or `token.CLAIM{.CLAIM}`; `line`/`col` point at the root
    word, `cols[i]` at `path[i]` (all on one line)."""

    root: str
    path: tuple[str, ...]
    cols: tuple[int, ...]
    line: int
    col: int

    @property
    def text(self) -> str:
        return ".".join((self.root, *self.path))


@dataclass(frozen=True, slots=True)
class ListLit:
    """`[literal, ...]`; `line`/`col` point at the `[`."""

    items: tuple[Literal, ...]
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class Compare:
    """`left OP right`, OP one of `== != < <= > >= in`; `line`/`col` point at OP."""

    op: str
    left: Expr
    right: Expr
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class BoolOp:
    """`a and b and ...` or `a or b or ...` (`op` is "and" or "or"); at the first operand."""

    op: str
    operands: tuple[Expr, ...]
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class Not:
    """`not operand`; `line`/`col` point at `not`."""

    operand: Expr
    line: int
    col: int


Expr = Ref | Literal | ListLit | Compare | BoolOp | Not


@dataclass(frozen=True, slots=True)
class RuleDecl:
    """`@allow(OPERATIONS[, EXPRESSION])`: the operation words as IDENT literals, the
    expression (None: always, for any valid token), and `text`, the source from the `@` to
    the closing `)`."""

    operations: tuple[Literal, ...]
    expr: Expr | None
    text: str
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class TypeRef:
    """A field's type as written: `int`, `str?`, `enum(a, b)`; `members` only for enums."""

    name: str
    members: tuple[Literal, ...]
    nullable: bool
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class FieldDecl:
    name: str
    type: TypeRef
    attributes: tuple[Attribute, ...]
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class ModelDecl:
    """`model Name { ... }`: fields in order, and the model-level attributes.

    `broken` names the fields whose line had a syntax error (already reported) and so
    are missing from `fields`; checks stay quiet about what those lines might have said
    (a missing `@id`, a projection naming them), so one typo gives one error.
    `incomplete` is true when some member line could not be parsed at all."""

    name: str
    fields: tuple[FieldDecl, ...]
    attributes: tuple[Attribute, ...]
    line: int
    col: int
    broken: tuple[str, ...] = ()
    incomplete: bool = False


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: str
    value: Literal
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class TableDecl:
    """`[name]` and the `key = value` lines under it; `line`/`col` point at the name."""

    name: str
    entries: tuple[TableEntry, ...]
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class SchemaFile:
    """The whole file; `rules` are the attributes written outside models and tables. `lost_model` is true when a model header was too broken to read
    (already reported): its name is unknown, so a `@ref` to an unknown model may mean it."""

    tables: tuple[TableDecl, ...]
    models: tuple[ModelDecl, ...]
    lost_model: bool = False
    rules: tuple[Attribute, ...] = ()  # top-level attributes (`@allow(replicate, ...)`)
