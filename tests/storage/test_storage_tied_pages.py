"""Pages on two sort keys and more whose first key ties (orders.py `page_in_order`, keptparts.py
`ties_descending` and `tie_runs`): the tied runs of a descending page's span are kept beside
the span and only they are ordered by the other keys, one other key without nulls by one
sort of the run. Held to the brute-force order (tests/storage/test_storage_plan_units.py
`reference`) over the table's index and a filter value's bucket: both directions of each
key, a second key with and without nulls in a run, three keys, every offset around the
runs, cursor walks, and writes between two lists (the second key's, which the kept runs do
not depend on; the first key's, which drops them with the span)."""

from __future__ import annotations

import random
import sys
from dataclasses import replace

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.keptparts import tie_runs
from dbsvc.storage.orders import page_in_order
from dbsvc.storage.table import Table
from tests.storage.test_storage_plan_units import ITEM, cursor_of, reference, sort_param, table_of, walk

COUNT = 1500


def rows(seed: int, null_share: float) -> list[tuple]:
    """(n, f, s, k, g, w): f of 60 values (runs of ~25, a few across sublists), s of 30
    values (ties on both keys) null in `null_share` of the rows, g of 3 values (buckets of
    ~500, kept in order)."""
    rng = random.Random(seed)
    out = []
    for _ in range(COUNT):
        s = None if rng.random() < null_share else rng.choice("pqrst") + str(rng.randint(0, 5))
        out.append((rng.choice([None, 1, 2, 3]), rng.randint(0, 59) / 2, s, "x", rng.randint(1, 3), None))
    return out


SORTS = [
    [("f", True), ("s", False)],
    [("f", True), ("s", True)],
    [("f", False), ("s", False)],
    [("f", False), ("s", True)],
    [("f", True), ("s", False), ("n", True)],
]
OFFSETS = [0, 1, 2, 19, 20, 24, 25, 26, 300, 511, 512, 513, 1023, 1024, 1480, 1499, 1500]
TABLES = {share: table_of(rows(11, share)) for share in (0.0, 0.05)}


@pytest.mark.parametrize("share", sorted(TABLES))
@pytest.mark.parametrize("sort", SORTS)
def test_pages_by_position_are_the_reference_pages(share, sort):
    table, records = TABLES[share]
    expected = reference(records, lambda r: True, sort)
    for offset in OFFSETS:
        for limit in (1, 2, 20, 60):
            page = page_in_order(table.ordered["f"], sort[0][1], tuple(sort), table, offset, offset + limit)
            if offset or sort[0][1]:  # an ascending first page is left to the walk
                assert page == expected[offset : offset + limit], (offset, limit)
            else:
                assert page is None


@pytest.mark.parametrize("share", sorted(TABLES))
@pytest.mark.parametrize("sort", SORTS)
def test_lists_with_and_without_a_filter_are_the_reference_pages(share, sort):
    table, records = TABLES[share]
    for params, test in (([], lambda r: True), ([("g", "2")], lambda r: r["g"] == 2)):
        expected = reference(records, test, sort)
        for offset in OFFSETS:
            query = ITEM.parse_list_query([*params, *sort_param(sort), ("limit", "20"), ("offset", str(offset))])
            for _ in range(2):  # made, then kept
                page, total, _more = plans.list_page(table, query)
                assert [r["id"] for r in page] == expected[offset : offset + 20], (params, offset)
                assert total == len(expected)


@pytest.mark.parametrize("sort", SORTS[:3])
def test_cursor_walks_on_two_keys_reach_the_end_in_order(sort):
    table, records = TABLES[0.05]
    for params, test in (([], lambda r: True), ([("g", "3")], lambda r: r["g"] == 3)):
        seen, totals = walk(table, params, sort, 37)
        assert seen == reference(records, test, sort)
        assert totals == {len(seen)}


def _set(table, records, id_, **values) -> None:
    record = records[id_] = {**records[id_], **values}
    table.replace(table.live[id_], ITEM.row(record))


@pytest.mark.parametrize("sort", [[("f", True), ("s", False)], [("f", True), ("s", True)]])
def test_a_write_between_two_lists_is_seen_by_the_second(sort):
    table, records = table_of(rows(5, 0.0))
    rng = random.Random(2)
    for params, test in (([], lambda r: True), ([("g", "1")], lambda r: r["g"] == 1)):
        for offset in (0, 40, 300):
            query = ITEM.parse_list_query([*params, *sort_param(sort), ("limit", "20"), ("offset", str(offset))])
            for _ in range(6):
                page = [r["id"] for r in plans.list_page(table, query)[0]]
                assert page == reference(records, test, sort)[offset : offset + 20]
                # a page's own record gets another second key (the kept runs stay true), a
                # null one, or another first key (its run's tie made or undone: dropped)
                id_ = rng.choice(page)
                change = rng.choice([{"s": rng.choice(["a", "zz", "q1"])}, {"s": None}, {"f": rng.randint(0, 59) / 2}])
                _set(table, records, id_, **change)
            assert [r["id"] for r in plans.list_page(table, query)[0]] == reference(records, test, sort)[
                offset : offset + 20
            ]


