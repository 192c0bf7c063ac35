"""A list's conditions (storage/conditions.py) through each path that asks them, on a `Table`
held in memory, no store and no fixture: the live plan (ids from the indexes, seek.py), a list
at a past watermark planned on the live indexes after every record was written again (each
touched id asked of the live indexes whether it matches *now*, `live_test`, and its record as
it was tested by its values, `state_test`), and a list over the state made again
(`state_page`). Each case is a literal: the ids that match among six records, at a range's
bounds open and closed, a bound of another type than the field (`f__gte=2` takes the stored
2.0), a datetime bound in another offset, `__null` true and false on a sort field and on a
filter-only field, a prefix of the highest code point, a search, two keys of one filter, and
a row test. The key columns' fast comparisons (`window_test`) are checked against a column
holding every id, against one holding a negative id and a far one in its side dict, and
against ids whose key is null. bench/mutation_inprocess.py runs these per mutant
(docs/mutation.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.table import Table

SCHEMA = """
model Item {
  id  int       @id
  n   int?      @filter @sort
  f   float     @sort
  s   str?      @sort
  c   str       @sort
  t   datetime? @sort
  k   str       @filter
  g   int?      @filter
  w   str?      @search
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "conditions.dbs")).BY_NAME["Item"]
FIELDS = ("n", "f", "s", "c", "t", "k", "g", "w")
POS = {f: i for i, f in enumerate(ITEM.fields)}
TOP = "\U0010ffff"

THEN = [
    # n,   f,   s,          c,         t,                      k,   g,    w
    (2, 1.0, "a", "a", "2026-01-01T00:00:00Z", "x", None, "hello"),  # 1
    (None, 2.0, "ab", "ab", None, "y", 1, None),  # 2
    (1, 1.0, None, "b", "2026-01-01T01:00:00Z", "x", 2, "help me"),  # 3
    (2, 0.5, TOP, TOP, "2025-12-31T23:00:00Z", "y", None, "world"),  # 4
    (None, 1.5, "a" + TOP, "a" + TOP, "2026-01-02T00:00:00Z", "x", 1, "hello world"),  # 5
    (3, 2.0, "b", TOP + TOP, None, "y", 2, None),  # 6
]
# After the mark every record is written again: id i (1..5) takes the values id i + 1 held,
# 6 is deleted, 7 is inserted with the values 1 held. NOW_ID maps an id then to the id now
# holding its values.
NOW_ID = {1: 7, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5}

