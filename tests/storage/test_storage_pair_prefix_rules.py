"""Session 8's kept counts and prefix orders at each decision's exact boundary, on a `Table` in
memory (storage/buckets.py `PairCount`, `count`, `prefix_order`; bucketplan.py
`bucket_count`, `_prefix_plan`): a pair counted from a smaller bucket of 128 ids but not 127,
whichever order the filters come in; a prefix kept at 128 ids but not 127, and while
200 * 200 <= 2 * (offset + limit + 1) * n (a walk of the sort order is cheaper past it);
only a plain prefix (`s__prefix`, or the same range written out) on a str field sorted by
another is a prefix plan, and one under 128 ids is ordered in place (session 10); the page,
`total` and `more` of each against the reference."""

from __future__ import annotations

from dbsvc.storage import query as plans
from dbsvc.storage.bucketplan import bucket_count, bucket_operators
from dbsvc.storage.table import Table
from tests.storage.test_storage_plan_units import ITEM, reference


def record(i: int, n=None, s=None, k="x", g=None) -> dict:
    return {"id": i, "n": n, "f": 1.0, "s": s, "k": k, "g": g, "w": None}


def table_of(records: list[dict]) -> tuple[Table, dict[int, dict]]:
    table = Table(ITEM)
    for r in records:
        table.insert(ITEM.row(r))
    return table, {r["id"]: r for r in records}


def listed(table: Table, *params: tuple[str, str]) -> tuple[list[int], int, bool]:
    page, total, more = plans.list_page(table, ITEM.parse_list_query(list(params)))
    return [r["id"] for r in page], total, more


def counts(table: Table) -> dict:
    return {p: {key: dict(c.counts) for key, c in kept.items()} for p, kept in table.buckets.counted.items()}


def prefixes(table: Table) -> dict:
    return {slot: sorted(orders) for slot, orders in table.buckets.prefixed.items()}


# -- two filters counted per pair ---------------------------------------------------------


def pair_table() -> tuple[Table, dict[int, dict]]:
    """g=1: 128 ids (k=y every other one: 64), g=2: 127 (k=y: 64), g=3: 400 (k=y: 200)."""
    rows, i = [], 0
    for g, size in ((1, 128), (2, 127), (3, 400)):
        for j in range(size):
            i += 1
            rows.append(record(i, n=j % 5, k="y" if j % 2 == 0 else "x", g=g))
    return table_of(rows)


def test_a_pair_is_counted_from_a_smaller_bucket_of_128_ids_and_not_127():
    table, _records = pair_table()
    assert listed(table, ("g", "2"), ("k", "y"), ("limit", "3")) == ([129, 131, 133], 64, True)
    assert counts(table) == {}
    assert listed(table, ("g", "1"), ("k", "y"), ("limit", "3")) == ([1, 3, 5], 64, True)
    assert counts(table) == {("g", "k"): {1: {"y": 64}}}
    assert bucket_count(table, ITEM.parse_list_query([("g", "2"), ("k", "y")]).filters) is None


def test_the_count_is_the_smaller_buckets_whichever_filter_comes_first():
    table, _records = pair_table()
    assert bucket_count(table, ITEM.parse_list_query([("k", "y"), ("g", "1")]).filters) == (64, "g", 128)
    assert counts(table) == {("g", "k"): {1: {"y": 64}}}
    kept = table.buckets.counted["g", "k"][1]
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("k", "y")]).filters) == (64, "g", 128)
    # k=x holds 327 ids, g=3 400: counted from k's bucket
    assert bucket_count(table, ITEM.parse_list_query([("g", "3"), ("k", "x")]).filters) == (200, "k", 327)
    assert table.buckets.counted["g", "k"][1] is kept
    assert counts(table) == {("g", "k"): {1: {"y": 64}}, ("k", "g"): {"x": {3: 200}}}
    # the larger bucket's field first: k=x holds 327 ids, g=1 128
    assert bucket_count(table, ITEM.parse_list_query([("k", "x"), ("g", "1")]).filters) == (64, "g", 128)
    assert counts(table) == {("g", "k"): {1: {"y": 64, "x": 64}}, ("k", "g"): {"x": {3: 200}}}


