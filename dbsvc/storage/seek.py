"""List plans for queries with operators or a cursor: range scans, null tests, keyset seeks.

A `Query` with `ranges`, `nulls` or a `cursor` (dbsvc/operators.py, docs/guide/queries.md)
is planned here; query.py plans the others as before and hands these over. The order is
query.py's: the sort keys in turn, nulls last ascending and first descending, ties on the
id ascending; without `sort`, id order.

Conditions per field (their windows and tests are in conditions.py):

- On a `@sort` field (ranges, and `__null` there) a `Window` of its ordered index: the
  non-null keys between the bounds and/or the nulls. Its size is counted from two
  positions (a bisect each, then the sublists' lengths before each from a Fenwick tree,
  fenwick.py: O(log n)); whether one id is inside it, from the field's key column
  (keycolumns.py), no record read.
- `__null=true` on a field that is only `@filter` is the filter `{None}` (its hash index
  holds the nulls' bucket); `__null=false` there is a test of that bucket per id.
- `search=` (text search): the ids the model's inverted index matches (words.py
  `WordIndex.match`, the smallest query word's ids first), a set: a source of its own in
  the gather below, or a membership test when another source is smaller. Over an `as_of`
  state each record's `@search` fields are cut into words again (dbsvc/textsearch.py), the
  index being the live state's.

Plan (n live records; the page is `limit` ids, plus one to tell whether another page follows):

1. Seek: no filter, no row test, and no window but on the first sort key. `total` is that
   window's size (or n); the page is a walk of the first sort key's index (the id index
   without `sort`) from max(the window's bound, the cursor's position), so a page costs
   O(log n + limit) at any depth (plus a run of equal first keys for a sort on several keys,
   or descending, as query.py says). One key ascending takes the page by position, slices
   of the sublists (`_ascending_page`), one descending by batches (`_descending_page`).
2. One condition (one filter, window or search), no row test, and many matches
   (s * s > WALK_FACTOR * end * n): `total` is that condition's size, and the sort order (id
   order without `sort`) is walked from the cursor's seek testing each id against it (a
   hash bucket, the key column, the search's set): expected O(end * n / s), no match
   gathered. With fewer matches, a window alone in id order (a range or prefix without
   `sort`) takes its first ids from the window's span sorted by id, kept by the index
   (`_first_ids`: one bisect and a slice, O(log s + end)).
3. Otherwise, gather: the smallest source (a filter's bucket union, a window's ids, or every
   live id) is read and each id tested against the other conditions (hash indexes, the
   other windows through their key columns; a record's values only for a row test): `total`
   is what passes, O(s). Small enough (s * s <= WALK_FACTOR * end * n, as in query.py) the
   matches are ordered by their key columns and cut after the cursor; larger, the sort
   order is walked from the cursor's seek keeping only the matches. In id order the first
   `end` of the matches are taken: up to SORTED_AT of them by one sort in C (a search's 168
   matches at 1M: 4 us, against 12 for `heapq.nsmallest`, whose loop over the ids is
   Python's), more by `heapq.nsmallest`, O(s) (a sort's s log s comparisons read ids
   scattered in memory: 4,706 matches sorted cost twice the heap's pass over HTTP).

A descending walk of one key takes the window's entries by position from its top in
growing batches, each widened to whole runs (`OrderedIndex.batches_descending`): a batch's
runs of equal keys are taken from the top as they are, a bisect each (a page inside one run
is a slice of it), and only what is left after a few runs (many distinct keys) is sorted.
A window's span (two bisects) is found once per list and index (conditions.py `Window`):
its count, its walk and its first ids share it.

A cursor is (the sort keys, the id) of the last record of the page before: the next page
starts right after that place in the order, whether or not that record is still there, so
records written meanwhile before the place are not seen and none is seen twice. `total` still
counts every match (the cursor pages, it does not filter). `plan_state` does the same over a
materialised `as_of` state, where every record is read (query.py's `list_state`); a cursor
there, and a list at a watermark planned on the live indexes (query.py `page_as_of`), test
records by their values (`after_test`, `state_test`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from itertools import chain, islice
from operator import itemgetter
from typing import Any

from dbsvc.runtime import CompiledModel, Query
from dbsvc.storage.conditions import Source, Window, after_test, source_test, sources_of, state_test, windows_of
from dbsvc.storage.hashes import HashIndex
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.keptparts import tie_runs
from dbsvc.storage.rows import Stored, unpack
from dbsvc.storage.table import Table

WALK_FACTOR = 2  # query.py's, for the same trade between a sorted gather and a walk
_NOTHING = object()
_NULL = frozenset({None})
KEEPER_AT = 64  # query.py's: fewer candidates are tested by a bisect, not a keeper
SORTED_AT = 1024  # a gather in id order: so many matches or fewer sorted, more taken by a heap
_KEY, _ID = itemgetter(0), itemgetter(1)


def _null_last(kf: Callable[[Any], Any], value: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    def key(record: Any) -> tuple:
        k = kf(value(record))
        return (1, 0) if k is None else (0, k)

    return key


def sort_records(
    records: list[Any],
    sort: Iterable[tuple[str, bool]],
    model: CompiledModel,
    positions: Mapping[str, int] | None = None,
) -> None:
    """Sort in place: the sort keys in order, ties on the id ascending (stable passes;
    `reverse=True` keeps the order of equal items, so ids stay ascending inside ties).
    Records are dicts, or records' values (`rows.unpack`) when `positions` says where
    each field is."""

    def at(f: str) -> itemgetter:
        return itemgetter(f if positions is None else positions[f])

    records.sort(key=at(model.id_field))
    for f, desc in reversed(tuple(sort)):
        records.sort(key=_null_last(model.keys[f], at(f)), reverse=desc)


def has_operators(query: Query) -> bool:
    return bool(query.ranges or query.nulls or query.search) or query.cursor is not None


# ---------------------------------------------------------------------------------------
# Walks in the query's order, from the cursor's place.
# ---------------------------------------------------------------------------------------


def _descending_runs(pairs: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, list[Any]]]:
    """Descending (key, id) pairs (ids descending in a run) -> (key, ids ascending) runs."""
    key: Any = _NOTHING
    run: list[Any] = []
    for k, id_ in pairs:
        if k != key:
            if run:
                run.reverse()
                yield key, run
            key, run = k, [id_]
        else:
            run.append(id_)
    if run:
        run.reverse()
        yield key, run


def _ascending_runs(
    index: OrderedIndex, start: tuple[int, int], stop: tuple[int, int]
) -> Iterator[tuple[Any, list[Any]]]:
    key: Any = _NOTHING
    run: list[Any] = []
    keys = index.key_sublists
    for i, ids in enumerate(index.id_sublists[start[0] : stop[0] + 1], start[0]):
        lo = start[1] if i == start[0] else 0
        hi = stop[1] if i == stop[0] else len(ids)
        sub = keys[i]
        for j in range(lo, hi):
            k = sub[j]
            if k != key:
                if run:
                    yield key, run
                key, run = k, [ids[j]]
            else:
                run.append(ids[j])
    if run:
        yield key, run


def _one_key(table: Table, field: str, desc: bool, window: Window | None, cursor: Any) -> Iterator[Any]:
    """Ids in the order of one sort key, inside `window` (None: every entry), after `cursor`
    ((keys, id) or None).

    The pieces are found first (bisects) and chained, so the ids flow to the page at C
    speed with no generator frame resumed an id (the page is `page_ids`' islice). The
    whole ascending order (no window, no cursor: a walk testing another field's range) is
    the index's sublists chained as they are, no position found."""
    index = table.ordered[field]
    if window is None:
        if cursor is None and not desc:
            return index.ids_ascending()
        window = Window(field)
    start, stop = window.span(index)
    if cursor is not None:
        ck, cid = cursor[0][0], cursor[1]
    pieces: list[Iterable[Any]] = []
    if not desc:
        if cursor is None or ck is not None:
            if cursor is not None:
                start = max(start, index.after(ck, cid))
            pieces.append(index.ids_span(start, stop))
        if window.nulls:
            pieces.append(index.nulls if cursor is None or ck is not None else index.nulls.iter_after(cid))
        return chain.from_iterable(pieces)
    if window.nulls and (cursor is None or ck is None):
        pieces.append(index.nulls if cursor is None else index.nulls.iter_after(cid))
    if cursor is not None and ck is not None:
        if window.holds(ck):  # the rest of the cursor's run, ids ascending
            pieces.append(index.ids_span(max(start, index.after(ck, cid)), min(stop, index.upper(ck, True))))
        stop = min(stop, index.lower(ck, True))
    pieces.append(chain.from_iterable(index.batches_descending(start, stop)))
    return chain.from_iterable(pieces)


def _ascending_page(table: Table, field: str, window: Window, cursor: Any, offset: int, count: int) -> list[Any]:
    """Ids [offset, offset + count) of `_one_key`'s walk of an ascending key, taken by
    position: the window's non-null entries from the cursor's seek (`OrderedIndex.after`)
    sliced out of their sublists (`ids_head`: nothing before the page read), then the nulls
    (last ascending) when the window holds them. A prefix sorted by its own field is a slice
    of the window, where the walk stepped an islice over the entries of the window's first
    sublist before it (bench/README.md, wt-pfx session 15)."""
    index = table.ordered[field]
    start, stop = window.span(index)
    ck = cursor[0][0] if cursor is not None else None
    out: list[Any] = []
    if cursor is None or ck is not None:
        if cursor is not None:
            start = max(start, index.after(ck, cursor[1]))
        out = index.ids_head(start, stop, count, offset)
        if len(out) < count and offset:  # the page reaches the nulls: the entries skipped
            offset = max(offset - index.count_span(start, stop), 0)
    left = count - len(out)
    if left > 0 and window.nulls and index.nulls:
        nulls = index.nulls if cursor is None or ck is not None else index.nulls.iter_after(cursor[1])
        out += islice(nulls, offset, offset + min(left, len(index.nulls)))  # within islice's bound
    return out


def _descending_page(table: Table, field: str, window: Window, cursor: Any, end: int) -> list[Any]:
    """The first `end` ids of `_one_key`'s walk of a descending key, taken as lists rather
    than chained: the nulls' (first descending), the rest of the cursor's run (its three
    positions found at once, `OrderedIndex.cursor_run`), then the runs below it from the top,
    each cut to what is left and sliced out (`head_descending`; many short runs: one batch,
    kept while its sublist is unchanged, keptparts.py `_kept`). A cursor page and a range
    sorted by its own field cost about a page sorted alone (bench/README.md)."""
    index = table.ordered[field]
    start, stop = window.span(index)
    out: list[Any] = []
    ck = cursor[0][0] if cursor is not None else None
    if window.nulls and ck is None:  # no cursor, or one in the nulls: they come first
        out = list(islice(index.nulls if cursor is None else index.nulls.iter_after(cursor[1]), end))
    elif ck is not None:
        first, after, past = index.cursor_run(ck, cursor[1])
        if after < past and window.holds(ck):  # the rest of the cursor's run, ids ascending
            out = index.ids_head(max(start, after), min(stop, past), end)
        if first < stop:
            stop = first
    left = end - len(out)
    if left > 0 and start < stop:
        out += index.head_descending(start, stop, left)
    return out


def _runs(table: Table, field: str, desc: bool, window: Window, cursor: Any) -> Iterator[tuple[Any, list[Any]]]:
    """(key, ids ascending) runs of the first sort key in list order, inside `window`,
    starting with the cursor's run (whole: the caller cuts it)."""
    index = table.ordered[field]
    start, stop = window.span(index)
    ck = cursor[0][0] if cursor is not None else _NOTHING
    nulls = [(None, list(index.nulls))] if window.nulls and index.nulls else []
    if not desc:
        if ck is not None:
            if ck is not _NOTHING:
                start = max(start, index.lower(ck, True))
            yield from _ascending_runs(index, start, stop)
        yield from nulls
        return
    if ck is _NOTHING or ck is None:
        yield from nulls
    if ck is not _NOTHING and ck is not None:
        stop = min(stop, index.upper(ck, True))
    yield from _descending_runs(index.pairs_span_descending(start, stop))


def _walk(table: Table, query: Query, window: Window | None) -> Iterator[Any]:
    """Every id in the query's order after its cursor (inside `window`, a condition on the
    first sort key, when given): the seek of the module docstring."""
    sort, cursor = query.sort, query.cursor
    if not sort:
        return table.pk.iter_after(cursor[1]) if cursor is not None else iter(table.pk)
    field, desc = sort[0]
    if len(sort) == 1:
        return _one_key(table, field, desc, window, cursor)
    return _several_keys(table, query, window or Window(field))


def _several_keys(table: Table, query: Query, window: Window) -> Iterator[Any]:
    (field, desc), rest = query.sort[0], query.sort[1:]
    after = after_test(table, query, by_id=True) if query.cursor is not None else None
    first = True
    for _key, run in _runs(table, field, desc, window, query.cursor):
        if len(run) > 1:
            run = ordered_ids(run, rest, table)
        if first and after is not None:
            run = list(filter(after, run))
        first = False
        yield from run


def ordered_ids(
    ids: Iterable[Any], sort: Iterable[tuple[str, bool]], table: Table, end: int | None = None
) -> list[Any]:
    """`ids` (of live records) in the order of `sort` (then the id): sorted by id, then by
    each sort key from the last, stably, the keys read from the ordered indexes' key
    columns (keycolumns.py), so no record is read. Shared with query.py's plans.

    With `end` (a page's end), only the first `end` are sure to be in place (at least
    those are returned): the ids are ordered by the first key alone, cut after the run of
    equal first keys that holds the `end`-th, and only that head is ordered by the whole
    sort. A bucket of s ids then costs one sort by one key (no sort by id first, none by
    the other keys), where each pass sorted all s: at 1,000,000 posts author 7's 1,000
    posts sorted by `-score,title` 350 -> 85 us in process (bench/README.md)."""
    sort, ids = tuple(sort), list(ids)
    ordered = table.ordered
    if end is None or not sort or end >= len(ids):
        out = sorted(ids)
        for field, desc in reversed(sort):
            out = ordered[field].column.order(out, desc)
        return out
    first, desc = sort[0]
    column = ordered[first].column
    out = column.order(ids, desc)
    get, cut = column.get, max(end, 1)
    last = get(out[cut - 1])
    while cut < len(out) and get(out[cut]) == last:
        cut += 1
    return ordered_ids(out[:cut], sort, table)


def runs_in_order(
    order: OrderedIndex | Any, desc: bool, rest: tuple[tuple[str, bool], ...], table: Table
) -> Iterator[Any]:
    """The ids of `order` (a sort field's ordered index, or a bucket kept in its order,
    buckets.py) in the order of a sort on several keys, lazily: runs of equal first keys,
    each ordered by the other keys (`rest`) and the id; nulls first descending. Shared with
    query.py and bucketplan.py."""
    if desc and order.nulls:  # nulls first descending: one run, ids ascending
        yield from _run_in_order(list(order.nulls), rest, table)
    run: list[Any] = []
    current: Any = _NOTHING
    pairs = order.pairs_descending() if desc else iter(order)
    for key, id_ in pairs:
        if key != current or (key is None) != (current is None):
            if run:
                yield from _run_in_order(run, rest, table)
                run = []
            current = key
        run.append(id_)
    if run:
        yield from _run_in_order(run, rest, table)


def page_in_order(
    order: OrderedIndex | Any, desc: bool, sort: tuple[tuple[str, bool], ...], table: Table, offset: int, end: int
) -> list[Any] | None:
    """Ids [offset, end) of `order` (a sort field's ordered index, or a bucket kept in its
    order) in the order of `sort` (first key `order`'s, then others): what `runs_in_order`
    gives, found by position instead of a generator step an entry before the page.

    The ids at [offset, end) by the first key alone are widened to whole runs of equal
    first keys at both ends: descending, the span `runs_descending` keeps (by the sublists'
    counts, whole runs already, so nothing is looked up) and its tied runs kept beside it
    (`ties_descending`: a dict probe, no first key read); ascending, `ids_slice` plus the
    ids of its end runs before the first and after the last (a run's ids ascend, so each is
    a bisect of `run_ids`), its tied runs found from their keys (`tie_runs`). Only those
    runs are then ordered by the other keys (`_ties_in_order`); the others are in order
    already (a float sort field's runs at 1,000,000 records, mostly). O(log n + page + the
    two end runs).

    None, and the caller walks the runs (`runs_in_order`, lazily, stopping at the page's
    end), when `order` holds nulls (a run of their own, first descending, last ascending),
    and for an ascending first page, where the walk of a few pairs costs less than the
    slice and its run's look-up. At 1,000,000 posts author 7's first page by `-score,title`
    (one tie) costs about its page by `-score` (bench/README.md, wt-tsk)."""
    if order.nulls or end <= offset or not (offset or desc):
        return None
    if desc:
        ids, before, span = order.runs_descending(offset, end)
        ties = order.ties_descending(*span)
    else:
        column = table.ordered[sort[0][0]].column
        get = column.get if column.far or column.nulls else column.slots.__getitem__
        ids = order.ids_slice(offset, end)
        if not ids:
            return ids
        if len(ids) == end - offset:  # the rest of the last one's run
            run = order.run_ids(get(ids[-1]))
            ids.extend(run[bisect_right(run, ids[-1]) :])
        run = order.run_ids(get(ids[0]))  # the start of the first one's run
        before = bisect_left(run, ids[0])
        ids[:0] = run[:before]
        ties = tie_runs(list(map(get, ids)))
    if ties:
        ids = _ties_in_order(ids, ties, sort[1:], table)
    return ids[before : before + end - offset]


def _ties_in_order(ids: list[Any], ties: list[tuple[int, int]], rest: tuple, table: Table) -> list[Any]:
    """A copy of `ids` (whole runs of equal first keys, each ascending, the runs in order;
    the caller's, only read) with each tied run (`ties`: its (lo, hi) bounds) ordered by
    the other keys (`rest`) and the id. One other key whose column holds none of a run's
    ids as null is one stable sort of it by that column's slots (the run's ids ascend, so
    equal keys stay in id order), where `ordered_ids` sorted it by id and then by key
    through two calls more (bench/README.md, wt-tsk)."""
    out = list(ids)
    column = table.ordered[rest[0][0]].column if len(rest) == 1 else None
    for lo, hi in ties:
        run = out[lo:hi]
        if column is not None and not column.far and column.nulls.isdisjoint(run):
            run.sort(key=column.slots.__getitem__, reverse=rest[0][1])
            out[lo:hi] = run
        else:
            out[lo:hi] = ordered_ids(run, rest, table)
    return out


def _run_in_order(run: list[Any], rest: tuple[tuple[str, bool], ...], table: Table) -> list[Any]:
    """The ids of a run of equal first keys, ordered by the other keys and the id."""
    return ordered_ids(run, rest, table) if len(run) > 1 else run


def page_ids(ids: Iterator[Any], offset: int, count: int, keep: Callable[[Any], Any] | None = None) -> list[Any]:
    """Ids [offset, offset + count) of `ids` (those `keep` says yes to, when given): an
    islice (over a filter) at C speed, no Python code an id. Shared with query.py."""
    if count <= 0:
        return []
    return list(islice(ids if keep is None else filter(keep, ids), offset, offset + count))


# ---------------------------------------------------------------------------------------
# Plans.
# ---------------------------------------------------------------------------------------


def plan_operators(table: Table, query: Query) -> tuple[list[Any], int, bool]:
    """(the page's ids, total, whether more follow) of a query with operators or a cursor
    over the live state (module docstring)."""
    windows, filters, not_null = windows_of(table, query)
    sort, limit, offset = query.sort, query.limit, query.offset
    first = sort[0][0] if sort else None
    if not filters and not not_null and not query.search and query.where_row is None and set(windows) <= {first}:
        window = windows.get(first) if first is not None else None
        total = window.count(table.ordered[first]) if window is not None and first is not None else len(table.live)
        if limit == 0 or total == 0:
            return [], total, False
        if len(sort) == 1 and sort[0][1]:
            ids = _descending_page(table, sort[0][0], window or Window(sort[0][0]), query.cursor, offset + limit + 1)
            ids = ids[offset:]
        elif len(sort) == 1:
            ids = _ascending_page(table, sort[0][0], window or Window(sort[0][0]), query.cursor, offset, limit + 1)
        else:
            ids = page_ids(_walk(table, query, window), offset, limit + 1)
        return ids[:limit], total, len(ids) > limit
    sources, found = sources_of(table, query, windows, filters)
    end, n = offset + limit + 1, len(table.live)
    if len(sources) == 1 and not not_null and query.where_row is None:
        size, kind, field = sources[0]
        if limit == 0 or size == 0:
            return [], size, False
        if size * size > WALK_FACTOR * end * n:  # one condition, many matches: walk the order testing it
            keep = source_test(table, kind, field, filters, windows, found)
            ids = page_ids(_walk(table, query, windows.get(first) if first else None), offset, limit + 1, keep)
            return ids[:limit], size, len(ids) > limit
        if not sort and kind == "filter" and isinstance(index := table.hashes[field], HashIndex):
            # id order under one filter's key: a slice of its sorted bucket, not a set of it
            sliced = index.first_after(filters[field], query.cursor[1] if query.cursor is not None else None, end)
            if sliced is not None:
                sliced = sliced[offset:]
                return sliced[:limit], size, len(sliced) > limit
        if not sort and kind == "window":  # id order: the window's first ids, not all of them
            ids = _first_ids(table, windows[field], end, query.cursor[1] if query.cursor is not None else None)
            ids = ids[offset:]
            return ids[:limit], size, len(ids) > limit
    matched = _gather(table, query, windows, filters, not_null, sources, found)
    total = len(matched)
    if limit == 0 or total == 0:
        return [], total, False
    if not sort:  # id order: the first `end` ids after the cursor, one sort in C
        if query.cursor is not None:
            matched = [i for i in matched if i > query.cursor[1]]
        if len(matched) <= SORTED_AT:  # few: one sort in C beats heapq.nsmallest's loop in Python
            matched.sort()
            ids = matched[offset:end]
        else:  # many: one comparison an id with the heap's top beats a sort's log s of them
            ids = heapq.nsmallest(end, matched)[offset:]
    elif total * total <= WALK_FACTOR * end * n:
        chosen = matched
        if query.cursor is not None:
            chosen = list(filter(after_test(table, query, by_id=True), matched))
        ids = ordered_ids(chosen, sort, table, end)[offset:end]
    else:
        ids = page_ids(_walk(table, query, windows.get(sort[0][0])), offset, limit + 1, frozenset(matched).__contains__)
    return ids[:limit], total, len(ids) > limit


def _first_ids(table: Table, window: Window, end: int, after: Any) -> list[Any]:
    """The first `end` ids of `window` in id order, after the id `after` (None: from the
    first): one bisect and a slice of the window's span sorted by id, which the index keeps
    until a sublist it reaches changes (`OrderedIndex.span_by_id`), plus the nulls' first
    ones when the window holds them. O(log s + end) once kept; O(s log(s / LOAD)) to make,
    where gathering the window costs O(s) at every list: a prefix of 1,480 ids at 1,000,000
    posts."""
    index = table.ordered[window.field]
    ids = index.span_by_id(*window.span(index))
    lo = 0 if after is None else bisect_right(ids, after)
    out = ids[lo : lo + end]
    if window.nulls and index.nulls:
        # at most every null: a live query's Init asks for sys.maxsize ids, past islice's bound
        out += islice(index.nulls if after is None else index.nulls.iter_after(after), min(end, len(index.nulls)))
        out.sort()
        del out[end:]
    return out


def _gather(
    table: Table,
    query: Query,
    windows: dict[str, Window],
    filters: Mapping[str, frozenset],
    not_null: list[str],
    sources: list[Source],
    found: set[Any] | None,
) -> list[Any]:
    """Every live id passing the query's conditions (the cursor aside), from the smallest
    source, the others tested per id: hash indexes, a search's set, the windows through
    the key columns; a record is read only for a row test."""
    candidates: Iterable[Any]
    if sources:
        size, kind, chosen = sources[0]
        if size == 0:
            return []
        if kind == "filter":
            candidates = table.hashes[chosen].ids(filters[chosen])
        elif kind == "search":
            assert found is not None
            candidates = found
        else:
            candidates = windows[chosen].ids(table.ordered[chosen])
    else:
        size, kind, chosen = len(table.live), "", ""
        candidates = table.pk
    # Each other condition as a test of an id, chained as filters: C speed from one to the
    # next, one Python call an id and test at most (a bucket's keeper and a search's set
    # are C calls; a window's is one comparison, conditions.py `window_test`).
    tests: list[Callable[[Any], Any]] = []
    for f, keys in filters.items():
        if kind == "filter" and f == chosen:
            continue
        if size >= KEEPER_AT and len(keys) == 1:  # a set or bit array, kept (hashes.py)
            tests.append(table.hashes[f].keeper(next(iter(keys))))
        else:  # few candidates: a bisect each costs less than making the keeper
            tests.append(partial(table.hashes[f].has, keys))
    for f in not_null:
        tests.append(partial(_not_null, table.hashes[f].has))
    if found is not None and kind != "search":
        tests.append(found.__contains__)
    for f in windows:
        if not (kind == "window" and f == chosen):
            tests.append(source_test(table, "window", f, filters, windows, found))
    row = query.where_row
    if row is not None:
        live = table.live
        tests.append(lambda id_: row(unpack(live[id_])))
    for test in tests:
        candidates = filter(test, candidates)
    return list(candidates)


def _not_null(has: Callable[[Any, Any], bool], id_: Any) -> bool:
    return not has(_NULL, id_)


def plan_state(state: Mapping[Any, Stored], table: Table, query: Query) -> tuple[list[dict], int, bool]:
    """(page, total, whether more follow) over an `as_of` state: every record read, tested,
    ordered, then cut after the cursor and paged."""
    model = table.model
    chosen = list(filter(state_test(table, query), map(unpack, state.values())))
    total = len(chosen)
    sort_records(chosen, query.sort, model, table.positions)
    if query.cursor is not None:
        after = after_test(table, query)
        chosen = [v for v in chosen if after(v)]
    page = chosen[query.offset : query.offset + query.limit + 1] if query.limit else []
    more = len(page) > query.limit
    return list(map(model.decode, page[: query.limit])), total, more
