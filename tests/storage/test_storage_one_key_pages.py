"""A page of one sort key taken by position: ascending (seek.py `_ascending_page` over
`OrderedIndex.ids_head`), a range or prefix sorted by its own field and a cursor page are
slices of the index's sublists from the window's (or the cursor's) place, nothing before
the page walked, then the nulls (last ascending) when the window holds them; descending
(`_descending_page` over `head_descending`), the runs below the cursor's taken from the top
and cut to the page.

Over 3,000 records (several sublists at LOAD 512), every page at offsets that cross sublist
ends and reach into the nulls, and every cursor walk, is held to the brute-force order of
test_storage_plan_units.py; `ids_head` to the walk it replaces (`ids_span` through an
islice) at every start, stop, skip and count. Fixture-free, for bench/mutation_inprocess.py.
"""

from __future__ import annotations

import random
from dataclasses import replace
from itertools import islice

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.indexes import OrderedIndex
from tests.storage.test_storage_descending_runs import DISTINCT, descending, index_of, keyed
from tests.storage.test_storage_plan_units import ITEM, cursor_of, reference, sort_param, table_of

COUNT = 3000


def rows(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [
        (
            rng.choice([None, *range(40)]),
            round(rng.uniform(0, 10), 1),
            rng.choice([None, "", "a", "ab", "abc", "abd", "b", "ba", "é", *(f"a{c}" for c in "bcdefg")]),
            "x",
            None,
            None,
        )
        for _ in range(COUNT)
    ]


TABLE, RECORDS = table_of(rows(15))

# (parameters, the same test written out, the one ascending sort key)
SHAPES = [
    ([("s__prefix", "ab")], lambda r: r["s"] is not None and r["s"].startswith("ab"), "s"),
    ([("s__prefix", "a")], lambda r: r["s"] is not None and r["s"].startswith("a"), "s"),
    ([("n__gte", "10"), ("n__lt", "31")], lambda r: r["n"] is not None and 10 <= r["n"] < 31, "n"),
    ([("n__gt", "35")], lambda r: r["n"] is not None and r["n"] > 35, "n"),
    ([("f__lte", "2.5")], lambda r: r["f"] <= 2.5, "f"),
    ([("n__null", "true")], lambda r: r["n"] is None, "n"),
    ([("s__null", "true")], lambda r: r["s"] is None, "s"),
    ([("s__prefix", "zz")], lambda r: False, "s"),
]
PAGES = [(20, 0), (1, 0), (20, 500), (37, 1013), (100, 2400), (50, 2700), (5, 2990), (10, 4000)]


def page(params, sort, limit, offset, cursor=None):
    query = ITEM.parse_list_query(params + sort_param(sort) + [("limit", str(limit)), ("offset", str(offset))])
    if cursor is not None:
        query = replace(query, cursor=cursor, offset=0)
    got, total, more = plans.list_page(TABLE, query)
    return [r["id"] for r in got], total, more


@pytest.mark.parametrize(("params", "test", "field"), SHAPES)
def test_a_window_sorted_by_its_field_pages_as_the_reference(params, test, field):
    sort = [(field, False)]
    want = reference(RECORDS, test, sort)
    for limit, offset in PAGES:
        got, total, more = page(params, sort, limit, offset)
        where = (params, limit, offset)
        assert (got, total) == (want[offset : offset + limit], len(want)), where
        assert more == (offset + len(got) < len(want) and bool(got)), where


@pytest.mark.parametrize("field", ["n", "f", "s"])
def test_a_sort_alone_pages_at_every_offset_into_the_nulls(field):
    # `sort=n&n__null=false` has no window of its own: a cursor makes it a seek
    sort = [(field, False)]
    want = reference(RECORDS, lambda r: True, sort)
    nulls = sum(1 for r in RECORDS.values() if r[field] is None)
    # COUNT - nulls - 13: the page's 12 are the last non-null ones, and the nulls say more follow
    for offset in sorted(
        {0, 511, 1024, COUNT - nulls - 13, COUNT - nulls - 3, min(COUNT - nulls, COUNT - 5), COUNT - 4}
    ):
        first = RECORDS[want[offset]]
        got, total, more = page([], sort, 12, 0, cursor_of(first, sort))
        assert (got, total) == (want[offset + 1 : offset + 13], COUNT), (field, offset)
        assert more == (offset + 13 < COUNT), (field, offset)


@pytest.mark.parametrize("desc", [False, True])
@pytest.mark.parametrize(("params", "test", "field"), SHAPES[:5] + [([], lambda r: True, "n")])
def test_cursors_at_random_records_and_keys_page_as_the_reference(params, test, field, desc):
    sort = [(field, desc)]
    want = reference(RECORDS, test, sort)
    everything = reference(RECORDS, lambda r: True, sort)
    rng = random.Random(len(want))
    for _ in range(40):
        # any record's place (inside the window or not, a null or not) seeks into the list
        before = RECORDS[rng.choice(everything)]
        cursor = cursor_of(before, sort)
        got, total, more = page(params, sort, 20, 0, cursor)
        position = everything.index(before["id"])
        after = [i for i in everything[position + 1 :] if test(RECORDS[i])]
        assert (got, total) == (after[:20], len(want)), cursor
        assert more == (len(after) > 20)


def test_a_cursor_walk_sorted_by_its_field_reaches_the_end_in_order():
    params, test, field = SHAPES[1]
    sort = [(field, False)]
    want = reference(RECORDS, test, sort)
    seen: list[int] = []
    cursor = None
    for _ in range(200):
        got, _total, more = page(params, sort, 97, 0, cursor)
        seen += got
        if not more:
            break
        cursor = cursor_of(RECORDS[got[-1]], sort)
    assert seen == want


def test_ids_head_is_the_walk_of_the_span_at_every_place():
    rng = random.Random(3)
    index = OrderedIndex(typecode="q")
    for id_ in rng.sample(range(1, 9000), 2500):
        index.add(rng.randint(0, 60), id_)
    sublists = index.id_sublists
    places = [(i, j) for i in range(len(sublists)) for j in (0, 1, len(sublists[i]) - 1)] + [index.end]
    for _ in range(400):
        start, stop = sorted(rng.sample(places, 2))
        skip, count = rng.choice([0, 0, 1, 5, 600, 3000]), rng.choice([1, 2, 21, 700, 5000])
        want = list(islice(index.ids_span(start, stop), skip, skip + count))
        assert index.ids_head(start, stop, count, skip) == want, (start, stop, skip, count)
    assert index.ids_head((1, 0), (0, 5), 10) == [] and index.ids_head((0, 0), index.end, 0) == []


@pytest.mark.parametrize("distinct", DISTINCT)
def test_head_descending_is_the_descending_order_from_every_place(distinct):
    keys = keyed(distinct + 5, 3000, distinct)
    index = index_of(keys)
    order = descending(keys)
    ascending = [i for i in sorted(keys, key=lambda i: (keys[i], i))]
    sublists = index.id_sublists
    places = [(i, j) for i in range(len(sublists)) for j in (0, 1, 255, len(sublists[i]) - 1)] + [index.end]
    rng = random.Random(distinct)
    for _ in range(150):
        start, stop = sorted(rng.sample(places, 2))
        count = rng.choice([1, 21, 200, 4000])
        at = lambda p: sum(map(len, sublists[: p[0]])) + p[1]  # noqa: E731
        inside = set(ascending[at(start) : at(stop)])
        # keys descending, ids ascending in a run: the order's entries inside the span
        want = [i for i in order if i in inside][:count]
        assert index.head_descending(start, stop, count) == want, (start, stop, count)


def test_head_descending_takes_a_top_run_of_one_before_the_long_run_below_it():
    # the top entry's own key, not its neighbour's: 21 (key 9) comes first, then 1.. (key 5)
    index = index_of({**{i: 5 for i in range(1, 21)}, 21: 9})
    assert index.head_descending((0, 0), index.end, 10) == [21, *range(1, 10)]


def test_head_descending_at_short_runs_is_the_order_asked_once_twice_and_after_writes():
    # ~2 ids a key (the blog seed's scores at 20,000 posts): `_short_runs_head`'s sorted
    # batch inside stop's sublist, clamped to a start inside it, or the batch when its
    # lowest run may begin in an earlier sublist; each place asked three times (made, then
    # kept from its second ask, then found kept) and again after writes into its sublist
    rng = random.Random(36)
    keys = {id_: rng.randint(0, 1300) for id_ in rng.sample(range(1, 9000), 3000)}
    index = index_of(keys)

    def check(start: tuple[int, int], stop: tuple[int, int], count: int) -> None:
        at = lambda p: begins[p[0]] + p[1]  # noqa: E731
        want = [i for _k, i in sorted(ascending[at(start) : at(stop)], key=lambda p: -p[0])][:count]
        for ask in range(3):
            assert index.head_descending(start, stop, count) == want, (start, stop, count, ask)

    for _round in range(3):
        sublists = index.id_sublists
        ascending = sorted((k, i) for i, k in keys.items())  # (key, id): the index's order
        begins = [sum(map(len, sublists[:i])) for i in range(len(sublists) + 1)]
        for i, sub in enumerate(sublists):
            n = len(sub)
            for j in sorted({1, 21, 22, n // 2, n - 1, n}):
                for count in (1, 21, j - 3, j - 2, j - 1, j, j + 1):  # j - 3..: a run at sublist i's start
                    if count > 0:
                        check((0, 0), (i, j), count)
                        check((i, rng.randrange(j)), (i, j), count)  # a start inside the batch's sublist
            if i:
                check((i - 1, len(sublists[i - 1]) - 3), (i, 0), 21)  # a stop at a sublist's start
        for id_ in rng.sample(sorted(keys), 60):  # writes inside sublists: kept batches dropped
            index.remove(keys.pop(id_), id_)
        for id_ in rng.sample(sorted(set(range(9000, 12000)) - set(keys)), 60):
            keys[id_] = rng.randint(0, 1300)
            index.add(keys[id_], id_)


def test_head_descending_at_short_runs_takes_a_run_begun_in_the_sublist_before():
    # runs of 5 ids (key id // 5) appended in order: sublists of 512, so the run of key 102
    # (ids 510-514) holds 510-512 at sublist 0's end and 513-514 at sublist 1's start; a
    # page whose batch reaches down into that run takes 510, its smallest id, first
    keys = {id_: id_ // 5 for id_ in range(1, 3001)}
    index = index_of(keys)
    assert index.id_sublists[0][-1] == 512 and index.id_sublists[1][:2] == [513, 514]
    for j in range(1, 40):
        inside = range(1, 513 + j)  # the ids of [(0, 0), (1, j)): appended in id order
        want = sorted(inside, key=lambda i: (-keys[i], i))
        for count in range(1, j + 4):
            assert index.head_descending((0, 0), (1, j), count) == want[:count], (j, count)