def test_a_cursor_inside_a_tied_run_starts_right_after_it():
    table, records = TABLES[0.0]
    sort = [("f", True), ("s", False)]
    expected = reference(records, lambda r: True, sort)
    for at in (0, 5, 19, 24, 25, 600, 1498):
        query = replace(
            ITEM.parse_list_query([*sort_param(sort), ("limit", "20")]), cursor=cursor_of(records[expected[at]], sort)
        )
        assert [r["id"] for r in plans.list_page(table, query)[0]] == expected[at + 1 : at + 21]


@pytest.mark.parametrize(
    "keys, runs",
    [
        ([], []),
        ([1.0], []),
        ([3.0, 2.0, 1.0], []),
        ([2.0, 2.0], [(0, 2)]),
        ([3.0, 2.0, 2.0, 2.0, 1.0, 1.0], [(1, 4), (4, 6)]),
        ([5.0, 5.0, 4.0, 3.0, 3.0, 3.0, 2.0], [(0, 2), (3, 6)]),
        (["b", "a", "a", "c", "c"], [(1, 3), (3, 5)]),
    ],
)
def test_tie_runs_are_the_runs_of_equal_neighbours(keys, runs):
    assert tie_runs(keys) == runs


def _calls(fn) -> set[str]:
    names: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            names.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


def test_a_descending_page_asked_again_reads_no_first_key_and_sorts_its_runs_in_place():
    # Kept beside the span: the second ask finds the tied runs by a probe (no
    # keys_descending) and sorts each by the one other key, no null in it (no ordered_ids).
    table, records = TABLES[0.0]
    sort = (("f", True), ("s", False))
    index = table.ordered["f"]
    page = page_in_order(index, True, sort, table, 0, 20)
    assert page == reference(records, lambda r: True, list(sort))[:20]
    assert tie_runs([records[i]["f"] for i in page])  # the page holds ties
    called = " ".join(_calls(lambda: page_in_order(index, True, sort, table, 0, 20)))
    # (names as parts: mutmut's trampolines call `x_<name>__mutmut_orig`)
    assert "runs_descending" in called
    assert not [name for name in ("keys_descending", "tie_runs", "ordered_ids") if name in called]


@pytest.mark.parametrize("sort", [[("f", False), ("s", False)], [("f", True), ("s", True)]])
def test_a_table_whose_ids_lie_far_apart_pages_as_the_reference(sort):
    # ids a million apart are held in the key columns' `far` dict, not their slots: the
    # ascending page reads its end runs' keys through `get`, and a tied run is ordered by
    # `ordered_ids` (the slots hold none of these ids)
    rng = random.Random(4)
    table, records = Table(ITEM), {}
    for i in range(1, 400):
        record = {"id": i * 1_000_003, "n": None, "f": rng.randint(0, 19) / 2, "s": rng.choice("pqr"), "k": "x"}
        record.update(g=1, w=None)
        table.insert(ITEM.row(record))
        records[record["id"]] = record
    assert table.ordered["f"].column.far and not table.ordered["f"].column.nulls
    expected = reference(records, lambda r: True, sort)
    for offset in (1, 5, 19, 20, 21, 100, 398):
        page = page_in_order(table.ordered["f"], sort[0][1], tuple(sort), table, offset, offset + 20)
        assert page == expected[offset : offset + 20], offset


def test_a_span_kept_by_id_and_its_tied_runs_are_kept_apart():
    # the same positions kept as ids by id (a window's first ids), descending and as tied
    # runs (a page on two keys): each asks for its own, whichever was kept first; the
    # second page's runs cross a sublist's end (1,500 entries in sublists of 763 and 737)
    for first, page in (("ties", (0, 30)), ("by id", (0, 30)), ("ties", (730, 745)), ("by id", (730, 745))):
        table, records = table_of(rows(9, 0.0))
        index = table.ordered["f"]
        if first == "by id":
            index.span_by_id(*index.runs_descending(*page)[2])
        ids, _before, span = index.runs_descending(*page)
        assert span[0][0] != span[1][0] or page == (0, 30)
        keys = [records[i]["f"] for i in ids]
        for ask in ([first, "ties", "by id"] if first == "ties" else [first, "by id", "ties"]) * 2:
            if ask == "ties":
                assert index.ties_descending(*span) == tie_runs(keys)
            else:
                assert index.span_by_id(*span) == sorted(ids)