# (query parameters, the ids among THEN that match, in id order)
CASES = [
    ([], [1, 2, 3, 4, 5, 6]),
    ([("n", "1")], [3]),
    ([("n", "0"), ("n", "2")], [1, 4]),  # two keys of one filter
    ([("n", "2"), ("n", "3")], [1, 4, 6]),
    ([("k", "x")], [1, 3, 5]),
    ([("g", "1"), ("g", "2")], [2, 3, 5, 6]),
    ([("k", "y"), ("g", "2")], [6]),
    ([("n__gt", "1")], [1, 4, 6]),
    ([("n__gte", "2")], [1, 4, 6]),
    ([("n__gt", "2")], [6]),
    ([("n__lt", "2")], [3]),
    ([("n__lte", "2")], [1, 3, 4]),
    ([("n__gte", "1"), ("n__lt", "3")], [1, 3, 4]),
    ([("n__gt", "1"), ("n__lte", "3")], [1, 4, 6]),
    ([("f__gte", "2")], [2, 6]),  # 2 takes the stored 2.0
    ([("f__gt", "2")], []),
    ([("f__lte", "1")], [1, 3, 4]),
    ([("f__lt", "1")], [4]),
    ([("f__gt", "1")], [2, 5, 6]),
    ([("f__gte", "1"), ("f__lt", "2")], [1, 3, 5]),
    ([("f__gt", "0.5"), ("f__lte", "1.5")], [1, 3, 5]),
    ([("f__gte", "1"), ("f__lte", "1.5")], [1, 3, 5]),
    ([("f__gt", "1"), ("f__lt", "2")], [5]),
    ([("c__prefix", "a")], [1, 2, 5]),
    ([("c__prefix", TOP)], [4, 6]),  # no key above the highest code point: open above
    ([("c__prefix", TOP + TOP)], [6]),
    ([("c__gte", "a" + TOP)], [3, 4, 5, 6]),
    ([("c__gt", "a" + TOP)], [3, 4, 6]),
    ([("c__lt", "ab")], [1]),
    ([("c__lte", "ab")], [1, 2]),
    ([("s__prefix", "a")], [1, 2, 5]),
    ([("s__prefix", TOP)], [4]),
    ([("s__gte", "a" + TOP)], [4, 5, 6]),
    ([("s__gt", "a" + TOP)], [4, 6]),
    ([("s__lt", "ab")], [1]),
    ([("t__gte", "2026-01-01T01:00:00+01:00")], [1, 3, 5]),  # the same instant as 1's
    ([("t__gt", "2026-01-01T01:00:00+01:00")], [3, 5]),
    ([("t__lt", "2026-01-01T02:00:00+02:00")], [4]),
    ([("t__lte", "2026-01-01T02:00:00+02:00")], [1, 4]),
    ([("t__gte", "2025-12-31T20:00:00-03:00"), ("t__lt", "2026-01-01T01:00:00Z")], [1, 4]),
    ([("n__null", "true")], [2, 5]),
    ([("n__null", "false")], [1, 3, 4, 6]),
    ([("n__null", "true"), ("k", "x")], [5]),
    ([("n__null", "false"), ("k", "y")], [4, 6]),
    ([("t__null", "true")], [2, 6]),
    ([("t__null", "false"), ("k", "y")], [4]),
    ([("g__null", "true")], [1, 4]),
    ([("g__null", "false")], [2, 3, 5, 6]),
    ([("g__null", "false"), ("k", "x")], [3, 5]),
    ([("g__null", "true"), ("g", "1")], []),
    ([("search", "hel")], [1, 3, 5]),
    ([("search", "wor")], [4, 5]),
    ([("search", "hel"), ("k", "y")], []),
    ([("search", "wor"), ("n__null", "true")], [5]),
    ([("search", "me"), ("n__gt", "0")], [3]),
    ([("search", "hel"), ("n", "1"), ("n", "2")], [1, 3]),
    ([("k", "y"), ("n__gte", "2")], [4, 6]),
    ([("k", "x"), ("f__gt", "1")], [5]),
    ([("g", "2"), ("n__null", "false"), ("t__null", "false")], [3]),
]
# The same with a row test no index answers: f is not 1.0 (ids 2, 4, 5, 6 then).
ROW_CASES = [
    ([], [2, 4, 5, 6]),
    ([("n__gte", "2")], [4, 6]),
    ([("f__lte", "1.5")], [4, 5]),
    ([("k", "x")], [5]),
    ([("n", "0"), ("n", "2")], [4]),
    ([("g__null", "false")], [2, 5, 6]),
    ([("n__null", "true")], [2, 5]),
    ([("search", "hel")], [5]),
]


def row(values) -> bool:
    return values[POS["f"]] != 1.0


def table_then() -> Table:
    table = Table(ITEM)
    for i, values in enumerate(THEN, 1):
        table.insert(ITEM.row({"id": i, **dict(zip(FIELDS, values))}))
    return table


def written_again(table: Table) -> None:
    """Every record of THEN written after the mark (NOW_ID)."""
    for i in range(1, 6):
        table.replace(table.live[i], ITEM.row({"id": i, **dict(zip(FIELDS, THEN[i]))}))
    table.delete(6, table.live[6])
    table.insert(ITEM.row({"id": 7, **dict(zip(FIELDS, THEN[0]))}))


def ids(page: list[dict]) -> list[int]:
    return [r["id"] for r in page]


def query_of(params, where_row=None):
    query = ITEM.parse_list_query(params)
    return replace(query, where_row=where_row) if where_row is not None else query


