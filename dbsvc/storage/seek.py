"""List plans for queries with operators or a cursor: range scans, null tests, keyset seeks.

A `Query` with `ranges`, `nulls` or a `cursor` (dbsvc/operators.py, dbsvc/cursors.py,
docs/guide/queries.md) is planned here; query.py plans the others as before and hands these over. The order is
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
   of the sublists (walks.py `ascending_page`), one descending by batches (`descending_page`);
   id order at a cursor slices the id index after the cursor's id (sortedlist.py `head_after`).
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


The walks of the query's order from the cursor's place (plan 1's page, the walks of plans 2
and 3) are walks.py's; the ordering of ids by their key columns (`ordered_ids`, the runs of
a sort on several keys, `page_ids`) is orders.py's, shared with query.py and bucketplan.py.

A cursor is (the sort keys, the id) of the last record of the page before (walks.py).
`total` still counts every match (the cursor pages, it does not filter). `plan_state` does
the same over a materialised `as_of` state, where every record is read (query.py's
`list_state`); a cursor there, and a list at a watermark planned on the live indexes
(query.py `page_as_of`), test records by their values (`after_test`, `state_test`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from itertools import islice
from typing import Any

from dbsvc.runtime import Query
from dbsvc.storage.conditions import Source, Window, after_test, source_test, sources_of, state_test, windows_of
from dbsvc.storage.hashes import HashIndex, ids_after
from dbsvc.storage.orders import ordered_ids, page_ids, sort_records
from dbsvc.storage.rows import Stored, unpack
from dbsvc.storage.table import Table
from dbsvc.storage.walks import ascending_page, descending_page, walk

WALK_FACTOR = 2  # query.py's, for the same trade between a sorted gather and a walk
_NULL = frozenset({None})
KEEPER_AT = 64  # query.py's: fewer candidates are tested by a bisect, not a keeper
SORTED_AT = 1024  # a gather in id order: so many matches or fewer sorted, more taken by a heap


def has_operators(query: Query) -> bool:
    return bool(query.ranges or query.nulls or query.search) or query.cursor is not None


def plan_operators(table: Table, query: Query) -> tuple[list[Any], int, bool]:
    """(the page's ids, total, whether more follow) of a query with operators or a cursor
    over the live state (module docstring)."""
    if not (query.filters or query.ranges or query.nulls or query.search) and query.where_row is None:
        # a cursor alone (a page of a list walked by its Links): plan 1 over the whole
        # index, no window, filter or source looked for
        return _seek(table, query, None, len(table.live))
    if len(query.filters) == 1 and not (query.sort or query.ranges or query.nulls or query.search):
        # one filter in id order (a parent's children walked by their Links): plan 2's
        # slice of its sorted bucket, asked of the bucket alone
        planned = _one_bucket(table, query) if query.where_row is None else None
        if planned is not None:
            return planned
    windows, filters, not_null = windows_of(table, query)
    sort, limit, offset = query.sort, query.limit, query.offset
    first = sort[0][0] if sort else None
    if not filters and not not_null and not query.search and query.where_row is None and set(windows) <= {first}:
        window = windows.get(first) if first is not None else None
        total = window.count(table.ordered[first]) if window is not None and first is not None else len(table.live)
        return _seek(table, query, window, total)
    sources, found = sources_of(table, query, windows, filters)
    end, n = offset + limit + 1, len(table.live)
    if len(sources) == 1 and not not_null and query.where_row is None:
        size, kind, field = sources[0]
        if limit == 0 or size == 0:
            return [], size, False
        if size * size > WALK_FACTOR * end * n:  # one condition, many matches: walk the order testing it
            keep = source_test(table, kind, field, filters, windows, found)
            ids = page_ids(walk(table, query, windows.get(first) if first else None), offset, limit + 1, keep)
            return ids[:limit], size, len(ids) > limit
        if not sort and kind == "filter" and isinstance(index := table.hashes[field], HashIndex):
            # id order under one filter's key: a slice of its sorted bucket, not a set of it
            sliced = index.first_after(
                filters[field], query.cursor[1] if query.cursor is not None else None, end, offset
            )
            if sliced is not None:
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
        ids = page_ids(walk(table, query, windows.get(sort[0][0])), offset, limit + 1, frozenset(matched).__contains__)
    return ids[:limit], total, len(ids) > limit


def _seek(table: Table, query: Query, window: Window | None, total: int) -> tuple[list[Any], int, bool]:
    """Plan 1 (module docstring): the page a walk of the first sort key's index (the id
    index without `sort`) gives from the cursor's seek, inside `window` (None: the whole
    index), of a list of `total` matches."""
    sort, limit, offset = query.sort, query.limit, query.offset
    if limit == 0 or total == 0:
        return [], total, False
    if not sort and window is None and query.cursor is not None:  # id order: sliced after the cursor's id
        ids = table.pk.head_after(query.cursor[1], offset, limit + 1)
    elif len(sort) == 1 and sort[0][1]:
        ids = descending_page(table, sort[0][0], window, query.cursor, offset + limit + 1)
        if offset:
            ids = ids[offset:]
    elif len(sort) == 1:
        ids = ascending_page(table, sort[0][0], window or Window(sort[0][0]), query.cursor, offset, limit + 1)
    else:
        ids = page_ids(walk(table, query, window), offset, limit + 1)
    return ids[:limit], total, len(ids) > limit


def _one_bucket(table: Table, query: Query) -> tuple[list[Any], int, bool] | None:
    """Plan 2 of a query in id order whose one condition is one filter (its one key's
    bucket a sorted list): the bucket's first ids after the cursor, a bisect and a slice;
    None when the filter's index is not a `HashIndex`, the filter has several keys, the
    bucket is not a list, or the matches are many enough to be walked (the whole plan then
    decides, as it always did). The bucket is looked up once for its count and its slice,
    the offset cut by the same slice (where `count`, then `first_after`, found it twice:
    two calls and a slice more a page of the "cursor at random + filter" row)."""
    ((field, keys),) = query.filters.items()
    index = table.hashes[field]
    if not isinstance(index, HashIndex) or len(keys) != 1:
        return None
    (key,) = keys
    bucket = index.buckets.get(key, ())
    size = len(bucket)
    limit, offset = query.limit, query.offset
    if limit == 0 or size == 0:
        return [], size, False
    end = offset + limit + 1
    if size * size > WALK_FACTOR * end * len(table.live) or type(bucket) is not list:
        return None
    # plan_operators runs only when has_operators holds, and the path here leaves the query
    # no range, null test or search: only a cursor brings it (a first page is query.py's).
    assert query.cursor is not None, "a one-filter page in id order reaches _one_bucket only with a cursor"
    sliced = ids_after(bucket, query.cursor[1], offset, end)
    return sliced[:limit], size, len(sliced) > limit


def _first_ids(table: Table, window: Window, end: int, after: Any) -> list[Any]:
    """The first `end` ids of `window` in id order, after the id `after` (None: from the
    first): one bisect and a slice of the window's span sorted by id, which the index keeps
    until a sublist it reaches changes (`OrderedIndex.span_by_id`), plus the nulls' first
    ones when the window holds them. O(log s + end) once kept; O(s log(s / LOAD)) to make,
    where gathering the window costs O(s) at every list: a prefix of 1,480 ids at 1,000,000
    posts."""
    index = table.ordered[window.field]
    ids = index.span_by_id(*window.span(index))
    out = ids_after(ids, after, 0, end)
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