def test_a_count_kept_is_found_in_either_order_and_follows_the_writes():
    table, records = pair_table()
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("k", "y")]).filters) == (64, "g", 128)
    for i in range(1000, 1300):  # k=y grows, g=1 too: the count is kept under (g, k)
        table.insert(ITEM.row(record(i, n=0, k="y", g=1)))
    assert bucket_count(table, ITEM.parse_list_query([("k", "y"), ("g", "1")]).filters) == (364, "g", 428)
    table.delete(1, table.live[1])  # g=1, k=y
    table.replace(table.live[2], ITEM.row(record(2, n=1, k="y", g=1)))  # x -> y
    table.replace(table.live[3], ITEM.row(record(3, n=1, k="y", g=2)))  # g 1 -> 2
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("k", "y")]).filters) == (363, "g", 426)
    assert counts(table) == {("g", "k"): {1: {"y": 363}}}


def test_three_filters_or_a_filter_of_two_values_are_never_counted_by_pair():
    table, records = pair_table()
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("k", "y"), ("n", "0")]).filters) is None
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("k", "x"), ("k", "y")]).filters) is None
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("g", "3"), ("k", "y")]).filters) is None
    assert bucket_count(table, ITEM.parse_list_query([("g", "1")]).filters) is None
    assert counts(table) == {}
    for params, test in (
        ([("g", "1"), ("k", "y"), ("n", "0")], lambda r: r["g"] == 1 and r["k"] == "y" and r["n"] == 0),
        ([("g", "1"), ("k", "x"), ("k", "y")], lambda r: r["g"] == 1),
        ([("g", "1"), ("g", "3"), ("k", "y")], lambda r: r["g"] in (1, 3) and r["k"] == "y"),
    ):
        want = reference(records, test, [])
        assert listed(table, *params, ("limit", "5")) == (want[:5], len(want), True), params


# -- a prefix kept in another field's order -----------------------------------------------


def prefix_table(size: int, others: int) -> tuple[Table, dict[int, dict]]:
    """`size` records whose s starts with "ab" ("ab" itself first, then "abc"), n descending
    in fives, and `others` of s "b"."""
    rows = [record(i, n=(size - i) // 5, s="ab" if i == 1 else "abc") for i in range(1, size + 1)]
    rows += [record(size + j, n=j, s="b") for j in range(1, others + 1)]
    return table_of(rows)


def by_n(records: dict[int, dict], test, desc: bool) -> list[int]:
    return reference(records, test, [("n", desc)])


def test_a_prefix_of_128_ids_is_kept_and_127_is_not():
    for size, kept in ((128, {("s", 2, "n"): ["ab"]}), (127, {})):
        table, records = prefix_table(size, 2000)
        want = by_n(records, lambda r: r["s"].startswith("ab"), True)
        assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20")) == (want[:20], size, True)
        assert prefixes(table) == kept, size


def test_a_prefix_is_kept_while_its_square_is_within_twice_end_times_n():
    # 200 ids, a page of 19 at offset 0: end 20; 200 * 200 == 2 * 20 * 1000 is kept, n 999 not
    for others, kept in ((800, {("s", 2, "n"): ["ab"]}), (799, {})):
        table, records = prefix_table(200, others)
        want = by_n(records, lambda r: r["s"].startswith("ab"), False)
        assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "19")) == (want[:19], 200, True)
        assert prefixes(table) == kept, others
    # the offset counts: 10 + 9 + 1 is the same end
    table, records = prefix_table(200, 800)
    want = by_n(records, lambda r: r["s"].startswith("ab"), False)
    assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "9"), ("offset", "10")) == (
        want[10:19],
        200,
        True,
    )
    assert prefixes(table) == {("s", 2, "n"): ["ab"]}


def test_a_kept_prefix_answers_every_page_and_is_used_again_once_small():
    table, records = prefix_table(300, 2000)
    test = lambda r: r["s"] is not None and r["s"].startswith("ab")  # noqa: E731
    desc = by_n(records, test, True)
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20")) == (desc[:20], 300, True)
    order = table.buckets.prefixed["s", 2, "n"]["ab"]
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20"), ("offset", "280")) == (
        desc[280:],
        300,
        False,
    )
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20"), ("offset", "279")) == (
        desc[279:299],
        300,
        True,
    )
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20"), ("offset", "300")) == ([], 300, False)
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "0")) == ([], 300, False)
    for i in range(2, 251):  # 249 deleted: 51 left, under 128, still answered from the kept order
        table.delete(i, table.live[i])
        del records[i]
    desc = by_n(records, test, True)
    asc = by_n(records, test, False)
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20")) == (desc[:20], 51, True)
    assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "60")) == (asc, 51, False)
    assert table.buckets.prefixed["s", 2, "n"]["ab"] is order and len(order) == 51


