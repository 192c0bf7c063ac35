"""The list plans (storage/query.py, seek.py, conditions.py) on a `Table` held in memory, no
store and no fixture: exact pages at each decision (a range's bounds open and closed, the
nulls' place in each direction, a prefix ending in the highest code point, `__null` on a
sort field and on a filter-only field) and a sweep of every plan against a reference order
written out here (keys in turn, nulls last ascending and first descending, ties on the id
ascending): small and large matches (a gather, a walk), one or two sort keys, offsets,
cursor walks to the end, a row test, and lists at a past watermark (planned on the live
indexes, or over the state made again). Fixture-free and fast, so bench/mutation_inprocess.py
runs it per mutant (docs/mutation.md, the storage query modules' section)."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import query as plans
from dbsvc.storage.table import Table

SCHEMA = """
model Item {
  id  int    @id
  n   int?   @filter @sort
  f   float  @sort
  s   str?   @sort
  k   str    @filter
  g   int?   @filter
  w   str?   @search
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "plans.dbs")).BY_NAME["Item"]
FIELDS = ("n", "f", "s", "k", "g", "w")
POS = {f: i for i, f in enumerate(ITEM.fields)}


def table_of(rows: list[tuple]) -> tuple[Table, dict[int, dict]]:
    """A table of `rows` (values of FIELDS, ids 1, 2, ...) and the records by id."""
    table, records = Table(ITEM), {}
    for i, values in enumerate(rows, 1):
        record = {"id": i, **dict(zip(FIELDS, values))}
        table.insert(ITEM.row(record))
        records[i] = record
    return table, records


def ids_of(table: Table, params: list[tuple[str, str]], **over) -> tuple[list[int], int, bool]:
    query = ITEM.parse_list_query(params)
    if over:
        query = replace(query, **over)
    page, total, more = plans.list_page(table, query)
    return [r["id"] for r in page], total, more


# -- the reference -----------------------------------------------------------------------


def compare(sort: list[tuple[str, bool]], a: dict, b: dict) -> int:
    for field, desc in sort:
        x, y = a[field], b[field]
        if x == y:
            continue
        if x is None or y is None:  # nulls last ascending, first descending
            return (1 if x is None else -1) * (-1 if desc else 1)
        return (1 if x > y else -1) * (-1 if desc else 1)
    return a["id"] - b["id"]


def reference(records: dict[int, dict], test, sort: list[tuple[str, bool]]) -> list[int]:
    chosen = [r for r in records.values() if test(r)]
    chosen.sort(key=functools.cmp_to_key(functools.partial(compare, sort)))
    return [r["id"] for r in chosen]


def words(text: str | None) -> list[str]:
    return (text or "").split()