def check_every_path(params, want, where_row=None):
    table = table_then()
    query = query_of(params, where_row)
    page, total, more = plans.list_page(table, query)
    assert (ids(page), total, more) == (want, len(want), False), "live, then"
    mark = table.watermark
    written_again(table)
    page, total, more = plans.page_as_of(table, mark, query)
    assert (ids(page), total, more) == (want, len(want), False), "at the mark, planned live"
    assert [r["n"] for r in page] == [THEN[i - 1][0] for i in want]
    page, total, more = plans.state_page(table.state_as_of(mark), table, query)
    assert (ids(page), total, more) == (want, len(want), False), "the state made again"
    now = sorted(NOW_ID[i] for i in want)
    page, total, more = plans.list_page(table, query)
    assert (ids(page), total, more) == (now, len(now), False), "live, now"
    assert plans.live_ids(table, query) == now


@pytest.mark.parametrize("params, want", CASES)
def test_each_condition_gives_the_same_ids_on_every_path(params, want):
    check_every_path(params, want)


@pytest.mark.parametrize("params, want", ROW_CASES)
def test_a_row_test_with_each_condition_gives_the_same_ids_on_every_path(params, want):
    check_every_path(params, want, row)


@pytest.mark.parametrize(
    "params, want",
    [
        ([("sort", "-f"), ("f__gt", "0.5"), ("f__lte", "2")], [2, 6, 5, 1, 3]),
        ([("sort", "c"), ("c__prefix", TOP)], [4, 6]),
        ([("sort", "-t"), ("t__gte", "2025-12-31T23:00:00Z")], [5, 3, 1, 4]),
        ([("sort", "t"), ("n__null", "false")], [4, 1, 3, 6]),
        ([("sort", "-n"), ("k", "x")], [5, 1, 3]),
        ([("sort", "n"), ("g", "1"), ("g", "2")], [3, 6, 2, 5]),
    ],
)
def test_a_sorted_page_at_the_mark_is_in_the_order_then(params, want):
    table = table_then()
    mark = table.watermark
    written_again(table)
    page, total, _more = plans.page_as_of(table, mark, query_of(params))
    assert ids(page) == want and total == len(want)
    first, rest = plans.page_as_of(table, mark, query_of(params + [("limit", "1")]))[::2], want[1:]
    assert ids(first[0]) == want[:1] and first[1] is bool(rest)


# -- the key column's fast comparisons, with a walk ------------------------------------------


def record(id_: int, f: float, n: int | None = None) -> dict:
    return {"id": id_, "n": n, "f": f, "s": None, "c": "x", "t": None, "k": "x", "g": None, "w": None}


def many(ids_: list[int], fs: list[float]) -> Table:
    table = Table(ITEM)
    for id_, f in zip(ids_, fs):
        table.insert(ITEM.row(record(id_, f)))
    return table


BOUNDS = [
    ([("f__gt", "2")], lambda f: f > 2),
    ([("f__gte", "2")], lambda f: f >= 2),
    ([("f__lt", "2")], lambda f: f < 2),
    ([("f__lte", "2")], lambda f: f <= 2),
    ([("f__gte", "1"), ("f__lt", "3")], lambda f: 1 <= f < 3),
    ([("f__gt", "1"), ("f__lte", "3")], lambda f: 1 < f <= 3),
    ([("f__gt", "1"), ("f__lt", "3")], lambda f: 1 < f < 3),
    ([("f__gte", "1"), ("f__lte", "3")], lambda f: 1 <= f <= 3),
]


@pytest.mark.parametrize("params, test", BOUNDS)
@pytest.mark.parametrize("far", [False, True])
def test_a_window_tested_per_id_by_the_key_column(params, test, far):
    # 80 records, f in 0..4 by steps of 0.5; with `far` two of them have a negative id and an
    # id far past the others (the key column's side dict). Sorted by c (every c equal), a page
    # of 3 walks the ids testing each one's f; a filter on k makes the window a test as well.
    fs = [(i % 9) * 0.5 for i in range(80)]
    ids_ = list(range(1, 81))
    if far:
        ids_[3], ids_[40] = -5, 10**9
    table = many(ids_, fs)
    want = sorted(i for i, f in zip(ids_, fs) if test(f))
    got = []
    for extra in ([("sort", "c"), ("limit", "3")], [("sort", "c"), ("k", "x")], [("k", "x")]):
        page, total, _more = plans.list_page(table, query_of(params + extra))
        assert total == len(want), extra
        got.append(ids(page))
    assert got == [want[:3], want, want]
    mark = table.watermark
    for id_ in ids_:  # every id touched since the mark: each asked of the live indexes
        table.replace(table.live[id_], ITEM.row(record(id_, 4.0 - fs[ids_.index(id_)])))
    page, total, _more = plans.page_as_of(table, mark, query_of(params))
    assert ids(page) == want and total == len(want)


