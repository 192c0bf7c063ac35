"""Plans over a filter's bucket kept in sort order (buckets.py): the lists whose smallest
filter is one value with a bucket of at least BUCKET_AT ids.

Order and answers are query.py's (docs/guide/queries.md#sorting-and-pages): sort keys in
turn, nulls last ascending and first descending, ties on the primary key ascending. The
plans here only choose a cheaper way to the same page:

- one filter value, sorted (first key S, another field): the bucket's order for S is built
  once and kept (`BucketOrders.order`), then the page is a seek, O(log s + page): ascending
  by position, descending by position past the nulls (`OrderedIndex.ids_descending`);
  `total` is the bucket's size. Several sort keys walk the order's runs of equal first keys,
  each ordered by the other keys (their key columns), as query.py's walk does.
- several filter fields, one value each: the smallest bucket is walked (in the sort's order,
  or in id order without a sort), the others tested per id by their `keeper` (C-level
  membership), stopping at the page's end. `total`: for two fields, the count kept per
  (value, value) pair (`bucket_count`, buckets.py `PairCount`: O(1) once made); for more,
  query.py's count of the bucket's ids that pass the tests, O(s) at C speed.
- a prefix on a str @sort field, alone, sorted by another field S (`_prefix_plan`): the
  prefix's ids kept in S's order (buckets.py `prefix_order`, built where seek.py would
  gather and sort them, under the same rule), then a seek as for a filter value's order;
  `total` is the order's size. A prefix under BUCKET_AT ids is never kept: its ids (a slice
  of the field's index) are ordered here by the sort's key columns, where seek.py's gather
  found the window again and tested every id against it (at 20,000 posts `ab`'s 29 ids:
  22 -> 10 us in process, bench/README.md session 10).
- a search alone in id order (`_search_plan`: no filter, operator or sort, a cursor or not):
  the kept matches' id order (searches.py `in_id_order`) sliced after the cursor's id and
  the offset, O(log s + page); `total` is their count. A one-word query (not kept) declines.
- a range on one @sort field R plus filters (operators, seek.py's domain otherwise), with no
  sort or sorted by R: the bucket's order for R gives the range's count by position
  (O(log s), `Window.count`) and, sorted by R, its page by position; in id order, with one
  filter, the window's span of the order sorted by id (`OrderedIndex.span_by_id`, kept
  until a sublist it reaches changes) is sliced, O(page) once kept, where walking the
  bucket by id testing R's key column cost a Python call an id (end * s / total of them:
  the whole bucket when few of it match); with two filters the bucket is walked so.

A plan declines (None: query.py's or seek.py's plan runs) for a row test, a cursor, a null
test, a search but the one above, a filter of several values, a bucket under BUCKET_AT, or, when the bucket
has no kept order yet, one large enough that a walk of the whole sort order testing
membership is cheaper (s * s > WALK_FACTOR * end * n, query.py's rule): such buckets are
never built, so their memory is never spent.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import islice
from typing import Any

from dbsvc.operators import prefix_end
from dbsvc.runtime import Filters, Query
from dbsvc.storage.buckets import BUCKET_AT, BucketOrder
from dbsvc.storage.conditions import window_test, windows_of
from dbsvc.storage.hashes import HashIndex
from dbsvc.storage.orders import head_descending, ordered_ids, page_ids, page_in_order, runs_in_order
from dbsvc.storage.searches import in_id_order
from dbsvc.storage.table import Table

WALK_FACTOR = 2  # query.py's: a bucket of s ids is taken while s * s <= factor * end * n
Keep = Callable[[Any], Any]


def _others(table: Table, filters: Filters, field: str) -> Keep | None:
    """The test of every filtered field but `field` (one value each), None when it is the only one."""
    tests = [table.hashes[f].keeper(next(iter(keys))) for f, keys in filters.items() if f != field]
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    return lambda id_: all(test(id_) for test in tests)


def _smallest(table: Table, query: Query) -> tuple[int, str, Any, Keep | None] | None:
    """(size, field, key) of the smallest filtered field's bucket, and the test of the
    others (None with one field), when every filtered field has one value."""
    filters = query.filters
    if not filters or query.where_row is not None or any(len(keys) != 1 for keys in filters.values()):
        return None
    size, field = min((table.hashes[f].count(keys), f) for f, keys in filters.items())
    if size < BUCKET_AT:
        return None
    return size, field, next(iter(filters[field])), _others(table, filters, field)


def _kept_order(table: Table, field: str, key: Any, sort_field: str, size: int, end: int) -> BucketOrder | None:
    """The bucket's order for `sort_field`: kept, or built now unless a walk is cheaper."""
    if sort_field == field or sort_field not in table.ordered:
        return None
    built = table.buckets.pairs.get((field, sort_field), {}).get(key)
    if built is not None:
        return built
    if size * size > WALK_FACTOR * max(end, 1) * len(table.live):
        return None
    return table.buckets.order(field, key, table.hashes[field], sort_field, table.ordered[sort_field])


