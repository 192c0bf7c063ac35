"""A list query's conditions, as tests: windows of ordered indexes, and whether an id or a
record's values pass (seek.py and query.py plan with them).

- `Window`: which entries of a `@sort` field's ordered index a query keeps (its ranges,
  prefix and `__null` on that field); `windows_of` makes them from a `Query`, with the
  filters that `__null=true` on a filter-only field becomes, and the filter-only fields that
  must not be null.
- By id, from the indexes, no record read (live lists): `sources_of` (the conditions that
  can hand out their ids, smallest first: a filter's buckets, a window, a search's matches),
  `source_test` (one of them as a test of an id: a hash bucket, the key column,
  keycolumns.py, `window_test`, or the search's set), `live_test` (all of them; a row test reads the
  record), `after_test(by_id=True)` (after a cursor, by the key columns).
- By values (`rows.unpack` of a stored record: a materialised `as_of` state, or the records
  a list at a watermark must see as they were then): `value_test`, `state_test`,
  `search_test` (the tokenizer of the live index, dbsvc/textsearch.py), `after_test`.

The order they test against is query.py's (nulls last ascending, first descending, ties on
the id ascending). Imports storage's table, rows, indexes and key columns, runtime's Query,
and textsearch; holds no state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from itertools import chain
from typing import Any

from dbsvc.runtime import Query
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.keycolumns import KeyColumn
from dbsvc.storage.rows import unpack
from dbsvc.storage.searches import matches as kept_matches
from dbsvc.storage.table import Table
from dbsvc.textsearch import matches


def search_test(table: Table, words: tuple[str, ...]) -> Callable[[Any], bool]:
    """Whether a record's values (its @search fields' words) match `words`: the as_of
    lists' test, with the tokenizer the live index uses."""
    positions = table.words.positions if table.words is not None else ()
    return lambda values: matches((values[p] for p in positions), words)


class Window:
    """Which entries of a sort field's ordered index a query keeps: non-null keys between
    `low` and `high` (None: unbounded) when `values`, the nulls when `nulls`.

    Made for one list (`windows_of`) and used within its synchronous call, so an index
    does not change meanwhile: `span` keeps the last index's positions and gives them again
    (a plan asks for the count, then the walk, then the first ids: two bisects each)."""

    __slots__ = ("_span", "_spanned", "field", "high", "high_in", "low", "low_in", "nulls", "values")

    def __init__(
        self,
        field: str,
        low: Any = None,
        low_in: bool = True,
        high: Any = None,
        high_in: bool = True,
        nulls: bool = True,
    ) -> None:
        self.field = field
        self.low, self.low_in, self.high, self.high_in = low, low_in, high, high_in
        self.values, self.nulls = True, nulls
        self._spanned: Any = None  # the index `_span` was found in
        self._span: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))

    def holds(self, key: Any) -> bool:
        if key is None:
            return self.nulls
        if not self.values:
            return False
        low, high = self.low, self.high
        if low is not None and (key < low or (key == low and not self.low_in)):
            return False
        return high is None or key < high or (key == high and self.high_in)

    def span(self, index: OrderedIndex) -> tuple[tuple[int, int], tuple[int, int]]:
        """Positions [start, stop) of the window's non-null keys in `index` (the last index's
        kept: the class docstring)."""
        if self._spanned is index:
            return self._span
        if not self.values:
            span = index.end, index.end
        else:
            start = (0, 0) if self.low is None else index.lower(self.low, self.low_in)
            stop = index.end if self.high is None else index.lower(self.high, not self.high_in)  # `upper`
            span = start, stop
        self._spanned, self._span = index, span
        return span

    def count(self, index: OrderedIndex) -> int:
        start, stop = self.span(index)
        return index.count_span(start, stop) + (len(index.nulls) if self.nulls else 0)

    def ids(self, index: OrderedIndex) -> Iterator[Any]:
        start, stop = self.span(index)
        if self.nulls:
            return chain(index.ids_span(start, stop), index.nulls)
        return index.ids_span(start, stop)


def windows_of(table: Table, query: Query) -> tuple[dict[str, Window], Mapping[str, frozenset], list[str]]:
    """(a window per @sort field with a condition, the filters with `__null=true` on filter-
    only fields folded in, the filter-only fields that must not be null). The filters are
    the query's own mapping when there is no `__null` to fold in: callers only read them."""
    windows: dict[str, Window] = {}
    not_null: list[str] = []
    for field, low, low_in, high, high_in in query.ranges:
        windows[field] = Window(field, low, low_in, high, high_in, False)
    if not query.nulls:  # nothing to fold in: the query's own filters, never written
        return windows, query.filters, not_null
    filters = dict(query.filters)
    for field, wanted in query.nulls:
        if field in table.ordered:
            w = windows.setdefault(field, Window(field))
            if wanted:
                w.values = False
            else:
                w.nulls = False
        elif wanted:
            keys = filters.get(field)
            filters[field] = frozenset({None}) if keys is None else keys & {None}
        else:
            not_null.append(field)
    return windows, filters, not_null


def value_test(table: Table, windows: Iterable[Window], where_row: Callable | None) -> Callable[[Any], bool] | None:
    """A test of a record's values against `windows` and the row test, or None."""
    checks = [(table.positions[w.field], table.keys[w.field], w.holds) for w in windows]
    if not checks:
        return where_row
    if len(checks) == 1 and where_row is None:
        ((pos, key, holds),) = checks
        return lambda values: holds(key(values[pos]))

    def test(values: Any) -> bool:
        for pos, key, holds in checks:
            if not holds(key(values[pos])):
                return False
        return where_row is None or bool(where_row(values))

    return test