# Conditions: (query parameters, the same test written out).
CONDITIONS = [
    ([], lambda r: True),
    ([("n", "1")], lambda r: r["n"] == 1),
    ([("n", "0"), ("n", "2")], lambda r: r["n"] in (0, 2)),
    ([("k", "x")], lambda r: r["k"] == "x"),
    ([("k", "x"), ("n", "3")], lambda r: r["k"] == "x" and r["n"] == 3),
    ([("k", "y"), ("g", "1")], lambda r: r["k"] == "y" and r["g"] == 1),
    ([("n__gt", "1")], lambda r: r["n"] is not None and r["n"] > 1),
    ([("n__gte", "1"), ("n__lt", "3")], lambda r: r["n"] is not None and 1 <= r["n"] < 3),
    ([("n__lte", "1")], lambda r: r["n"] is not None and r["n"] <= 1),
    ([("f__gte", "1.5")], lambda r: r["f"] >= 1.5),
    ([("f__gt", "0.5"), ("f__lte", "2")], lambda r: 0.5 < r["f"] <= 2),
    ([("s__prefix", "a")], lambda r: r["s"] is not None and r["s"].startswith("a")),
    ([("s__lt", "b")], lambda r: r["s"] is not None and r["s"] < "b"),
    ([("n__null", "true")], lambda r: r["n"] is None),
    ([("n__null", "false")], lambda r: r["n"] is not None),
    ([("g__null", "true")], lambda r: r["g"] is None),
    ([("g__null", "false")], lambda r: r["g"] is not None),
    ([("g__null", "true"), ("g", "1")], lambda r: False),
    ([("g__null", "false"), ("k", "x")], lambda r: r["g"] is not None and r["k"] == "x"),
    ([("search", "he")], lambda r: any(w.startswith("he") for w in words(r["w"]))),
    ([("search", "wo")], lambda r: any(w.startswith("wo") for w in words(r["w"]))),
    ([("search", "he"), ("n", "1")], lambda r: r["n"] == 1 and any(w.startswith("he") for w in words(r["w"]))),
    ([("search", "zz")], lambda r: False),
    ([("n__gt", "0"), ("f__lt", "2")], lambda r: r["n"] is not None and r["n"] > 0 and r["f"] < 2),
    ([("n__gte", "2"), ("k", "x")], lambda r: r["n"] is not None and r["n"] >= 2 and r["k"] == "x"),
    ([("s__null", "true"), ("k", "y")], lambda r: r["s"] is None and r["k"] == "y"),
    ([("n__null", "false"), ("s__null", "false")], lambda r: r["n"] is not None and r["s"] is not None),
]
SORTS = [
    [],
    [("n", False)],
    [("n", True)],
    [("f", True)],
    [("s", False)],
    [("s", True), ("n", False)],
    [("n", True), ("f", False)],
    [("f", False), ("s", True)],
]
PAGES = [(100, 0), (3, 0), (4, 2), (2, 9), (0, 0), (5, 300)]


def sort_param(sort: list[tuple[str, bool]]) -> list[tuple[str, str]]:
    return [("sort", ",".join(("-" if d else "") + f for f, d in sort))] if sort else []


def spread(count: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        rows.append(
            (
                rng.choice([None, 0, 1, 1, 2, 3, 3]),
                rng.choice([0.5, 1.0, 1.5, 2.0, 2.5]),
                rng.choice([None, "a", "ab", "b", "ba", "\U0010ffff"]),
                rng.choice(["x", "y", "y"]),
                rng.choice([None, 1, 2]),
                rng.choice([None, "hello world", "help", "word", "hex wok"]),
            )
        )
    return rows


def cursor_of(record: dict, sort: list[tuple[str, bool]]) -> tuple:
    return (tuple(None if record[f] is None else ITEM.keys[f](record[f]) for f, _d in sort), record["id"])


def walk(table: Table, params, sort, limit: int) -> tuple[list[int], set[int]]:
    seen: list[int] = []
    totals = set()
    cursor = None
    for _ in range(1000):
        query = replace(ITEM.parse_list_query(params + sort_param(sort) + [("limit", str(limit))]), cursor=cursor)
        page, total, more = plans.list_page(table, query)
        totals.add(total)
        seen += [r["id"] for r in page]
        assert plans.live_ids(table, query) == [r["id"] for r in page]
        if not more:
            return seen, totals
        cursor = cursor_of(page[-1], sort)
    raise AssertionError("a cursor walk that does not end")


@pytest.mark.parametrize("count", [12, 90, 260])
def test_every_plan_pages_as_the_reference(count):
    table, records = table_of(spread(count, count))
    for params, test in CONDITIONS:
        for sort in SORTS:
            want = reference(records, test, sort)
            for limit, offset in PAGES:
                query = ITEM.parse_list_query(
                    params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))]
                )
                page, total, more = plans.list_page(table, query)
                got = [r["id"] for r in page]
                where = (params, sort, limit, offset)
                assert (got, total) == (want[offset : offset + limit], len(want)), where
                assert more == (bool(got) and offset + len(got) < len(want)), where
                assert plans.live_ids(table, query) == got, where
                if not query.ranges and not query.nulls and not query.search:
                    live, live_total = plans.list_live(table, query)
                    assert ([r["id"] for r in live], live_total) == (got, total), where