def test_a_prefix_with_nothing_under_it_is_empty():
    table, _records = prefix_table(300, 2000)
    assert listed(table, ("s__prefix", "zz"), ("sort", "-n"), ("limit", "20")) == ([], 0, False)
    assert prefixes(table) == {}


def test_only_a_plain_prefix_on_a_str_field_sorted_by_another_is_a_prefix_plan():
    table, records = prefix_table(300, 2000)
    starts = lambda r: r["s"] is not None and r["s"].startswith("ab")  # noqa: E731
    # the same range written out is the same plan
    want = by_n(records, starts, True)
    got = listed(table, ("s__gte", "ab"), ("s__lt", "ac"), ("sort", "-n"), ("limit", "20"))
    assert got == (want[:20], 300, True)
    assert prefixes(table) == {("s", 2, "n"): ["ab"]}
    table, records = prefix_table(300, 2000)
    for params, test in (
        ([("s__gt", "ab"), ("s__lt", "ac")], lambda r: r["s"] is not None and "ab" < r["s"] < "ac"),  # "ab" left out
        ([("s__gte", "ab"), ("s__lte", "ac")], lambda r: r["s"] is not None and "ab" <= r["s"] <= "ac"),
        ([("s__gte", "ab"), ("s__lt", "ad")], lambda r: r["s"] is not None and "ab" <= r["s"] < "ad"),
        ([("s__gte", "ab")], lambda r: r["s"] is not None and r["s"] >= "ab"),
        ([("s__lt", "ac")], lambda r: r["s"] is not None and r["s"] < "ac"),
        ([("n__gte", "3")], lambda r: r["n"] is not None and r["n"] >= 3),
    ):
        want = by_n(records, test, True)
        got = listed(table, *params, ("sort", "-n"), ("limit", "20"))
        assert got == (want[:20], len(want), len(want) > 20), params
        assert prefixes(table) == {}, params
    # sorted by its own field, or not sorted: seek.py's
    want = reference(records, starts, [("s", True)])
    assert listed(table, ("s__prefix", "ab"), ("sort", "-s"), ("limit", "20")) == (want[:20], 300, True)
    assert listed(table, ("s__prefix", "ab"), ("limit", "20")) == (list(range(1, 21)), 300, True)
    assert prefixes(table) == {}


def test_a_prefix_sorted_by_two_keys_is_kept_by_its_first():
    table, records = prefix_table(300, 2000)
    starts = lambda r: r["s"] is not None and r["s"].startswith("ab")  # noqa: E731
    want = reference(records, starts, [("n", True), ("s", False)])
    got = listed(table, ("s__prefix", "ab"), ("sort", "-n,s"), ("limit", "20"), ("offset", "3"))
    assert got == (want[3:23], 300, True)
    assert prefixes(table) == {("s", 2, "n"): ["ab"]}
    got = listed(table, ("s__prefix", "ab"), ("sort", "-n,s"), ("limit", "20"), ("offset", "290"))
    assert got == (want[290:], 300, False)


# -- buckets.py's own: a kept count answers without a pass, a prefix's keys in an array --


def test_a_kept_count_is_answered_as_kept_and_looked_up_by_its_four_keys():
    table, _records = pair_table()
    other, _ = table_of([record(i, k="y", g=1) for i in range(1, 301)])  # another table: g=1 all k=y
    buckets, hashes = table.buckets, table.hashes
    assert buckets.kept_count("g", 1, "k", "y") is None
    assert buckets.count("g", 1, hashes["g"], "k", "y", hashes["k"]) == 64
    # kept: answered without reading the indexes given (another table's would count 300)
    assert buckets.count("g", 1, other.hashes["g"], "k", "y", other.hashes["k"]) == 64
    assert buckets.count("g", 1, other.hashes["g"], "k", "x", other.hashes["k"]) == 0  # not kept: counted there
    assert buckets.kept_count("g", 1, "k", "y") == 64
    assert buckets.kept_count("g", 1, "k", "x") == 0
    assert buckets.kept_count("g", 1, "k", "z") is None  # a B key never asked
    assert buckets.kept_count("g", 2, "k", "y") is None  # an A key never asked
    assert buckets.kept_count("k", "y", "g", 1) is None  # the pair the other way round
    assert buckets.kept_count("g", 1, "n", 0) is None


