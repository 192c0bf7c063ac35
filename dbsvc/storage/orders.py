"""Ids in a sort's order, read from the ordered indexes' key columns, and a page of them.

The order is query.py's: the sort keys in turn, nulls last ascending and first descending,
ties on the id ascending; without `sort`, id order. Every list plan orders ids through
here: query.py's plans, bucketplan.py's buckets kept in a sort field's order, seek.py's
gathers and walks (walks.py), and `sort_records` over an `as_of` state's records.

- `ordered_ids`: a set of live ids sorted by the key columns (keycolumns.py), no record
  read; with a page's end, only the head that reaches it is ordered by the whole sort.
- `runs_in_order` / `page_in_order`: an ordered index (or a bucket kept in its order,
  buckets.py) in the order of a sort on several keys: runs of equal first keys, each
  ordered by the other keys; lazily, or a page found by position (keptparts.py's runs).
- `head_descending`: the head of an index's (key, id) pairs walked from the top, in the
  list's order (ties on the id ascending).
- `page_ids`: a page of an iterator of ids at C speed (an islice over a filter).
- `sort_records`: records (or their values) sorted by their own fields.

Split from seek.py (session 17) so the plans there and the orders here each have one job;
imports the indexes, keptparts.py's `tie_runs` and the table, never a plan (query.py,
bucketplan.py, seek.py and walks.py import it).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from operator import itemgetter
from typing import Any

from dbsvc.runtime import CompiledModel
from dbsvc.storage.indexes import Keep, OrderedIndex
from dbsvc.storage.keptparts import tie_runs
from dbsvc.storage.table import Table

_NOTHING = object()
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


def head_descending(pairs: Iterator[tuple[Any, Any]], keep: Keep | None, end: int) -> list[Any]:
    """The first `end` ids of `pairs` (keys descending, ids descending in a run), those
    `keep` says yes to, in the list's order (ids ascending in a run): the rest of the last
    run taken too, then one stable sort by key descending over the reversed pairs. The
    descending page of an index walked with a test (query.py) or of a bucket kept in a
    sort field's order (bucketplan.py): one sort in C, O(end log end)."""
    if keep is not None:
        pairs = (pair for pair in pairs if keep(pair[1]))
    taken = list(islice(pairs, end))
    if not taken:
        return []
    last = taken[-1][0]
    for pair in pairs:  # the rest of the last run
        if pair[0] != last:
            break
        taken.append(pair)
    taken.reverse()
    taken.sort(key=_KEY, reverse=True)  # stable: ids stay ascending in a run
    return list(map(_ID, taken))


def page_ids(ids: Iterator[Any], offset: int, count: int, keep: Callable[[Any], Any] | None = None) -> list[Any]:
    """Ids [offset, offset + count) of `ids` (those `keep` says yes to, when given): an
    islice (over a filter) at C speed, no Python code an id. Shared with query.py."""
    if count <= 0:
        return []
    return list(islice(ids if keep is None else filter(keep, ids), offset, offset + count))