@pytest.mark.parametrize("count", [30, 260])
def test_cursor_walks_reach_the_end_in_order(count):
    table, records = table_of(spread(count, 7 + count))
    for params, test in CONDITIONS[::2] + CONDITIONS[1::6]:
        for sort in SORTS:
            want = reference(records, test, sort)
            for limit in (1, 7) if count < 100 else (40,):
                seen, totals = walk(table, params, sort, limit)
                assert seen == want and totals == {len(want)}, (params, sort, limit)


@pytest.mark.parametrize("count", [40, 260])
def test_a_row_test_counts_sorts_and_pages_only_what_passes(count):
    table, records = table_of(spread(count, count + 3))
    row = lambda values: values[POS["f"]] != 1.0  # noqa: E731  (a rule no index answers)
    for params, test in CONDITIONS[:6] + CONDITIONS[6:27:4]:
        for sort in SORTS:
            want = reference(records, lambda r: test(r) and r["f"] != 1.0, sort)
            for limit, offset in PAGES:
                got, total, more = ids_of(
                    table, params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))], where_row=row
                )
                assert (got, total) == (want[offset : offset + limit], len(want)), (params, sort, limit, offset)
                assert more == (bool(got) and offset + len(got) < len(want))


def changed(table: Table, records: dict[int, dict], rng: random.Random, writes: int) -> None:
    """`writes` replaces, deletes and inserts on both the table and the records."""
    for _ in range(writes):
        choice = rng.random()
        if choice < 0.5 and records:
            id_ = rng.choice(sorted(records))
            new = {"id": id_, **dict(zip(FIELDS, spread(1, rng.random())[0]))}
            table.replace(table.live[id_], ITEM.row(new))
            records[id_] = new
        elif choice < 0.8 and records:
            id_ = rng.choice(sorted(records))
            table.delete(id_, table.live[id_])
            del records[id_]
        else:
            id_ = table.max_id + 1
            new = {"id": id_, **dict(zip(FIELDS, spread(1, rng.random())[0]))}
            table.insert(ITEM.row(new))
            records[id_] = new


@pytest.mark.parametrize("writes", [6, 120])
def test_a_list_at_a_past_watermark_is_the_list_of_the_records_then(writes):
    table, records = table_of(spread(200, writes))
    then = {i: dict(r) for i, r in records.items()}
    mark = table.watermark
    changed(table, records, random.Random(writes), writes)
    for params, test in CONDITIONS[::3] + [CONDITIONS[1], CONDITIONS[4]]:
        for sort in SORTS[::2] + [SORTS[5]]:
            want = reference(then, test, sort)
            for limit, offset in PAGES[:4]:
                query = ITEM.parse_list_query(
                    params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))]
                )
                page, total, more = plans.page_as_of(table, mark, query)
                got = [r["id"] for r in page]
                assert (got, total) == (want[offset : offset + limit], len(want)), (params, sort, limit, offset)
                assert more == (bool(got) and offset + len(got) < len(want)), (params, sort, limit, offset)
                assert page == [then[i] for i in got]
            if want:  # a cursor at the past watermark: the rest after the first record
                first = then[want[0]]
                query = replace(ITEM.parse_list_query(params + sort_param(sort)), cursor=cursor_of(first, sort))
                page, total, _more = plans.page_as_of(table, mark, query)
                assert [r["id"] for r in page] == want[1:101] and total == len(want)


