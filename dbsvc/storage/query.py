"""List queries over a `Table`: filter, sort, page, count; and the same over a past state.

Order (contract section 3): the `sort` keys in turn, each ascending or descending, nulls
last ascending and first descending, ties always broken on the primary key ascending;
without `sort`, primary-key order.

Plan for a live list (n live records, a page ending at `end = offset + limit`):

1. No filter: walk the first sort key's ordered index (or the primary-key index) from the
   right end. A plain ascending walk with no filter slices by position: O(n / LOAD + page).
2. Filters: `s` = the size of the smallest filtered field's bucket union (its ids). If
   s * s <= WALK_FACTOR * end * n, take that union, keep the matching records, sort them:
   O(s log s). Otherwise walk the index checking `model.match`: expected O(end * n / s)
   when matches are spread evenly (a correlated filter can walk further; it never walks
   more than n).
3. `total`: the bucket size for one filtered field; otherwise the smallest field's ids
   kept only if every other field's buckets hold them (smallest first, O(s)).

Descending walks and multi-key sorts gather each run of equal first keys and order it by
the remaining keys and then id ascending, so a run costs O(run length): a sort field with
few distinct values over many records makes such pages cost up to O(n).

A list at a past watermark (`as_of`) filters, sorts and pages the materialised state: O(n log n).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from dbsvc.runtime import CompiledModel, Query
from dbsvc.storage.table import Table

WALK_FACTOR = 8
_NOTHING = object()


def _null_last(kf: Any, f: str) -> Any:
    def key(record: dict) -> tuple:
        k = kf(record[f])
        return (1, 0) if k is None else (0, k)
    return key


def sort_records(records: list[dict], sort: Iterable[tuple[str, bool]], model: CompiledModel) -> None:
    """Sort in place: the sort keys in order, ties on the id ascending (stable passes;
    `reverse=True` keeps the order of equal items, so ids stay ascending inside ties)."""
    idf = model.id_field
    records.sort(key=lambda r: r[idf])
    for f, desc in reversed(tuple(sort)):
        records.sort(key=_null_last(model.keys[f], f), reverse=desc)


def _walk(table: Table, sort: tuple[tuple[str, bool], ...]) -> Iterator[dict]:
    """Every live record, in list order, lazily."""
    records = table.records
    if not sort:
        for id_ in table.pk:
            yield records[id_]
        return
    first, desc = sort[0]
    rest = sort[1:]
    index = table.ordered[first]
    if not desc and not rest:
        for _key, id_ in index:
            yield records[id_]
        return
    if not rest:
        yield from _walk_descending(index, records)
        return
    model = table.model
    if desc and index.nulls:             # nulls first descending: one run, ids ascending
        yield from _order_run([records[i] for i in index.nulls], rest, model)
    run: list[dict] = []
    current: Any = _NOTHING
    pairs = reversed(index.values) if desc else iter(index)
    for key, id_ in pairs:
        if key != current or (key is None) != (current is None):
            if run:
                yield from _order_run(run, rest, model)
                run = []
            current = key
        run.append(records[id_])
    if run:
        yield from _order_run(run, rest, model)


def _walk_descending(index: Any, records: Mapping[Any, dict]) -> Iterator[dict]:
    """One key descending: nulls first, then keys from the top; the (key, id) pairs of a
    run of equal keys come out of the reversed index with ids descending, so each run is
    yielded reversed to keep the id tie-break ascending. O(1) per record, no sorting."""
    for id_ in index.nulls:
        yield records[id_]
    run: list[Any] = []
    current: Any = _NOTHING
    for key, id_ in reversed(index.values):
        if key == current:
            run.append(id_)
            continue
        if len(run) == 1:
            yield records[run[0]]
        elif run:
            for held in reversed(run):
                yield records[held]
        run = [id_]
        current = key
    for held in reversed(run):
        yield records[held]


def _order_run(run: list[dict], rest: tuple[tuple[str, bool], ...], model: CompiledModel) -> list[dict]:
    if len(run) > 1:
        sort_records(run, rest, model)
    return run


def _count(table: Table, filters: Mapping[str, frozenset]) -> tuple[int, str]:
    """(total matches, smallest filtered field) using the hash indexes only."""
    sizes = sorted((table.hashes[f].count(keys), f) for f, keys in filters.items())
    smallest_size, smallest = sizes[0]
    if len(sizes) == 1 or smallest_size == 0:
        return smallest_size, smallest
    others = [(table.hashes[f], filters[f]) for _size, f in sizes[1:]]
    total = 0
    for id_ in table.hashes[smallest].ids(filters[smallest]):
        for hindex, keys in others:
            if not hindex.has(keys, id_):
                break
        else:
            total += 1
    return total, smallest


def list_live(table: Table, query: Query) -> tuple[list[dict], int]:
    """(page, total) for `query` over the live state."""
    model = table.model
    n = len(table.records)
    filters = query.filters
    sort = tuple(query.sort)
    offset, limit = query.offset, query.limit
    end = offset + limit
    if not filters:
        if not sort or (len(sort) == 1 and not sort[0][1]):
            if sort:
                ids = table.ordered[sort[0][0]].ids_slice(offset, end)
                return [table.records[i] for i in ids], n
            return [table.records[i] for i in table.pk.slice(offset, end)], n
        return _page(_walk(table, sort), offset, limit), n
    total, smallest = _count(table, filters)
    if total == 0 or offset >= total or limit == 0:
        return [], total
    size = table.hashes[smallest].count(filters[smallest])
    if size * size <= WALK_FACTOR * end * n:
        ids = table.hashes[smallest].ids(filters[smallest])
        match = model.match
        chosen = [r for r in map(table.records.__getitem__, ids) if match(r, filters)]
        sort_records(chosen, sort, model)
        return chosen[offset:end], total
    return _page(_walk(table, sort), offset, limit, _matcher(table, filters), filters), total


def _matcher(table: Table, filters: Mapping[str, frozenset]) -> Any:
    """What the walk tests each record with: for one field with one value, membership of the
    record's id in that value's hash bucket (a set lookup, ~5x cheaper than the generated
    matcher); otherwise the generated matcher. The bucket is read on the loop thread during
    one synchronous list call, so no write can change it meanwhile."""
    if len(filters) == 1:
        ((field, keys),) = filters.items()
        if len(keys) == 1:
            bucket = table.hashes[field].buckets.get(next(iter(keys)), ())
            id_field = table.model.id_field
            return lambda record, _filters: record[id_field] in bucket
    return table.model.match


def list_state(state: Mapping[Any, dict], model: CompiledModel, query: Query) -> tuple[list[dict], int]:
    """(page, total) over a materialised map of records (an `as_of` state)."""
    match = model.match
    filters = query.filters
    chosen = [r for r in state.values() if match(r, filters)] if filters else list(state.values())
    sort_records(chosen, query.sort, model)
    return chosen[query.offset : query.offset + query.limit], len(chosen)


def _page(records: Iterator[dict], offset: int, limit: int,
          match: Any = None, filters: Mapping[str, frozenset] | None = None) -> list[dict]:
    """Records [offset, offset + limit) of `records` (those passing `match`, when given),
    in one loop with no generator between the walk and the page."""
    out: list[dict] = []
    if limit <= 0:
        return out
    skipped = 0
    for r in records:
        if match is not None and not match(r, filters):
            continue
        if skipped < offset:
            skipped += 1
            continue
        out.append(r)
        if len(out) >= limit:
            break
    return out
