"""Access rules: `@allow` parse trees -> checked `ir.Rule`s, every problem with its place.

A model's `@allow(OPERATIONS, EXPRESSION)` and the schema-level `@allow(replicate, EXPR)`
(docs/guide/schema.md#access-rules) are checked here, after the model's fields are known.
Like the rest of the checks it never stops at the first problem: a bad piece is reported
and the rule is dropped from the IR (the IR is meaningless once an error is reported).

Where an error points:
- an unknown or misplaced operation word: at the word;
- an unknown field: at the field name after `record.` / `new.`;
- `new` outside an update-only rule, `record`/`new` in the replicate rule: at the word;
- a literal that does not fit the field it is compared with: at the literal (a list item
  at the item); two fields of different types, an ordering of unordered values: at the
  operator; a lone operand that is not a condition, `in` without a list: at the operand.
- a parenthesized condition used as a value (`(a or b) < 1`): at its first piece.

Invariants of what it returns: see `dbsvc.schema.ir` (rules). Imports nothing from dbsvc
but `dbsvc.errors`, `dbsvc.formats` (a datetime, date or uuid literal is parsed as a request's
value is) and `dbsvc.schema.*`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from dbsvc.formats import parse_date, parse_datetime, parse_uuid
from dbsvc.schema.ir import (
    OPERATIONS,
    REPLICATE,
    SHORTHANDS,
    AllOf,
    AnyOf,
    ClaimRef,
    Comparison,
    Const,
    Field,
    FieldRef,
    FieldType,
    ListConst,
    Negation,
    Operand,
    Rule,
    RuleExpr,
    Truth,
)
from dbsvc.schema.syntax import BoolOp, Compare, Expr, ListLit, Literal, LiteralKind, Not, Ref, RuleDecl
from dbsvc.schema.values import INT64_MAX, INT64_MIN, shown

ORDERED_TYPES = frozenset({FieldType.INT, FieldType.FLOAT, FieldType.STR, FieldType.DATE, FieldType.DATETIME})
NUMBERS = frozenset({FieldType.INT, FieldType.FLOAT})
OPERATION_WORDS = ", ".join((*OPERATIONS, *SHORTHANDS))

Report = Callable[[str, int, int], None]


class _Skip(Exception):
    """A piece of the rule is wrong (reported, or already reported elsewhere): drop the rule."""


class RuleChecker:
    """Checks the rules of one scope: a model (`fields` its usable fields, `broken` the
    names of field lines that did not parse) or, with `model` None, the schema level."""

    def __init__(self, report: Report, model: str | None, fields: Mapping[str, Field], broken: tuple[str, ...]):
        self.report = report
        self.model = model
        self.fields = fields
        self.broken = broken

    def check(self, decl: RuleDecl) -> Rule | None:
        operations = self.operations(decl)
        try:
            expr = None if decl.expr is None else self.condition(decl.expr, operations)
        except _Skip:
            return None
        if operations is None:
            return None
        return Rule(operations, expr, decl.text, decl.line, decl.col)

    # -- operations ----------------------------------------------------------------

    def operations(self, decl: RuleDecl) -> tuple[str, ...] | None:
        chosen: set[str] = set()
        ok = True
        for word in decl.operations:
            op = str(word.value)
            if self.model is None:
                if op != REPLICATE:
                    self.report(
                        f"operation {op!r} of a top-level @allow is not 'replicate', expected "
                        "@allow(replicate, ...) here and model operations in a model body",
                        word.line,
                        word.col,
                    )
                    ok = False
                chosen.add(op)
            elif op == REPLICATE:
                self.report(
                    f"@allow(replicate) in model {self.model!r}: replication is of the whole schema, "
                    "expected it at the top level, outside models",
                    word.line,
                    word.col,
                )
                ok = False
            elif op in OPERATIONS:
                chosen.add(op)
            elif op in SHORTHANDS:
                chosen.update(SHORTHANDS[op])
            else:
                self.report(f"unknown operation {op!r} in @allow, expected {OPERATION_WORDS}", word.line, word.col)
                ok = False
        if not ok:
            return None
        if self.model is None:
            return (REPLICATE,)
        return tuple(op for op in OPERATIONS if op in chosen)

    # -- conditions ------------------------------------------------------------------

    def condition(self, node: Expr, operations: tuple[str, ...] | None) -> RuleExpr:
        """Check every part of `node` (reporting all problems), then raise _Skip if any."""
        if isinstance(node, BoolOp):
            parts = self.all_parts(node.operands, operations)
            return AllOf(parts) if node.op == "and" else AnyOf(parts)
        if isinstance(node, Not):
            return Negation(self.condition(node.operand, operations))
        if isinstance(node, Compare):
            return self.comparison(node, operations)
        operand = self.operand(node, operations)
        if isinstance(operand, ClaimRef):
            return Truth(operand)
        if isinstance(operand, FieldRef) and operand.field.type is FieldType.BOOL:
            return Truth(operand)
        if isinstance(operand, Const) and isinstance(operand.value, bool):
            return Truth(operand)
        line, col = _place(node)
        self.report(
            f"{_text(node)} is not a condition, expected a comparison such as '{_text(node)} == ...', "
            "a bool field, a token claim, true or false",
            line,
            col,
        )
        raise _Skip

    def all_parts(self, nodes: tuple[Expr, ...], operations: tuple[str, ...] | None) -> tuple[RuleExpr, ...]:
        parts: list[RuleExpr] = []
        failed = False
        for node in nodes:
            try:
                parts.append(self.condition(node, operations))
            except _Skip:
                failed = True
        if failed:
            raise _Skip
        return tuple(parts)

    def operand(self, node: Expr, operations: tuple[str, ...] | None) -> Operand:
        if isinstance(node, Ref):
            return self.reference(node, operations)
        if isinstance(node, ListLit):
            return ListConst(tuple(self.plain(item) for item in node.items))
        if isinstance(node, Literal):
            return Const(self.plain(node))
        # a parenthesized condition (`(a or b) < 1`, `x in (a and b)`): the parser builds it
        line, col = _place(node)
        self.report(
            f"{_text(node)} is a condition, not a value; expected 'record.FIELD', 'new.FIELD', "
            "'token.CLAIM', a value or a [...] list on each side of a comparison",
            line,
            col,
        )
        raise _Skip

    @staticmethod
    def plain(literal: Literal) -> object:
        if literal.kind is LiteralKind.BAD:
            raise _Skip  # the lexer reported it
        return literal.value

    def reference(self, ref: Ref, operations: tuple[str, ...] | None) -> Operand:
        if ref.root == "token":
            return ClaimRef(ref.path)
        if self.model is None:
            self.report(
                f"{ref.text} in the replicate rule: it is about the token, not a record, "
                "expected only 'token.CLAIM' operands",
                ref.line,
                ref.col,
            )
            raise _Skip
        # `operations` None: they were wrong (reported), so whether `new` fits is unknown.
        if ref.root == "new" and operations is not None and set(operations) != {"update"}:
            others = ", ".join(op for op in operations if op != "update")
            self.report(
                f"{ref.text}: 'new' is the record after an update, expected it only in a rule whose "
                f"operations are all 'update' (this one also allows {others})",
                ref.line,
                ref.col,
            )
            raise _Skip
        name = ref.path[0]
        field = self.fields.get(name)
        if field is None:
            if name not in self.broken:
                known = ", ".join(self.fields) or "none"
                self.report(
                    f"unknown field {name!r} of model {self.model!r} in @allow, expected one of {known}",
                    ref.line,
                    ref.cols[0],
                )
            raise _Skip
        return FieldRef(ref.root, field)

    # -- comparisons -----------------------------------------------------------------

    def comparison(self, node: Compare, operations: tuple[str, ...] | None) -> Comparison:
        sides: list[Operand] = []
        for side in (node.left, node.right):
            try:
                sides.append(self.operand(side, operations))
            except _Skip:
                pass
        if len(sides) < 2:
            raise _Skip
        left, right = sides
        if node.op == "in":
            return self.membership(node, left, right)
        for operand, piece in ((left, node.left), (right, node.right)):
            if isinstance(operand, ListConst):
                line, col = _place(piece)
                self.report(f"a list is only allowed after 'in', got it beside {node.op!r}", line, col)
                raise _Skip
        if node.op not in ("==", "!="):
            self.check_ordered(node, left, right)
        if isinstance(left, FieldRef) and isinstance(right, FieldRef):
            if not _same_kind(left.field, right.field):
                self.report(
                    f"{_text(node.left)} ({_type(left.field)}) is compared with {_text(node.right)} "
                    f"({_type(right.field)}), expected two fields of one type",
                    node.line,
                    node.col,
                )
                raise _Skip
            return Comparison(node.op, left, right)
        if isinstance(left, FieldRef) and isinstance(right, Const):
            right = Const(self.value_for(left.field, node.left, node.right))  # type: ignore[arg-type]
        elif isinstance(right, FieldRef) and isinstance(left, Const):
            left = Const(self.value_for(right.field, node.right, node.left))  # type: ignore[arg-type]
        return Comparison(node.op, left, right)

    def check_ordered(self, node: Compare, left: Operand, right: Operand) -> None:
        for operand, piece in ((left, node.left), (right, node.right)):
            bad = None
            if isinstance(operand, FieldRef) and operand.field.type not in ORDERED_TYPES:
                bad = f"{_text(piece)} is {_type(operand.field)}"
            elif isinstance(operand, Const) and (operand.value is None or isinstance(operand.value, bool)):
                bad = f"{_text(piece)} has no order"
            if bad is not None:
                self.report(
                    f"{node.op!r} needs ordered values, but {bad}; expected int, float, str, date or "
                    "datetime values (use '==' or '!=')",
                    node.line,
                    node.col,
                )
                raise _Skip

    def membership(self, node: Compare, left: Operand, right: Operand) -> Comparison:
        if isinstance(left, ListConst):
            line, col = _place(node.left)
            self.report("a list is only allowed after 'in', expected a single value before 'in'", line, col)
            raise _Skip
        is_list = isinstance(right, (ListConst, ClaimRef)) or (
            isinstance(right, FieldRef) and right.field.type is FieldType.JSON
        )
        if not is_list:
            line, col = _place(node.right)
            what = f"{_text(node.right)} ({_type(right.field)})" if isinstance(right, FieldRef) else _text(node.right)
            self.report(
                f"expected a list after 'in': a [...] list, a token claim or a json field, got {what}", line, col
            )
            raise _Skip
        if isinstance(left, FieldRef) and isinstance(right, ListConst) and isinstance(node.right, ListLit):
            values = []
            failed = False
            for item in node.right.items:
                try:
                    values.append(self.value_for(left.field, node.left, item))
                except _Skip:
                    failed = True
            if failed:
                raise _Skip
            right = ListConst(tuple(values))
        return Comparison("in", left, right)

    def value_for(self, field: Field, piece: Expr, literal: Literal) -> object:
        """`literal` as a value of `field` (canonical form), or a reported problem."""
        converted = convert_rule_value(field, literal)
        if isinstance(converted, _Mismatch):
            self.report(f"{_text(piece)} is {_type(field)}, {converted}", literal.line, literal.col)
            raise _Skip
        return converted


class _Mismatch(str):
    """Why a literal does not fit a field (returned, never raised)."""


def convert_rule_value(field: Field, literal: Literal) -> object:
    """A literal compared with `field` -> the field's canonical value, or a `_Mismatch`."""
    kind, value, got = literal.kind, literal.value, shown(literal)
    type_ = field.type
    if kind is LiteralKind.BAD:
        raise _Skip
    if type_ is FieldType.JSON:
        return value
    if kind is LiteralKind.NULL:
        if field.nullable:
            return None
        return _Mismatch(f"not nullable, so it never is null; expected {_expected(field)}, got null")
    if type_ is FieldType.INT:
        if kind is not LiteralKind.INT or not INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
            return _Mismatch(f"expected a signed 64-bit integer, got {got}")
        return value
    if type_ is FieldType.FLOAT:
        if kind not in (LiteralKind.INT, LiteralKind.FLOAT) or not math.isfinite(float(value)):  # type: ignore[arg-type]
            return _Mismatch(f"expected a finite number, got {got}")
        return float(value)  # type: ignore[arg-type]
    if type_ is FieldType.BOOL:
        return value if kind is LiteralKind.BOOL else _Mismatch(f"expected true or false, got {got}")
    if kind is not LiteralKind.STRING:
        return _Mismatch(f"expected {_expected(field)}, got {got}")
    text = str(value)
    if type_ is FieldType.STR:
        return text
    if type_ is FieldType.ENUM:
        if text in field.enum_members:
            return text
        return _Mismatch(f"expected one of {', '.join(field.enum_members)}, got {got}")
    canonical = {FieldType.DATETIME: parse_datetime, FieldType.DATE: parse_date, FieldType.UUID: parse_uuid}[type_](
        text
    )
    return canonical if canonical is not None else _Mismatch(f"expected {_expected(field)}, got {got}")


