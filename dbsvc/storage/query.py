"""List queries over a `Table`: filter, sort, page, count; and the same over a past state.

Order (docs/guide/queries.md#sorting-and-pages): the `sort` keys in turn, each ascending or descending, nulls
last ascending and first descending, ties always broken on the primary key ascending;
without `sort`, primary-key order.

Plan for a live list (n live records, a page ending at `end = offset + limit`):

1. No filter: walk the first sort key's ordered index (or the primary-key index) from the
   right end. A plain ascending walk with no filter slices by position: O(n / LOAD + page).
2. Filters: `s` = the size of the smallest filtered field's bucket union (its ids). If
   s * s <= factor * end * n (WALK_FACTOR, or KEPT_WALK_FACTOR for a walk of one sort key
   against one value's bucket, which is cheaper), take the matching ids (that union, or
   what step 3 kept) and sort them by their keys: O(s log s) in C, the keys read from the
   sort fields' key columns (keycolumns.py), no record read. Otherwise walk the index testing
   each id: expected O(end * n / s) when matches are spread evenly (a correlated filter
   can walk further; it never walks more than n).
   A walk over one sort key (or none) is an itertools pipeline over the index
   (`_one_key_page`). Filtered by one field with one value, the test is membership in that
   value's hash bucket and no Python code runs per entry walked; so is a filter of several
   fields, against the ids step 3 kept; one field of several values asks its hash index
   for each id (`_Matching`). No filter reads a record: every
   filtered field has a hash index, and every sort field a key column.
3. `total`: the bucket size for one filtered field; for two of one value each with the
   smaller bucket at BUCKET_AT ids or more, the count kept per pair of values
   (bucketplan.py `bucket_count`); otherwise the smallest field's ids kept only if every
   other field's buckets hold them (smallest first, O(s)): at KEEPER_AT ids or more by
   each other field's `keeper`, fewer asked of each other field all at once (hashes.py
   `holding`, a bisect an id at C speed where `has` ran Python code an id and field).

Descending walks and multi-key sorts gather each run of equal first keys and order it by
the remaining keys (their key columns) and then id ascending, so a run costs O(run length):
a sort field with few distinct values over many records makes such pages cost up to O(n).

A list at a past watermark `n` (`as_of`, `page_as_of`) is planned on the live indexes: the
records the k rows after `n` touched are the only ones whose state at `n` differs from now,
so the list is the live plan (its first offset + limit + 1 + k ids) without them, merged
with their records as they were at `n` that pass the query; only those are read, and the
page. Cost: the live list's plus O(k) (bench/README.md, "The list matrix"). Below the
snapshot's rows (the state is then the first n records by id) or when k is over a tenth of
the table, the state is materialised and every record of it read, filtered, sorted and
paged: O(n log n) (`list_state`, `plan_state`).

A row test (`Query.where_row`, the part of an access rule no index answers,
docs/guide/rest.md#access-rules-on-these-routes) is applied to every candidate before anything is counted or paged:
the candidates are the filtered fields' matches (hash indexes, as above) or, with no
filter, every live record; each one's values are read once and tested, so `total`, the
sort and the page cover only the records that pass. Cost O(candidates) per list, which is
why a rule of the form `record.F == token.C` on an `@filter` field is turned into a filter
on F by the app and leaves no row test.

A query with operators (ranges, null tests) or a cursor is planned by seek.py, which also
holds the order's comparison (`sort_records`).

Once the filters are counted (`_count`), and before seek.py, bucketplan.py is asked
(`bucket_plan`, `bucket_operators`): a list whose
smallest filter is one value holding BUCKET_AT ids or more, sorted by another field (or
with a range on one), is served from that value's bucket kept in the sort field's order
(buckets.py): a seek, O(log s + page), where step 2 sorts the bucket at every list.

Live lists are planned on ids: a stored record's values are read (`rows.unpack`, the
costly step) only for a row test; sort keys come from the key columns, and only the page's
records become dicts (`Table.shown_all`, which remembers them); `list_state`, the
materialised as_of list, reads every record of its state (the indexes are the live
state's), unless it is in id order with no filter. (The tests hold both to a brute-force
list over dicts of their own, `support.storage.reference_list`, and to SQLite,
tests/storage/test_storage_seek.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from itertools import chain, islice
from typing import Any

from dbsvc.runtime import Query
from dbsvc.storage.bucketplan import bucket_count, bucket_operators, bucket_plan
from dbsvc.storage.conditions import after_test, live_test, state_test
from dbsvc.storage.hashes import FilterIndex, HashIndex
from dbsvc.storage.indexes import Keep, OrderedIndex
from dbsvc.storage.orders import head_descending, ordered_ids, page_ids, page_in_order, runs_in_order, sort_records
from dbsvc.storage.rows import Stored, unpack
from dbsvc.storage.seek import has_operators, plan_operators, plan_state
from dbsvc.storage.table import Table

# A bucket of s ids read and sorted costs about ten times more an id (each record read back
# out, rows.py) than a walk costs an index entry when it tests membership in a set (`keeper`,
# or the ids `_count` kept for several fields: C speed); a walk that asks a hash index for one
# field's several values (`_Matching`) or reads records to order runs (a sort on several keys)
# costs about as much an entry as the bucket does an id. A walk is expected to pass
# end * n / s index entries, so the bucket is taken while s * s <= factor * end * n. The
# factors were set from measured lists (bench/README.md, "Records as bytes", and "Figures
# that were in docstrings"), when a bucket's records were read to sort it; a bucket is now
# sorted by its key columns (keycolumns.py), several times cheaper an id, so these factors
# lean towards walks more than they need to (not re-tuned yet).
WALK_FACTOR = 2
KEPT_WALK_FACTOR = 0.25
# Candidates of several filtered fields from which `_count` tests the others by `keeper`
# (a set of a list bucket made once and kept, hashes.py) rather than by `has` (a bisect in
# Python an id): below it, making the set can cost more than the bisects.
KEEPER_AT = 64


def _walk(table: Table, sort: tuple[tuple[str, bool], ...]) -> Iterator[Any]:
    """The ids of every live record in the order of a sort on several keys, lazily
    (orders.py `runs_in_order` over the first key's index)."""
    first, desc = sort[0]
    return runs_in_order(table.ordered[first], desc, sort[1:], table)


class _Matching:
    """Whether an id holds one of a field's filter values, asked of the field's hash index
    (its buckets hold exactly the ids whose key is in them): the `keep` test of a walk
    over a filter of one field and several values. No record is read."""

    __slots__ = ("has", "keys")

    def __init__(self, index: FilterIndex, keys: frozenset) -> None:
        self.has, self.keys = index.has, keys

    def __call__(self, id_: Any) -> bool:
        return self.has(self.keys, id_)


def _one_key_page(index: OrderedIndex, desc: bool, keep: Keep | None, offset: int, end: int) -> list[Any]:
    """Ids [offset, end) of the order by one key (ascending: nulls last; descending: nulls
    first; ties on id ascending), only those `keep` says yes to when given.

    Ascending, the index order is the list order. Descending with no `keep`, the page is
    found by position: the nulls' slice, then the values from the top, the first page as
    the index's top entries taken a run at a time (`OrderedIndex.batches_descending`: a page
    inside one run of equal keys is a slice of it, no entry compared), a deeper one
    (`offset` past the nulls) from the sublists' counts (`OrderedIndex.ids_descending`,
    O(log n + page)). With `keep`, the reversed index gives each run of equal keys with
    its ids descending: the pairs up to `end` are taken, plus the rest of the last run,
    reversed (keys and ids ascending) and sorted by key descending, which keeps equal keys
    in the order they are in (`reverse=True` is stable): one sort in C, O(end log end).
    """
    if not desc:
        return list(islice(index.ids_ascending(keep), offset, end))
    if keep is None:
        nulls = index.nulls
        out = nulls.slice(offset, end) if offset < len(nulls) else []
        if end > len(nulls):
            start = max(offset - len(nulls), 0)
            if start:
                out.extend(index.ids_descending(start, end - len(nulls)))
            else:
                out.extend(islice(chain.from_iterable(index.batches_descending((0, 0), index.end)), end - len(nulls)))
        return out
    out = list(islice(index.nulls_ascending(keep), end))
    if len(out) < end:
        out.extend(head_descending(index.pairs_descending(keep), None, end - len(out)))
    return out[offset:end]


def _count(table: Table, filters: Mapping[str, frozenset]) -> tuple[int, str, int, list[Any] | None]:
    """(total matches, smallest filtered field, the ids that field's keys hold, the
    matching ids when more than one field is filtered) using the hash indexes only."""
    if len(filters) == 1:
        ((field, keys),) = filters.items()
        size = table.hashes[field].count(keys)
        return size, field, size, None
    sizes = sorted((table.hashes[f].count(keys), f) for f, keys in filters.items())
    smallest_size, smallest = sizes[0]
    if smallest_size == 0:
        return 0, smallest, 0, []
    others = [(table.hashes[f], filters[f]) for _size, f in sizes[1:]]
    candidates = _bucket(table.hashes[smallest], filters[smallest])
    if smallest_size >= KEEPER_AT and all(len(keys) == 1 for _index, keys in others):
        # One value a field: C-level membership tests (`keeper`: a set, kept for the next
        # list, or a bit array) chained over the candidates, no Python code an id.
        for index, keys in others:
            candidates = filter(index.keeper(next(iter(keys))), candidates)
        matches = list(candidates)
    else:
        # Few candidates (or several values): each other field asked of its buckets for all
        # of them at once (`holding`, at C speed), not one `has` an id and field.
        matches = candidates if type(candidates) is list else list(candidates)
        for index, keys in others:
            matches = index.holding(keys, matches)
    return len(matches), smallest, smallest_size, matches


def _bucket(index: FilterIndex, keys: frozenset) -> Iterable[Any]:
    """The ids holding one of `keys`: one value's list bucket as it is (ascending, so the
    sort by id before the sort by key finds it in order, O(s)), else `ids` (a new set).
    The caller reads it during this synchronous call and never changes it."""
    if len(keys) == 1 and type(index) is HashIndex:
        bucket = index.buckets.get(next(iter(keys)))
        if type(bucket) is list:
            return bucket
    return index.ids(keys)


def list_live(table: Table, query: Query) -> tuple[list[dict], int]:
    """(page, total) for `query` over the live state: the page's ids, planned and ordered
    here, are handed out as dicts (`Table.shown`) only once chosen."""
    ids, total = _plan_live(table, query)
    return table.shown_all(ids), total


def list_page(table: Table, query: Query, texts: bool = False) -> tuple[list[Any], int, bool]:
    """(page, total, whether another page follows it: never after an empty page) over the live state; a query with
    operators or a cursor is planned by seek.py. `texts`: the records as JSON bytes, the last a dict carrying its JSON (`Table.shown_all`),
    its id alone in id order (no `sort`: the page's `Link` reads no key of it), its id and its
    sort keys from the sort fields' key columns when sorted (`SentRecord.sort_keys`)."""
    if has_operators(query):
        planned = bucket_operators(table, query)  # a range and filters over a bucket kept in order
        ids, total, more = planned if planned is not None else plan_operators(table, query)
    else:
        ids, total = _plan_live(table, query)
        more = bool(ids) and query.offset + len(ids) < total
    sort = query.sort
    columns = table.sort_columns(sort) if texts and sort and ids else ()
    return table.shown_all(ids, texts, bool(sort), columns), total, more


def state_page(state: Mapping[Any, Stored], table: Table, query: Query) -> tuple[list[dict], int, bool]:
    """`list_page` over an `as_of` state."""
    if has_operators(query):
        return plan_state(state, table, query)
    records, total = list_state(state, table, query)
    return records, total, bool(records) and query.offset + len(records) < total


def page_as_of(table: Table, n: int, query: Query) -> tuple[list[dict], int, bool]:
    """`list_page` at watermark `n` (below the table's), planned on the live indexes: the
    records the rows after `n` touched are the only ones whose state then differs from
    now, so the list is the live plan without them, merged with their records as of `n`
    that pass the query (module docstring). Below the snapshot's rows (`n` under
    len(base_ids), where the state is the first n records by id), or when the later rows
    touched more records than a tenth of the table, the state is materialised instead
    (`state_page` over `Table.state_as_of`)."""
    base = len(table.base_ids)
    later = table.rows[n - base :] if n >= base else ()
    if n < base or len(later) > len(table.live) // 10 + 64:
        return state_page(table.state_as_of(n), table, query)
    then: dict[Any, Stored | None] = {}  # touched id -> its record at n (None: none then)
    for row_id, _record, previous in reversed(later):
        then[row_id] = previous
    passes, live, model = state_test(table, query), table.live, table.model
    # Live matches among the touched ids leave the count: their state at n is `then`'s.
    matches_now = live_test(table, query)
    gone = sum(1 for i in then if i in live and matches_now(i))
    old = [v for v in map(unpack, filter(None, then.values())) if passes(v)]
    end = query.offset + query.limit + 1
    wide = replace(query, offset=0, limit=end + len(then), as_of=None)
    if has_operators(wide):
        ids, total, _more = plan_operators(table, wide)
    else:
        ids, total = _plan_live(table, wide)
    total += len(old) - gone
    kept = [i for i in ids if i not in then]
    if not old:  # nothing as it was then passes: the live plan's order is the list's
        chosen_ids = kept[query.offset : end] if query.limit else []
        return table.shown_all(chosen_ids[: query.limit]), total, len(chosen_ids) > query.limit
    if query.cursor is not None:
        old = list(filter(after_test(table, query), old))
    chosen = [unpack(live[i]) for i in kept] + old
    sort_records(chosen, query.sort, model, table.positions)
    page = chosen[query.offset : end] if query.limit else []
    records = []
    for values in page[: query.limit]:
        id_ = values[table.id_position]
        stored = live.get(id_) if id_ not in then else None
        records.append(table.shown(id_, stored) if stored is not None else model.decode(values))
    return records, total, len(page) > query.limit


def live_ids(table: Table, query: Query) -> list[Any]:
    """The ids of `query`'s page over the live state, in its order, with no dict built
    (a live query's Init reads its records a slice at a time, realtime/init.py); a query
    with operators or a text search is planned by seek.py, as a list's is."""
    if has_operators(query):
        return plan_operators(table, query)[0]
    return _plan_live(table, query)[0]


def _plan_live(table: Table, query: Query) -> tuple[list[Any], int]:
    if query.where_row is not None:
        return _plan_tested(table, query, query.where_row)
    n = len(table.live)
    filters = query.filters
    sort = tuple(query.sort)
    offset, limit = query.offset, query.limit
    end = offset + limit
    if not filters:
        if not sort or (len(sort) == 1 and not sort[0][1]):
            if sort:
                return table.ordered[sort[0][0]].ids_slice(offset, end), n
            return table.pk.slice(offset, end), n
        if len(sort) == 1:
            return _one_key_page(table.ordered[sort[0][0]], True, None, offset, end), n
        page = page_in_order(table.ordered[sort[0][0]], sort[0][1], sort, table, offset, end)
        return (page if page is not None else page_ids(_walk(table, sort), offset, limit)), n
    counted = bucket_count(table, filters)  # two fields' count kept per pair of values (bucketplan.py)
    if counted is not None:
        total, smallest, size = counted
        if total == 0 or offset >= total or limit == 0:
            return [], total
        planned = bucket_plan(table, query, smallest, size, total)
        if planned is not None:
            return planned
    total, smallest, size, matches = _count(table, filters)
    if total == 0 or offset >= total or limit == 0:
        return [], total
    planned = bucket_plan(table, query, smallest, size, total)  # a bucket kept in sort order (bucketplan.py)
    if planned is not None:
        return planned
    one_value = len(filters) == 1 and len(filters[smallest]) == 1
    factor = KEPT_WALK_FACTOR if one_value and len(sort) == 1 else WALK_FACTOR
    if size * size <= factor * end * n:
        chosen = _bucket(table.hashes[smallest], filters[smallest]) if matches is None else matches
        if not sort:
            return sorted(chosen)[offset:end], total
        return ordered_ids(chosen, sort, table, end)[offset:end], total
    keep: Keep
    if one_value:
        # One field, one value: membership in that value's hash bucket (read on the loop
        # thread during this synchronous call, so no write changes it meanwhile).
        keep = table.hashes[smallest].keeper(next(iter(filters[smallest])))
    elif matches is not None:
        # Several fields: `_count` has already tested every candidate against them all.
        keep = frozenset(matches).__contains__
    else:
        keep = _Matching(table.hashes[smallest], filters[smallest])
    if len(sort) <= 1:
        if sort:
            ((field, desc),) = sort
            return _one_key_page(table.ordered[field], desc, keep, offset, end), total
        return list(islice(filter(keep, table.pk), offset, end)), total
    return page_ids(_walk(table, sort), offset, limit, keep), total


def _plan_tested(table: Table, query: Query, test: Callable[[Any], bool]) -> tuple[list[Any], int]:
    """`_plan_live` under a row test: the candidates (the filters' matches, or every live
    record) kept only when their values pass `test`, then counted, ordered and paged."""
    live, filters = table.live, query.filters
    candidates: Iterable[Any]
    if filters:
        total, smallest, _size, matches = _count(table, filters)
        if total == 0:
            return [], 0
        candidates = table.hashes[smallest].ids(filters[smallest]) if matches is None else matches
    else:
        candidates = table.pk
    kept = [id_ for id_ in candidates if test(unpack(live[id_]))]
    total = len(kept)
    sort = tuple(query.sort)
    offset, end = query.offset, query.offset + query.limit
    if total == 0 or offset >= total or query.limit == 0:
        return [], total
    if not sort:
        return (kept if not filters else sorted(kept))[offset:end], total
    if total * total <= WALK_FACTOR * end * len(live):
        return ordered_ids(kept, sort, table, end)[offset:end], total
    keep = frozenset(kept).__contains__
    if len(sort) == 1:
        ((field, desc),) = sort
        return _one_key_page(table.ordered[field], desc, keep, offset, end), total
    return page_ids(_walk(table, sort), offset, query.limit, keep), total


def list_state(state: Mapping[Any, Stored], table: Table, query: Query) -> tuple[list[dict], int]:
    """(page, total) over a materialised map of stored records (an `as_of` state,
    `Table.state_as_of`): every record's values read, filtered and sorted, only the page
    made into dicts; in id order with no filter, only the page's records are read."""
    model = table.model
    passes, filters, test = model.passes, query.filters, query.where_row
    page = slice(query.offset, query.offset + query.limit)
    if not filters and not query.sort and test is None:  # id order: only the page is read
        return [model.decode(unpack(state[i])) for i in sorted(state)[page]], len(state)
    chosen = list(map(unpack, state.values()))
    if filters:
        chosen = [v for v in chosen if passes(v, filters)]
    if test is not None:
        chosen = [v for v in chosen if test(v)]
    sort_records(chosen, query.sort, model, table.positions)
    return list(map(model.decode, chosen[page])), len(chosen)