def after_test(table: Table, query: Query, by_id: bool = False) -> Callable[[Any], bool]:
    """Whether a record comes after the cursor in the query's order: given its values, or
    with `by_id` its id (the keys then read from the key columns, keycolumns.py)."""
    assert query.cursor is not None
    ckeys, cid = query.cursor
    sort = tuple(query.sort)
    fields = [(desc, ck) for (_f, desc), ck in zip(sort, ckeys)]
    getters = [table.ordered[f].column.get for f, _desc in sort]
    at = [(table.positions[f], table.keys[f]) for f, _desc in sort]
    id_pos = table.id_position

    def after(item: Any) -> bool:
        if by_id:
            keys, id_ = [get(item) for get in getters], item
        else:
            keys, id_ = [key(item[pos]) for pos, key in at], item[id_pos]
        for k, (desc, ck) in zip(keys, fields):
            if k is None or ck is None:
                if k is None and ck is None:
                    continue
                return (k is None) != desc  # ascending: nulls last; descending: nulls first
            if k != ck:
                return bool(k < ck if desc else k > ck)
        return bool(id_ > cid)

    return after


Source = tuple[int, str, str]  # (its size, "filter" | "window" | "search", its field)


def sources_of(
    table: Table, query: Query, windows: dict[str, Window], filters: Mapping[str, frozenset]
) -> tuple[list[Source], set[Any] | None]:
    """(each condition that can hand out its ids, smallest first; a search's matches)."""
    sources: list[Source] = []  # loops, not comprehensions: no frame made for none or one
    for f, k in filters.items():
        sources.append((table.hashes[f].count(k), "filter", f))
    for f, w in windows.items():
        sources.append((w.count(table.ordered[f]), "window", f))
    found: set[Any] | None = None
    if query.search:
        found = kept_matches(table, query.search)
        sources.append((len(found), "search", ""))
    if len(sources) > 1:
        sources.sort()
    return sources, found


def source_test(
    table: Table,
    kind: str,
    field: str,
    filters: Mapping[str, frozenset],
    windows: dict[str, Window],
    found: set[Any] | None,
) -> Callable[[Any], Any]:
    """Whether an id passes one source's condition, asked of an index, no record read."""
    if kind == "search":
        assert found is not None
        return found.__contains__
    if kind == "filter":
        index, keys = table.hashes[field], filters[field]
        if len(keys) == 1:
            return index.keeper(next(iter(keys)))
        has = index.has
        return lambda id_: has(keys, id_)
    return window_test(table.ordered[field].column, windows[field])


def window_test(column: KeyColumn, window: Window) -> Callable[[Any], bool]:
    """Whether a live id's key is inside `window`, asked of the field's key column: one
    Python call an id, a comparison of the slot, when the column holds every id in its
    slots and none is null (a walk testing each id it passes, seek.py: the common case),
    else `holds(get(id))`. Made and used within one synchronous call, so the column does
    not change meanwhile. Same answers as `Window.holds` (the key objects are the same)."""
    get, holds = column.get, window.holds
    if column.far or column.nulls or not window.values or (window.low is None and window.high is None):
        return lambda id_: holds(get(id_))
    slots, low, high = column.slots, window.low, window.high
    if high is None:
        if window.low_in:
            return lambda id_: slots[id_] >= low
        return lambda id_: slots[id_] > low
    if low is None:
        if window.high_in:
            return lambda id_: slots[id_] <= high
        return lambda id_: slots[id_] < high
    if window.low_in and not window.high_in:  # a prefix: [p, prefix_end(p))
        return lambda id_: low <= slots[id_] < high
    return lambda id_: holds(slots[id_])


def live_test(table: Table, query: Query) -> Callable[[Any], bool]:
    """Whether a live id passes every condition of `query` (the cursor aside), asked of
    the indexes as `_gather` asks them: its record is read only for a row test."""
    windows, filters, not_null = windows_of(table, query)
    found = None
    if query.search:
        found = kept_matches(table, query.search)
    tests = [source_test(table, "filter", f, filters, windows, found) for f in filters]
    tests += [source_test(table, "window", f, filters, windows, found) for f in windows]
    if found is not None:
        tests.append(source_test(table, "search", "", filters, windows, found))
    null = frozenset({None})
    tests += [partial(lacks, table.hashes[f].has, null) for f in not_null]
    row, live = query.where_row, table.live

    def passes(id_: Any) -> bool:
        for test in tests:
            if not test(id_):
                return False
        return row is None or bool(row(unpack(live[id_])))

    return passes


def lacks(has: Callable[[Any, Any], bool], keys: Any, id_: Any) -> bool:
    return not has(keys, id_)


def state_test(table: Table, query: Query) -> Callable[[Any], bool]:
    """Whether a record's values pass every condition of `query` (the cursor aside): its
    filters, operators, search and row test, read from the values, as a list over an
    `as_of` state tests its records."""
    model = table.model
    windows, filters, not_null = windows_of(table, query)
    test = value_test(table, windows.values(), query.where_row)
    searched = search_test(table, query.search) if query.search else None
    not_null_at = [table.positions[f] for f in not_null]

    def passes(values: Any) -> bool:
        if filters and not model.passes(values, filters):
            return False
        for pos in not_null_at:
            if values[pos] is None:
                return False
        if test is not None and not test(values):
            return False
        return searched is None or searched(values)

    return passes