def _expected(field: Field) -> str:
    return {
        FieldType.INT: "an integer",
        FieldType.FLOAT: "a number",
        FieldType.STR: "a string",
        FieldType.BOOL: "true or false",
        FieldType.DATETIME: 'an RFC 3339 instant with an offset such as "2024-01-31T12:00:00Z"',
        FieldType.DATE: 'a "YYYY-MM-DD" date',
        FieldType.UUID: 'a uuid string such as "123e4567-e89b-12d3-a456-426614174000"',
        FieldType.ENUM: "a member string (" + ", ".join(field.enum_members) + ")",
        FieldType.JSON: "a JSON value",
    }[field.type]


def _type(field: Field) -> str:
    if field.type is FieldType.ENUM:
        return f"enum({', '.join(field.enum_members)})"
    return field.type.value + ("?" if field.nullable else "")


def _same_kind(a: Field, b: Field) -> bool:
    if a.type in NUMBERS and b.type in NUMBERS:
        return True
    return a.type is b.type or FieldType.JSON in (a.type, b.type)


def _place(node: Expr) -> tuple[int, int]:
    if isinstance(node, BoolOp):
        return _place(node.operands[0])
    if isinstance(node, Compare):
        return _place(node.left)
    return node.line, node.col


def _text(node: Expr) -> str:
    """How a message names a piece of a rule: `record.owner`, `"x"`, `[...]`, `(...)`."""
    if isinstance(node, Ref):
        return node.text
    if isinstance(node, Literal):
        return node.text if node.kind is not LiteralKind.IDENT else repr(node.text)
    if isinstance(node, ListLit):
        return "[" + ", ".join(item.text for item in node.items) + "]"
    return "(...)"
