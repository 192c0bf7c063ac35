"""Access rules at run time: what a compiled `@allow` rule answers, and the claim helpers it calls.

A schema's `@allow(OPERATIONS, EXPRESSION)` rules (docs/guide/access.md) are compiled per
model into plain functions of the generated module (compiler/rules.py); nothing here reads
the schema. This module is the surface those functions and their callers share, so the
app (REST) and realtime (feeds) ask the same questions the same way:

- `ModelRules`: one model's compiled rules. A model without any `@allow` has none
  (`CompiledModel.rules is None`): every valid token may do everything, as before rules.
  A model with at least one `@allow` refuses every operation no rule allows.
- `Scope`: what one token may see of one model for a read of many records (`list`,
  `subscribe`): the read rule partially evaluated against the token's claims, once per
  request or socket. A rule `record.F == token.C` (or `record.F in token.C`) on an
  `@filter` field F becomes `field`/`keys`, which storage answers from F's hash index and
  the broker routes on, exactly as an explicit `?F=` filter; what is left over is `where`,
  a test of each record. So a list under an owner rule costs what the same list filtered
  by `owner=` costs, and an event reaches only the subscribers that may see it.

Rule semantics the generated functions keep (docs/decisions.md, "Access rules"):
1. A claim the token does not carry is `MISSING`; every comparison with `MISSING` is
   false (never an error), so `not (token.role == "admin")` is true without a `role`.
2. Comparisons are typed as JSON is: a string claim never equals an int field; `true`
   never equals `1`; an ordering between values of different kinds is false.
3. Several rules for one operation are OR-ed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

Claims: TypeAlias = Mapping[str, Any]  # a verified token's payload
Record: TypeAlias = dict[str, Any]  # as dbsvc.runtime.Record (which imports this module)


class _Missing:
    """The value of a claim the token does not carry (rule 1). Never equal to anything."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def claim(claims: Claims, path: Sequence[str]) -> Any:
    """`token.a.b` -> claims["a"]["b"], or MISSING when any step is absent or not an object."""
    value: Any = claims
    for step in path:
        if not isinstance(value, Mapping) or step not in value:
            return MISSING
        value = value[step]
    return value


def _kind(value: Any) -> type:
    """JSON's kind of a value: bool apart from numbers, int and float one kind."""
    kind = type(value)
    return float if kind is int else kind


def same(left: Any, right: Any) -> bool:
    """`==` of rule 2: false with MISSING and between values of different JSON kinds."""
    if left is MISSING or right is MISSING or _kind(left) is not _kind(right):
        return False
    return bool(left == right)


def differs(left: Any, right: Any) -> bool:
    """`!=`: false with MISSING (rule 1), true between different kinds."""
    if left is MISSING or right is MISSING:
        return False
    return not same(left, right)


def ordered(left: Any, op: str, right: Any) -> bool:
    """`<`, `<=`, `>`, `>=`: false with MISSING, null, or values of different kinds."""
    if left is MISSING or right is MISSING or left is None or right is None:
        return False
    if _kind(left) is not _kind(right) or _kind(left) not in (float, str):
        return False
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def member(value: Any, values: Any) -> bool:
    """`in`: `values` must be a list (a literal, a list field or a list claim); false with
    MISSING or anything else."""
    if value is MISSING or not isinstance(values, (list, tuple)):
        return False
    return any(same(value, v) for v in values)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a token may see of a model for `list` or `subscribe` (see the module docstring).

    A record is visible when `everything`, or else when neither `nothing` holds nor a part
    below refuses it: its `field` value's index key is one of `keys` (when `field` is set),
    and `where(record)` holds (when set). `where_row` is `where` on the stored form (the
    values in declaration order), what storage tests while it plans a page."""

    everything: bool = False
    nothing: bool = False
    field: str | None = None
    keys: frozenset[Any] = frozenset()
    key: Callable[[Any], Any] | None = None  # `field`'s index key function (CompiledModel.keys)
    where: Callable[[Record], bool] | None = None
    where_row: Callable[[Sequence[Any]], bool] | None = None

    def visible(self, record: Record | None) -> bool:
        if record is None or self.nothing:
            return False
        if self.everything:
            return True
        if self.field is not None:
            assert self.key is not None
            if self.key(record[self.field]) not in self.keys:
                return False
        return self.where is None or self.where(record)


EVERYTHING: Final = Scope(everything=True)
NOTHING: Final = Scope(nothing=True)


@dataclass(frozen=True, slots=True)
class ModelRules:
    """One model's compiled rules: a function per operation (generated, compiler/rules.py).

    - `list(claims)`, `subscribe(claims)`: the token's `Scope` (change feed and live query
      both use `subscribe`);
    - `get(record, claims)`, `delete(record, claims)`: may this token read / delete it;
    - `create(record, claims)`: the record as it would be stored (defaults applied);
    - `update(before, after, claims)`: both sides of a PUT or PATCH;
    - `text`: operation -> the rules' source text, OR-ed (`""` where none allows it), what
      OpenAPI and AsyncAPI show.
    """

    list: Callable[[Claims], Scope]
    subscribe: Callable[[Claims], Scope]
    get: Callable[[Record, Claims], bool]
    create: Callable[[Record, Claims], bool]
    update: Callable[[Record, Record, Claims], bool]
    delete: Callable[[Record, Claims], bool]
    text: Mapping[str, str]


OPERATIONS: Final = ("list", "get", "create", "update", "delete", "subscribe")
SHORTHANDS: Final = {"read": ("list", "get", "subscribe"), "write": ("create", "update", "delete"), "all": OPERATIONS}


class Refusals:
    """Refusals by operation, for `/metrics` (`"refused": {operation: count}`): a `get`,
    `update` or `delete` of a record the token may not read (answered 404), a write its rule
    refuses (403), a `subscribe` or `replicate` socket refused at its upgrade (403). A list
    is never refused: its rule is a filter. One instance per server, shared by REST and feeds."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys((*OPERATIONS, "replicate"), 0)

    def count(self, operation: str) -> None:
        self.counts[operation] += 1