def test_a_list_of_a_past_state_made_again_pages_it():
    table, records = table_of(spread(50, 5))
    then = {i: dict(r) for i, r in records.items()}
    mark = table.watermark
    changed(table, records, random.Random(5), 30)
    state = table.state_as_of(mark)
    for params, test in CONDITIONS[:6] + CONDITIONS[6::5]:
        for sort in SORTS:
            want = reference(then, test, sort)
            for limit, offset in PAGES:
                query = ITEM.parse_list_query(
                    params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))]
                )
                page, total, more = plans.state_page(state, table, query)
                got = [r["id"] for r in page]
                assert (got, total) == (want[offset : offset + limit], len(want)), (params, sort, limit, offset)
                assert more == (bool(got) and offset + len(got) < len(want))
                assert page == [then[i] for i in got]


# -- exact pages at the decisions --------------------------------------------------------

SMALL = [
    # n,    f,   s,            k,   g,    w
    (2, 1.0, "a", "x", None, "hello"),  # 1
    (None, 2.0, "ab", "y", 1, None),  # 2
    (1, 1.0, None, "x", 2, "help me"),  # 3
    (2, 0.5, "\U0010ffff", "y", None, "world"),  # 4
    (None, 1.5, "a\U0010ffff", "x", 1, "hello world"),  # 5
    (3, 2.0, "b", "y", 2, None),  # 6
]


@pytest.mark.parametrize(
    "params, want",
    [
        ([("n__gt", "1"), ("sort", "n")], [1, 4, 6]),
        ([("n__gte", "2"), ("sort", "n")], [1, 4, 6]),
        ([("n__gt", "2"), ("sort", "n")], [6]),
        ([("n__lt", "2"), ("sort", "n")], [3]),
        ([("n__lte", "2"), ("sort", "n")], [3, 1, 4]),
        ([("n__lte", "2"), ("sort", "-n")], [1, 4, 3]),
        ([("n__gte", "1"), ("n__lt", "3"), ("sort", "-n")], [1, 4, 3]),
        ([("n__gt", "1"), ("n__lte", "3")], [1, 4, 6]),
        ([("n__gt", "3")], []),
        ([("n__lt", "9"), ("sort", "n")], [3, 1, 4, 6]),  # a bound past every key: the end, counted right
        ([("n__lte", "9"), ("sort", "-n")], [6, 1, 4, 3]),
        ([("n__gte", "9")], []),
        ([("n__lt", "0")], []),
        ([("sort", "n")], [3, 1, 4, 6, 2, 5]),
        ([("sort", "-n")], [2, 5, 6, 1, 4, 3]),
        ([("sort", "-n,f")], [5, 2, 6, 4, 1, 3]),
        ([("sort", "s")], [1, 2, 5, 6, 4, 3]),  # "ab" before "a" + U+10FFFF
        ([("sort", "-s")], [3, 4, 6, 5, 2, 1]),
        ([("s__prefix", "a"), ("sort", "s")], [1, 2, 5]),
        ([("s__prefix", "a\U0010ffff")], [5]),
        ([("s__prefix", "\U0010ffff")], [4]),
        ([("s__gte", "a\U0010ffff"), ("sort", "s")], [5, 6, 4]),
        ([("s__gt", "a\U0010ffff"), ("sort", "s")], [6, 4]),
        ([("s__lt", "ab"), ("sort", "-s")], [1]),
        ([("n__null", "true")], [2, 5]),
        ([("n__null", "false"), ("sort", "-n")], [6, 1, 4, 3]),
        ([("n__null", "true"), ("sort", "-n")], [2, 5]),
        ([("g__null", "true"), ("sort", "-f")], [1, 4]),
        ([("g__null", "false"), ("sort", "f")], [3, 5, 2, 6]),
        ([("g__null", "true"), ("g", "1")], []),
        ([("search", "hel")], [1, 3, 5]),
        ([("search", "hel wor")], [5]),
        ([("search", "hel"), ("sort", "-n")], [5, 1, 3]),
        ([("search", "me"), ("n__gt", "0")], [3]),
        ([("f__gt", "1"), ("f__lt", "2"), ("sort", "-f")], [5]),
        ([("f__gte", "1"), ("f__lte", "1.5"), ("sort", "-f")], [5, 1, 3]),
        ([("k", "x"), ("n__gte", "1"), ("sort", "-n")], [1, 3]),
        ([("k", "y"), ("sort", "-n"), ("limit", "2")], [2, 6]),
        ([("k", "y"), ("sort", "-n"), ("offset", "1"), ("limit", "2")], [6, 4]),
    ],
)
def test_exact_pages_at_each_bound_and_each_null(params, want):
    table, _records = table_of(SMALL)
    got, total, _more = ids_of(table, params)
    limited = any(p == "limit" for p, _v in params) or any(p == "offset" for p, _v in params)
    assert got == want and (limited or total == len(want))