def test_a_kept_prefix_holds_its_sort_fields_keys_in_an_array():
    table, _records = prefix_table(300, 2000)
    listed(table, ("s__prefix", "ab"), ("sort", "-n"), ("limit", "20"))
    order = table.buckets.kept_prefix("s", "ab", "n")
    assert order is not None and len(order) == 300
    assert {keys.typecode for keys in order.key_sublists} == {"q"}
    assert table.buckets.kept_prefix("s", "ab", "f") is None
    assert table.buckets.kept_prefix("s", "abc", "n") is None
    assert len(table.buckets) == 1 and table.buckets.entries() == 300


def test_a_kept_prefix_down_to_one_id_and_to_none_answers_from_its_order():
    table, records = prefix_table(200, 2000)
    assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "20"))[1:] == (200, True)
    order = table.buckets.prefixed["s", 2, "n"]["ab"]
    for i in range(1, 200):
        table.delete(i, table.live[i])
    assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "5")) == ([200], 1, False)
    assert listed(table, ("s__prefix", "ab"), ("sort", "-n,f"), ("limit", "5")) == ([200], 1, False)
    assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "5"), ("offset", "1")) == ([], 1, False)
    table.delete(200, table.live[200])
    assert listed(table, ("s__prefix", "ab"), ("sort", "n"), ("limit", "5")) == ([], 0, False)
    assert table.buckets.prefixed["s", 2, "n"]["ab"] is order and len(order) == 0


def test_a_count_kept_under_a_bucket_grown_past_the_other_is_used_in_either_order():
    table, _records = pair_table()
    assert bucket_count(table, ITEM.parse_list_query([("g", "1"), ("k", "y")]).filters) == (64, "g", 128)
    for i in range(1000, 1700):  # g=1 grows to 828 ids, past k=y's 628: the count stays under (g, k)
        table.insert(ITEM.row(record(i, n=0, k="x" if i < 1400 else "y", g=1)))
    for params in ([("g", "1"), ("k", "y")], [("k", "y"), ("g", "1")]):
        assert bucket_count(table, ITEM.parse_list_query(params).filters) == (364, "k", 628), params
        assert counts(table) == {("g", "k"): {1: {"y": 364}}}, params  # found, never counted again
    assert listed(table, ("k", "y"), ("g", "1"), ("limit", "2"), ("offset", "363")) == ([1699], 364, False)


def test_a_prefix_under_128_ids_is_ordered_in_place_every_page_and_edge_against_the_reference():
    """bucketplan.py `_prefix_plan` orders a prefix under BUCKET_AT ids itself (its ids by the
    sort's key columns), where it declined to seek.py's gather: nulls of the sort field,
    equal keys, one and two sort keys both ways, pages across the end, `limit=0`, an offset
    past the end, a prefix of one id and of none."""
    rows = [record(i, n=None if i % 7 == 0 else i % 4, s="ab" if i % 3 == 0 else "abd") for i in range(1, 61)]
    rows += [record(100 + j, n=j, s="b") for j in range(1, 400)] + [record(999, n=5, s="xyz")]
    table, records = table_of(rows)
    for prefix, size in (("ab", 60), ("abd", 40), ("xy", 1), ("zz", 0)):
        starts = lambda r, p=prefix: r["s"] is not None and r["s"].startswith(p)  # noqa: E731
        for sort in ([("n", True)], [("n", False)], [("n", True), ("s", False)], [("f", False), ("n", True)]):
            want = reference(records, starts, sort)
            text = ",".join(("-" if desc else "") + f for f, desc in sort)
            for limit, offset in ((20, 0), (20, 45), (7, 53), (0, 0), (5, 60), (100, 0)):
                got = listed(
                    table, ("s__prefix", prefix), ("sort", text), ("limit", str(limit)), ("offset", str(offset))
                )
                more = limit > 0 and offset + limit < size
                assert got == (want[offset : offset + limit], size, more), (prefix, sort, limit, offset)
                query = ITEM.parse_list_query([("s__prefix", prefix), ("sort", text), ("limit", str(limit))])
                # planned here, not declined, unless a walk of the sort order is cheaper (seek.py's)
                planned = size * size <= 2 * (limit + 1) * len(records)
                assert (bucket_operators(table, query) is not None) == planned, (prefix, sort, limit)
    assert prefixes(table) == {}  # never kept