def test_a_window_of_a_column_with_nulls_tests_each_id_by_its_key():
    table = Table(ITEM)
    for i in range(1, 41):
        table.insert(ITEM.row(record(i, 1.0, None if i % 3 == 0 else i % 5)))
    want = [i for i in range(1, 41) if i % 3 and i % 5 >= 2]
    for extra in ([("sort", "f"), ("limit", "50")], [("k", "x")]):
        page, total, _more = plans.list_page(table, query_of([("n__gte", "2")] + extra))
        assert (ids(page), total) == (want, len(want))
    page, total, _more = plans.list_page(table, query_of([("n__null", "true"), ("k", "x"), ("sort", "f")]))
    assert (ids(page), total) == (list(range(3, 41, 3)), 13)


@pytest.mark.parametrize(
    "params, want",
    [
        ([("n__gte", "1"), ("n__null", "true")], []),  # a bound and "is null": nothing
        ([("n__lt", "3"), ("n__null", "false")], [1, 2, 5, 6]),
        ([("n__null", "false")], [1, 2, 3, 4, 5, 6]),  # no bound: every key
        ([("n__gt", "1"), ("n__lte", "3"), ("n__null", "false")], [2, 3, 6]),
    ],
)
def test_null_and_a_bound_on_a_column_without_nulls(params, want):
    # n holds no null at all, so its key column's slots answer every id (the fast path)
    table = Table(ITEM)
    for i, n in enumerate([1, 2, 3, 4, 1, 2], 1):
        table.insert(ITEM.row({**record(i, 1.0, n), "k": "xy"[i % 2]}))
    mark = table.watermark
    for i in range(1, 7):  # each touched since the mark, with the same values
        table.replace(table.live[i], ITEM.row({**record(i, 1.0, [1, 2, 3, 4, 1, 2][i - 1]), "k": "xy"[i % 2]}))
    for extra in ([], [("k", "x"), ("k", "y")], [("sort", "f")]):
        page, total, _more = plans.list_page(table, query_of(params + extra))
        assert (ids(page), total) == (want, len(want)), extra
        page, total, _more = plans.page_as_of(table, mark, query_of(params + extra))
        assert (ids(page), total) == (want, len(want)), ("at the mark", extra)


def test_the_sources_of_a_query_come_smallest_first():
    """`sources_of` hands the plans the conditions that can list their ids smallest first:
    a gather reads the first and tests the others (two sources and three, a filter's bucket
    larger than a window and smaller)."""
    from dbsvc.storage.conditions import sources_of, windows_of

    table = Table(ITEM)
    for i in range(1, 41):
        values = dict(zip(FIELDS, (i % 3, float(i), f"s{i:02}", f"c{i:02}", None, "x" if i > 2 else "y", None, None)))
        table.insert(ITEM.row({"id": i, **values}))
    for params, kinds in (
        ([("k", "x"), ("f__lte", "3")], ["window", "filter"]),  # a window of 3 before a bucket of 38
        ([("k", "y"), ("f__lte", "30")], ["filter", "window"]),  # a bucket of 2 before a window of 30
        ([("k", "x"), ("f__lte", "30"), ("c__prefix", "c0")], ["window", "window", "filter"]),
    ):
        query = ITEM.parse_list_query(params)
        windows, filters, _not_null = windows_of(table, query)
        sources, _found = sources_of(table, query, windows, filters)
        assert [kind for _size, kind, _field in sources] == kinds, params
        assert [size for size, _kind, _field in sources] == sorted(size for size, _kind, _field in sources)