@pytest.mark.parametrize(
    "sort, cursor, want",
    [
        ("n", ((2,), 1), [4, 6, 2, 5]),  # inside a run: its later ids, then the rest
        ("n", ((2,), 4), [6, 2, 5]),
        ("n", ((3,), 6), [2, 5]),  # the last key: the nulls follow
        ("n", ((None,), 2), [5]),  # among the nulls, by id
        ("n", ((None,), 5), []),
        ("-n", ((None,), 2), [5, 6, 1, 4, 3]),  # descending: the nulls first, then the keys
        ("-n", ((None,), 5), [6, 1, 4, 3]),
        ("-n", ((2,), 1), [4, 3]),
        ("-n", ((2,), 4), [3]),
        ("-n", ((2,), 0), [1, 4, 3]),  # a record no longer there: the place still counts
        ("-n", ((1,), 3), []),
        ("n", ((1,), 99), [1, 4, 6, 2, 5]),
        ("-n,f", ((2, 0.5), 4), [1, 3]),
        ("-n,f", ((None, 1.5), 5), [2, 6, 4, 1, 3]),
        ("s,n", (("a", 2), 1), [2, 5, 6, 4, 3]),
        ("-s,n", ((None, 1), 3), [4, 6, 5, 2, 1]),
        ("", ((), 3), [4, 5, 6]),
    ],
)
def test_a_cursor_starts_right_after_its_place(sort, cursor, want):
    table, _records = table_of(SMALL)
    params = [("sort", sort)] if sort else []
    got, total, more = ids_of(table, params, cursor=cursor)
    assert got == want and total == 6 and more is False
    if len(want) > 1:
        got, _total, more = ids_of(table, params + [("limit", "1")], cursor=cursor)
        assert got == want[:1] and more is True


def test_a_deep_descending_page_of_a_field_with_no_key_but_nulls():
    table, _records = table_of([(None, 1.0, None, "x", None, None)] * 3)
    assert ids_of(table, [("sort", "-n"), ("offset", "3"), ("limit", "2")]) == ([], 3, False)
    assert ids_of(table, [("sort", "-n"), ("offset", "1"), ("limit", "5")]) == ([2, 3], 3, False)


def test_a_cursor_page_ending_at_the_last_match_of_a_walked_condition_has_no_next():
    # seek.py `plan_operators`, one condition matching most records (walked in sort order,
    # tested per id): a page after a cursor that ends exactly at the last match says no more,
    # so its answer carries no `Link` (docs/mutation.md, session 12, wt-mpo2: mutant 146).
    table, records = table_of([(None, float(i % 5), None, "y" if i % 10 == 0 else "x", None, None) for i in range(100)])
    want = reference(records, lambda r: r["k"] == "x", [("f", False)])
    assert len(want) == 90
    params = [("k", "x"), ("sort", "f"), ("limit", "10")]
    for left in (10, 11, 9):
        cursor = cursor_of(records[want[-left - 1]], [("f", False)])
        got, total, more = ids_of(table, params, cursor=cursor)
        assert (got, total, more) == (want[-left:][:10], 90, left > 10), left