def _by_id(table: Table, field: str, key: Any) -> list[Any]:
    """The bucket's ids ascending: a list bucket as it is, else sorted."""
    index = table.hashes[field]
    if type(index) is HashIndex:
        bucket = index.buckets.get(key)
        if type(bucket) is list:
            return bucket
    return sorted(index.ids((key,)))


def bucket_count(table: Table, filters: Filters) -> tuple[int, str, int] | None:
    """(total, the smaller field, the ids its key holds) of two filtered fields of one
    value each, the smaller bucket holding BUCKET_AT ids or more: the count kept per
    (value, value) pair (buckets.py `PairCount`, made by the first list that asks, O(s),
    then kept by the writes), or None to leave the count to query.py's `_count`."""
    if len(filters) != 2:
        return None
    (a, a_keys), (b, b_keys) = filters.items()
    if len(a_keys) != 1 or len(b_keys) != 1:
        return None
    a_key, b_key = next(iter(a_keys)), next(iter(b_keys))
    buckets, hashes = table.buckets, table.hashes
    kept = buckets.kept_count(a, a_key, b, b_key)
    if kept is None:
        kept = buckets.kept_count(b, b_key, a, a_key)
    a_size, b_size = hashes[a].count(a_keys), hashes[b].count(b_keys)
    if b_size < a_size:
        a, a_key, a_size, b, b_key = b, b_key, b_size, a, a_key
    if a_size < BUCKET_AT:
        return None
    if kept is None:
        kept = buckets.count(a, a_key, hashes[a], b, b_key, hashes[b])
    return kept, a, a_size


def bucket_plan(table: Table, query: Query, field: str, size: int, total: int) -> tuple[list[Any], int] | None:
    """(page ids, total) of a live list with filters and no operators, or None to leave it
    to query.py, which has counted it (`_count`): `field` is the smallest filtered field,
    `size` the ids its keys hold and `total` the matches, at least one, within the page's reach."""
    filters = query.filters
    if size < BUCKET_AT or any(len(keys) != 1 for keys in filters.values()):
        return None
    key, keep = next(iter(filters[field])), _others(table, filters, field)
    sort = tuple(query.sort)
    offset, limit = query.offset, query.limit
    end = offset + limit
    if not sort:
        if keep is None:  # one filter in id order: query.py slices the bucket already
            return None
        return list(islice(filter(keep, _by_id(table, field, key)), offset, end)), total
    first, desc = sort[0]
    order = _kept_order(table, field, key, first, size, end)
    if order is None:
        return None
    if len(sort) == 1:
        return _one_key(order, desc, keep, offset, end), total
    page = page_in_order(order, desc, sort, table, offset, end) if keep is None else None
    if page is not None:
        return page, total
    return page_ids(runs_in_order(order, desc, sort[1:], table), offset, limit, keep), total


def bucket_operators(table: Table, query: Query) -> tuple[list[Any], int, bool] | None:
    """(page ids, total, whether more follow) of a live list with one range and filters
    (module docstring), or None to leave it to seek.py."""
    if query.search:
        return _search_plan(table, query)
    if query.cursor is not None or query.nulls or len(query.ranges) != 1:
        return None
    if not query.filters:  # a prefix sorted by another field, or nothing of this module's
        return _prefix_plan(table, query) if query.sort else None
    found = _smallest(table, query)
    if found is None:
        return None
    size, field, key, keep = found
    sort = tuple(query.sort)
    ranged = query.ranges[0][0]
    if sort and (len(sort) > 1 or sort[0][0] != ranged):
        return None
    offset, limit = query.offset, query.limit
    end = offset + limit + 1
    order = _kept_order(table, field, key, ranged, size, end)
    if order is None:
        return None
    window = windows_of(table, query)[0][ranged]
    if keep is None:
        total = window.count(order)
    else:
        total = len(list(filter(keep, window.ids(order))))
    if total == 0 or limit == 0 or offset >= total:
        return [], total, False
    if not sort and keep is None:  # the window's ids by id, kept by the order (keptparts.py)
        ids = order.span_by_id(*window.span(order))[offset:end]
    elif not sort:
        test = window_test(table.ordered[ranged].column, window)
        ids = page_ids(iter(_by_id(table, field, key)), offset, limit + 1, _both(test, keep))
    elif not sort[0][1]:
        ids = page_ids(window.ids(order), offset, limit + 1, keep)
    else:
        ids = head_descending(order.pairs_span_descending(*window.span(order)), keep, end)[offset:end]
    return ids[:limit], total, len(ids) > limit


