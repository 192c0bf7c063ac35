"""Walks of the live ids in a query's order from its cursor's place, and one key's page by position.

The order is query.py's (orders.py); these walks are seek.py's plan 1 (a seek: a page of
the first sort key's index from max(the window's bound, the cursor's position)) and the
order its plans 2 and 3 walk testing each id, when a gather would cost more.

- `walk`: every id in the query's order after its cursor, inside a window on the first
  sort key when given: the id index without `sort`, one key's pieces chained (`_one_key`),
  or runs of equal first keys each ordered by the other keys (`_several_keys`).
- `ascending_page` / `descending_page`: one key's page taken by position rather than
  stepped through: slices of the sublists ascending, runs from the top descending.

A descending walk of one key takes the window's entries by position from its top in
growing batches, each widened to whole runs (`OrderedIndex.batches_descending`): a batch's
runs of equal keys are taken from the top as they are, a bisect each (a page inside one run
is a slice of it), and only what is left after a few runs (many distinct keys) is sorted.
A window's span (two bisects) is found once per list and index (conditions.py `Window`):
its count, its walk and its first ids share it.

A cursor is (the sort keys, the id) of the last record of the page before: the next page
starts right after that place in the order, whether or not that record is still there, so
records written meanwhile before the place are not seen and none is seen twice.

Split from seek.py (session 17): the plans stay there, the walks they page are here.
Imports conditions.py, orders.py, the indexes and the table; never a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, islice
from typing import Any

from dbsvc.runtime import Query
from dbsvc.storage.conditions import Window, after_test
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.orders import ordered_ids
from dbsvc.storage.table import Table

_NOTHING = object()


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


def ascending_page(table: Table, field: str, window: Window, cursor: Any, offset: int, count: int) -> list[Any]:
    """Ids [offset, offset + count) of `_one_key`'s walk of an ascending key, taken by
    position: the window's non-null entries from the cursor's seek (`OrderedIndex.after`)
    sliced out of their sublists (`ids_head`: nothing before the page read), then the nulls
    (last ascending) when the window holds them. A prefix sorted by its own field is a slice
    of the window, where the walk stepped an islice over the entries of the window's first
    sublist before it (bench/README.md, wt-pfx session 15).

    An offset that runs past the non-null entries goes on into the nulls, less the entries
    it skipped. Only a window holding both (no condition on the field: a seek at a cursor)
    reaches the nulls with an offset left, which the HTTP parser never asks (it refuses
    `cursor` beside `offset`) but the store's `Query` may, as every other plan answers it
    (tests/storage/test_storage_cursor_offsets.py; docs/decisions.md, wt-filt)."""
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


def descending_page(table: Table, field: str, window: Window | None, cursor: Any, end: int) -> list[Any]:
    """The first `end` ids of `_one_key`'s walk of a descending key, taken as lists rather
    than chained: the nulls' (first descending), the rest of the cursor's run (its three
    positions found at once, `OrderedIndex.cursor_run`), then the runs below it from the top,
    each cut to what is left and sliced out (`head_descending`; many short runs: one batch,
    kept while its sublist is unchanged, keptparts.py `_kept`). A cursor page and a range
    sorted by its own field cost about a page sorted alone (bench/README.md). `window` None
    is the whole index, its `Window` made only past the first branch (seek.py: a cursor
    alone, whose page is the first branch's unless its key is above every key)."""
    index = table.ordered[field]
    ck = cursor[0][0] if cursor is not None else None
    if ck is not None and (window is None or (window.values and window.low is None and window.high is None)):
        # a cursor at a key, the whole index: past the nulls (first descending), so the
        # page starts with one slice (keptparts.py `head_after_descending`): the rest of
        # the cursor's run itself (its ids ascend, as the page wants them) when the page
        # ends in it, the run goes on into the next sublists or no order of its sublist is
        # kept; else its sublist's kept descending order (a small index); then what follows
        # below it
        found = index.head_after_descending(ck, cursor[1], end)
        if found is not None:
            out, below = found
            if len(out) < end and below > (0, 0):  # the rest from below the sublist (or its first run)
                out += index.head_descending((0, 0), below, end - len(out))
            return out
    if window is None:
        window = Window(field)
    start, stop = window.span(index)
    out = []
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


def walk(table: Table, query: Query, window: Window | None) -> Iterator[Any]:
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
