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


# ---------------------------------------------------------------------------------------
# What the generated scope functions assemble a Scope from (compiler/rules.py).
# ---------------------------------------------------------------------------------------


def converted(value: Any, convert: Callable[[str], Any]) -> Any:
    """A claim in the typed form of the field it is compared with (a datetime's index key,
    a uuid in lower case): `convert(text)` of a string claim, None for null, MISSING for any
    other kind or a text `convert` refuses (answers None); a list claim item by item (for
    `in`), the refused items left out. So rule 2 holds for typed fields too."""
    if isinstance(value, list):
        items = [converted(item, convert) for item in value]
        return [item for item in items if item is not MISSING]
    if value is None:
        return None
    if not isinstance(value, str):
        return MISSING
    result = convert(value)
    return MISSING if result is None else result


def claim_keys(
    value: Any, kinds: tuple[type, ...], convert: Callable[[Any], Any], many: bool = False, nullable: bool = False
) -> frozenset[Any]:
    """The index keys a claim pins an `@filter` field to: `record.F == token.C` one,
    `record.F in token.C` each item of a list claim (`many`). Only values of F's JSON
    `kinds` count (rule 2: exact types, so `true` is never an int), null only when F is
    `nullable`; each goes through `convert` (F's key, or a parser answering None for a text
    it refuses). A missing claim, or one of another kind, pins nothing: an empty set."""
    if many and not isinstance(value, list):
        return frozenset()
    keys: set[Any] = set()
    for item in value if many else (value,):
        if item is None:
            if nullable:
                keys.add(None)
            continue
        if type(item) not in kinds:
            continue
        key = convert(item)
        if key is not None:
            keys.add(key)
    return frozenset(keys)


@dataclass(frozen=True, slots=True)
class Part:
    """One OR-ed branch of a read rule that the token's claims leave possible: a record is
    in it when its `field` value (at `position` in the stored values) has its index key in
    `keys` (when `field` is set) and `where` holds (when set; `where_row` on the values)."""

    field: str | None = None
    position: int = 0
    keys: frozenset[Any] = frozenset()
    key: Callable[[Any], Any] | None = None
    where: Callable[[Record], bool] | None = None
    where_row: Callable[[Sequence[Any]], bool] | None = None

    def holds(self, subject: Any, row: bool) -> bool:
        if self.field is not None:
            assert self.key is not None
            if self.key(subject[self.position] if row else subject[self.field]) not in self.keys:
                return False
        test = self.where_row if row else self.where
        return test is None or bool(test(subject))


def scope_of(parts: Sequence[Part]) -> Scope:
    """The Scope of the branches a token leaves possible: NOTHING when none can hold (a
    pinned branch whose claim pins no key cannot), EVERYTHING when one holds for every
    record, an index lookup when every branch pins the same field (their keys united; the
    branches' own tests only when there is more than one or they test more), else a scan."""
    live = [part for part in parts if part.field is None or part.keys]
    if not live:
        return NOTHING
    if any(part.field is None and part.where is None for part in live):
        return EVERYTHING
    fields = {part.field for part in live}
    if len(fields) == 1 and None not in fields:
        first = live[0]
        if len(live) == 1:
            return Scope(
                field=first.field, keys=first.keys, key=first.key, where=first.where, where_row=first.where_row
            )
        keys = frozenset().union(*(part.keys for part in live))
        return Scope(field=first.field, keys=keys, key=first.key, where=_any(live, False), where_row=_any(live, True))
    return Scope(where=_any(live, False), where_row=_any(live, True))


def _any(parts: list[Part], row: bool) -> Callable[[Any], bool]:
    def test(subject: Any) -> bool:
        for part in parts:
            if part.holds(subject, row):
                return True
        return False

    return test


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