def _search_plan(table: Table, query: Query) -> tuple[list[Any], int, bool] | None:
    """(page ids, total, whether more follow) of a search alone in id order, from its kept
    matches sorted (module docstring), or None to leave it to seek.py."""
    if query.filters or query.ranges or query.nulls or query.sort or query.where_row is not None:
        return None
    ordered = in_id_order(table, query.search)
    if ordered is None:
        return None
    total, limit = len(ordered), query.limit
    if limit == 0:
        return [], total, False
    start = query.offset
    if query.cursor is not None:
        start += bisect_right(ordered, query.cursor[1])
    ids = ordered[start : start + limit + 1]
    return ids[:limit], total, len(ids) > limit


def _prefix_plan(table: Table, query: Query) -> tuple[list[Any], int, bool] | None:
    """(page ids, total, whether more follow) of a prefix on a str @sort field, the one
    condition, sorted by another field: from the prefix's ids kept in that field's order
    (buckets.py `prefix_order`), or under BUCKET_AT ids ordered now and never kept, or None
    when it is not kept and holds so many that seek.py's walk of the sort order is cheaper."""
    field, low, low_in, high, high_in = query.ranges[0]
    sort = tuple(query.sort)
    if query.where_row is not None or not sort or sort[0][0] == field or sort[0][0] not in table.ordered:
        return None
    if not (low_in and not high_in and type(low) is str and low and high == prefix_end(low)):
        return None
    first, desc = sort[0]
    offset, limit = query.offset, query.limit
    end = offset + limit + 1
    order = table.buckets.kept_prefix(field, low, first)
    if order is None:
        window, index = windows_of(table, query)[0][field], table.ordered[field]
        size = window.count(index)
        if size * size > WALK_FACTOR * end * len(table.live):
            return None
        if size < BUCKET_AT:  # few: ordered here by the key columns, never kept
            if size == 0 or limit == 0 or offset >= size:
                return [], size, False
            ids = ordered_ids(window.ids(index), sort, table)[offset:end]
            return ids[:limit], size, len(ids) > limit
        order = table.buckets.prefix_order(field, low, window.ids(index), first, table.ordered[first])
    total = len(order)
    if total == 0 or limit == 0 or offset >= total:
        return [], total, False
    if len(sort) == 1:
        ids = _one_key(order, desc, None, offset, end)
    else:
        page = page_in_order(order, desc, sort, table, offset, end)
        ids = page if page is not None else page_ids(runs_in_order(order, desc, sort[1:], table), offset, limit + 1)
    return ids[:limit], total, len(ids) > limit


def _both(test: Keep, keep: Keep | None) -> Keep:
    if keep is None:
        return test
    return lambda id_: test(id_) and keep(id_)


def _one_key(order: BucketOrder, desc: bool, keep: Keep | None, offset: int, end: int) -> list[Any]:
    """Ids [offset, end) of the bucket in the order of its one sort key (module docstring)."""
    if not desc:
        if keep is None:
            return order.ids_slice(offset, end)
        return list(islice(order.ids_ascending(keep), offset, end))
    nulls = order.nulls
    if keep is None:  # by position: the nulls first, then the values descending
        out = nulls.slice(offset, min(end, len(nulls))) if offset < len(nulls) else []
        if end > len(nulls):
            out.extend(order.ids_descending(max(offset - len(nulls), 0), end - len(nulls)))
        return out
    out = list(islice(order.nulls_ascending(keep), end))
    if len(out) < end:
        out.extend(head_descending(order.pairs_descending(keep), None, end - len(out)))
    return out[offset:end]
