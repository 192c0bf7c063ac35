"""The 1M list plans' cheaper steps (bench/README.md, "Range, prefix and sort pages at
1,000,000 posts, session 9"), each against the order or count written out:

- `Fenwick.between`: the sum of counts between two ends, both walks at once;
- `OrderedIndex.count_span` to the end of the index from the length, none walked;
- `OrderedIndex.batches_descending` and `ids_descending` taking the runs of equal keys from
  the top as they are (a page inside one run is a slice of it) and sorting only the rest
  after RUNS_TAKEN runs: runs of every length, crossing sublists (LOAD 512), with removals;
- a `Window`'s span found once per index and list (conditions.py);
- the first and a deep page of a descending sort, alone and over a range, through the store,
  against the brute-force list (`support.storage.reference_list`).

Fixture-free but for the store at the end, so bench/mutation_inprocess.py can run them.
"""

from __future__ import annotations

import random
import sys
from itertools import chain, islice

import pytest

from dbsvc.runtime import Query
from dbsvc.storage.conditions import Window
from dbsvc.storage.fenwick import Fenwick
from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.keptparts import RUNS_TAKEN
from support.storage import BLOG, open_store, post, reference_list, run, user

# -- Fenwick.between ---------------------------------------------------------------------


def test_between_is_the_difference_of_two_prefixes_at_every_pair_of_ends():
    counts = [4, 0, 7, 1, 3, 0, 2, 9, 5, 1, 1, 6, 0, 8, 2, 3, 7]
    tree = Fenwick(counts)
    for i in range(len(counts) + 1):
        for j in range(i, len(counts) + 1):
            assert tree.between(i, j) == sum(counts[i:j]), (i, j)


def test_between_follows_each_change():
    rng = random.Random(9)
    counts = [rng.randint(0, 20) for _ in range(70)]
    tree = Fenwick(counts)
    for _ in range(200):
        k, delta = rng.randrange(70), rng.randint(-2, 5)
        counts[k] += delta
        tree.add(k, delta)
        i = rng.randint(0, 70)
        j = rng.randint(i, 70)
        assert tree.between(i, j) == sum(counts[i:j]), (i, j)


# -- the ordered index -------------------------------------------------------------------


def index_of(keys: dict[int, int | None], typecode: str = "q") -> OrderedIndex:
    index = OrderedIndex(typecode=typecode)
    for id_, key in keys.items():
        index.add(key, id_)
    return index


def keyed(seed: int, count: int, distinct: int) -> dict[int, int]:
    """`count` ids (not in order) with keys 0..distinct: runs of about count / distinct."""
    rng = random.Random(seed)
    return {id_: rng.randint(0, distinct) for id_ in rng.sample(range(1, 3 * count), count)}


def descending(keys: dict[int, int | None], low: int | None = None, high: int | None = None) -> list[int]:
    """The ids of non-null keys in [low, high], keys descending, ids ascending in a run."""
    return [
        i
        for k, i in sorted((-k, i) for i, k in keys.items() if k is not None)
        if (low is None or -k >= low) and (high is None or -k <= high)
    ]


# one key (a single run across every sublist), two, runs of ~750, ~100, ~RUN_SHORT (8), ~1, distinct keys
DISTINCT = [0, 1, RUNS_TAKEN, 30, 375, 2999, 100000]


@pytest.mark.parametrize("distinct", DISTINCT)
def test_batches_from_the_top_are_the_descending_order(distinct):
    keys = keyed(distinct, 3000, distinct)
    index = index_of(keys)
    assert list(chain.from_iterable(index.batches_descending((0, 0), index.end))) == descending(keys)


@pytest.mark.parametrize("distinct", DISTINCT)
def test_batches_of_a_window_are_its_descending_order(distinct):
    keys = keyed(distinct + 1, 3000, distinct)
    index = index_of(keys)
    rng = random.Random(distinct)
    for _ in range(25):
        low, high = sorted((rng.randint(0, distinct), rng.randint(0, distinct)))
        start, stop = index.lower(low, True), index.upper(high, True)
        got = list(chain.from_iterable(index.batches_descending(start, stop)))
        assert got == descending(keys, low, high), (low, high)


def test_a_window_starting_inside_a_run_keeps_that_runs_ids_ascending():
    # a start that is not where a key begins (a cursor's place): the run's part above it
    keys = {i: i // 100 for i in range(1, 1501)}  # runs of 100, three sublists
    index = index_of(keys)
    for start in [(0, 50), (0, 130), (1, 7), (2, 99)]:
        stop = index.end
        got = list(chain.from_iterable(index.batches_descending(start, stop)))
        ascending = list(chain.from_iterable(index.id_sublists))
        skip = sum(len(s) for s in index.id_sublists[: start[0]]) + start[1]
        want = sorted(ascending[skip:], key=lambda i: (-keys[i], i))
        assert got == want, start


@pytest.mark.parametrize("distinct", DISTINCT)
def test_a_page_by_position_is_the_descending_order_after_removals(distinct):
    keys = keyed(distinct + 2, 3000, distinct)
    index = index_of(keys)
    rng = random.Random(distinct + 3)
    for id_ in rng.sample(sorted(keys), 400):  # sublists shrink: positions move
        index.remove(keys.pop(id_), id_)
    order = descending(keys)
    n = len(order)
    pages = [(0, 1), (0, 20), (1, 21), (99, 120), (500, 520), (1000, 1200), (n - 20, n), (n - 1, n + 5), (n, n + 3)]
    for start, stop in pages:
        assert index.ids_descending(start, stop) == order[start:stop], (start, stop)


@pytest.mark.parametrize("typecode", ["", "q"])
def test_a_count_to_the_end_is_the_entries_from_the_start(typecode):
    keys = keyed(5, 2500, 60)
    index = index_of(keys, typecode)
    for low in [0, 1, 17, 30, 59, 60, 61]:
        assert index.count_span(index.lower(low, True), index.end) == sum(1 for k in keys.values() if k >= low), low
        keys[10_000 + low] = low  # a write between counts: the tree kept up to date or rebuilt
        index.add(low, 10_000 + low)
        assert index.count_span(index.lower(low, True), index.end) == sum(1 for k in keys.values() if k >= low), low
    assert index.count_span((0, 0), index.end) == len(keys)


def test_a_count_to_the_end_from_a_sublists_first_entry():
    # a span starting at (i, 0) with i > 0: the entries of sublists i and after, not all of them
    index = index_of(keyed(13, 2600, 300))
    sizes = [len(ids) for ids in index.id_sublists]
    for i in range(len(sizes)):
        assert index.count_span((i, 0), index.end) == sum(sizes[i:]), i
        assert index.count_span((i, 1), index.end) == sum(sizes[i:]) - 1, i


def test_a_page_by_position_of_no_values_is_empty():
    # an index whose every key is null (a bucket's order of null scores): no value to page
    nulls = OrderedIndex(typecode="q")
    for id_ in range(1, 40):
        nulls.add(None, id_)
    assert nulls.ids_descending(0, 20) == [] and nulls.ids_descending(5, 10) == []
    assert OrderedIndex().ids_descending(0, 20) == []


def test_a_count_between_two_sublists_is_the_entries_between():
    keys = keyed(6, 2500, 80)
    index = index_of(keys)
    for low, high in [(0, 80), (3, 9), (10, 70), (40, 40), (79, 80)]:
        span = index.lower(low, True), index.upper(high, True)
        assert index.count_span(*span) == sum(1 for k in keys.values() if low <= k <= high), (low, high)


def test_a_window_finds_its_span_once_per_index():
    keys = keyed(7, 1500, 50)
    index, other = index_of(keys), index_of(keyed(8, 1500, 50))
    window = Window("n")
    window.low, window.high = 10, 20
    span = window.span(index)
    assert window.span(index) is span  # kept: the same positions, no bisect
    assert window.span(other) == (other.lower(10, True), other.upper(20, True))  # another index: found there
    assert window.span(index) == span


# -- through the store -------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = open_store(str(tmp_path_factory.mktemp("runs")), sync="off")
    rng = random.Random(34)

    async def fill() -> None:
        await s.insert("User", user(1))
        for i in range(1, 1301):  # four scores: runs of ~325 crossing the score index's sublists
            await s.insert("BlogPost", post(i, score=float(rng.choice([1, 2, 3, 4]))))

    run(fill())
    yield s
    s.close()


@pytest.mark.parametrize(
    ("ranges", "offset", "limit"),
    [
        ((), 0, 20),
        ((), 0, 400),
        ((), 300, 20),
        ((), 640, 50),
        ((("score", 2.0, True, None, True),), 0, 20),
        ((("score", 2.0, True, None, True),), 310, 30),
        ((("score", None, True, 3.0, False),), 0, 20),
        ((("score", 1.0, False, 3.0, True),), 0, 700),
    ],
)
def test_a_descending_page_is_the_brute_force_page(store, ranges, offset, limit):
    query = Query(sort=(("score", True),), limit=limit, offset=offset, ranges=ranges)
    every = Query(sort=query.sort, limit=10_000)  # the brute-force order, the range applied here
    ordered, _total = reference_list(store.table("BlogPost").records, BLOG.BY_NAME["BlogPost"], every)
    want = [r["id"] for r in ordered if all(inside(r["score"], *bounds) for _field, *bounds in ranges)]
    got, total, _watermark, _more = store.list_page("BlogPost", query)
    assert [r["id"] for r in got] == want[offset : offset + limit] and total == len(want)


def inside(value: float, low, low_in: bool, high, high_in: bool) -> bool:
    if low is not None and (value < low or (value == low and not low_in)):
        return False
    return high is None or value < high or (value == high and high_in)


# -- a window's end sublists by id (seek.py `_first_ids`) -------------------------------


def test_a_sublists_part_by_id_is_kept_until_that_sublist_changes():
    keys = keyed(10, 2000, 400)
    index = index_of(keys)
    part = index.sorted_ids(1, 100, 300)
    assert part == sorted(index.id_sublists[1][100:300])
    assert index.sorted_ids(1, 100, 300) is part  # kept
    assert index.sorted_ids(1) == sorted(index.id_sublists[1])  # the whole sublist is another part
    assert index.sorted_ids(1, 0, 300) == sorted(index.id_sublists[1][:300])
    key = index.key_sublists[1][150]
    index.add(key, 50_000)  # into sublist 1: its parts are made again
    again = index.sorted_ids(1, 100, 300)
    assert again is not part and again == sorted(index.id_sublists[1][100:300])


def test_a_descending_batch_inside_a_sublist_is_kept_until_that_sublist_changes():
    keys = keyed(13, 2000, 900)  # runs of ~2: a batch is ordered by a sort, not taken as runs
    index = index_of(keys)

    def top_batch() -> list[int]:  # the first batch down from sublist 1's last entry
        return next(index.batches_descending((0, 0), (1, len(index.id_sublists[1]))))

    def below_top(count: int) -> list[int]:  # the `count` entries up to there, written out
        entries = list(index)[: len(index.id_sublists[0]) + len(index.id_sublists[1])]
        return [i for _k, i in sorted(entries[-count:], key=lambda e: (-e[0], e[1]))]

    batch = top_batch()
    assert top_batch() is batch and batch == below_top(len(batch))  # kept
    for id_ in batch[:3]:  # out of sublist 1, then one in: its kept batch is made again
        index.remove(keys.pop(id_), id_)
    index.add(index.key_sublists[1][-5], 50_000)
    again = top_batch()
    assert again is not batch and again == below_top(len(again)) and 50_000 in again


def test_a_descending_page_is_made_again_after_each_write_inside_its_batch():
    # the same page asked between writes that land in its batch (inserts at the top, like a
    # newest-first list, and removals there): every answer is the order written out
    keys = keyed(14, 3000, 2500)
    index = index_of(keys)
    rng = random.Random(14)
    top = max(keys.values())
    for step in range(60):
        if step % 3 == 2:
            gone = rng.choice(descending(keys)[:20])
            index.remove(keys.pop(gone), gone)
        else:
            top += rng.choice([0, 1])
            keys[10_000 + step] = top
            index.add(top, 10_000 + step)
        got = list(islice(chain.from_iterable(index.batches_descending((0, 0), index.end)), 21))
        assert got == descending(keys)[:21], step


@pytest.mark.parametrize("distinct", DISTINCT)
def test_a_cursors_run_is_its_lower_after_and_upper_positions(distinct):
    # runs inside a sublist, crossing sublists, and keys and ids absent from the index
    keys = keyed(distinct + 20, 2600, distinct)
    index = index_of(keys)
    rng = random.Random(distinct)
    cursors = [(k, i) for i, k in rng.sample(sorted(keys.items()), 40)]
    cursors += [(rng.randint(-2, distinct + 2), rng.randint(0, 9000)) for _ in range(40)]
    for key, id_ in cursors:
        want = (index.lower(key, True), index.after(key, id_), index.upper(key, True))
        assert index.cursor_run(key, id_) == want, (key, id_)


def test_a_first_batch_of_a_given_size_holds_that_many_whole_runs():
    keys = keyed(21, 3000, 1200)
    index = index_of(keys)
    for size in (1, 5, 21, 64):
        batch = next(index.batches_descending((0, 0), index.end, size))
        assert len(batch) >= size and batch == descending(keys)[: len(batch)]
        last = keys[batch[-1]]
        assert all(keys[i] != last for i in descending(keys)[len(batch) :]), size  # its last run whole


def test_batches_ending_at_a_sublists_first_entries_and_starting_inside_a_run():
    # a stop at (i, 0) is sublist i - 1's end, kept as that sublist's part; a stop at (i, 1)
    # holds sublist i's first entry; a batch's cut inside the start's run stops at the start
    keys = keyed(22, 3000, 2500)
    index = index_of(keys)
    entries = list(index)
    for i in range(1, len(index.id_sublists)):
        before = sum(map(len, index.id_sublists[:i]))
        for stop, count in (((i, 0), before), ((i, 1), before + 1)):
            start = (i - 1, 3)
            got = list(chain.from_iterable(index.batches_descending(start, stop, 8)))
            skip = before - len(index.id_sublists[i - 1]) + 3
            want = [e for _k, e in sorted(entries[skip:count], key=lambda e: (-e[0], e[1]))]
            assert got == want, (i, stop)
        end_of = next(index.batches_descending((i - 1, 0), (i, 0), 8))
        assert next(index.batches_descending((i - 1, 0), (i, 0), 8)) is end_of  # kept
    runs = index_of({id_: id_ // 100 for id_ in range(1, 301)})  # runs of 100, one sublist
    assert next(runs.batches_descending((0, 50), (0, 80), 10)) == runs.id_sublists[0][50:80]


def test_a_sublist_keeps_at_most_parts_kept_parts():
    from dbsvc.storage.keptparts import PARTS_KEPT

    index = index_of(keyed(11, 2000, 400))
    parts = [index.sorted_ids(0, lo, lo + 10) for lo in range(PARTS_KEPT)]
    assert all(index.sorted_ids(0, lo, lo + 10) is parts[lo] for lo in range(PARTS_KEPT))
    index.sorted_ids(0, 50, 60)  # one more: that sublist's kept parts dropped first
    assert index.sorted_ids(0, 0, 10) is not parts[0] and index.sorted_ids(0, 0, 10) == parts[0]


@pytest.mark.parametrize("typecode", ["", "q"])
def test_a_span_read_either_way_is_the_entries_between_its_ends(typecode):
    # ids_span and pairs_span_descending read the sublists lazily: every pair of positions
    # (in one sublist, across two, across all of them, to the end) against the entries
    keys = keyed(12, 2600, 300)
    index = index_of(keys, typecode)
    entries = list(index)
    positions = [(i, j) for i, ids in enumerate(index.id_sublists) for j in range(len(ids))] + [index.end]
    rng = random.Random(12)
    pairs = [(0, len(positions) - 1), (0, 0), (5, 5), (len(positions) - 2, len(positions) - 1)]
    pairs += [tuple(sorted(rng.sample(range(len(positions)), 2))) for _ in range(60)]
    for a, b in pairs:
        start, stop = positions[a], positions[b]
        assert list(index.ids_span(start, stop)) == [i for _k, i in entries[a:b]], (start, stop)
        assert list(index.pairs_span_descending(start, stop)) == entries[a:b][::-1], (start, stop)


# -- a gather in id order: sorted up to SORTED_AT matches, a heap past it (seek.py) ------


def test_a_gather_in_id_order_on_both_sides_of_sorted_at_agrees_with_sqlite():
    from dbsvc.cursors import encode_cursor
    from dbsvc.storage.seek import SORTED_AT
    from support.query_oracle import ITEM, filled_store

    rng = random.Random(36)
    empty = {"f": None, "s": None, "t": "t", "dt": None, "g": None, "w": None}
    rows = [{"n": rng.randint(0, 99), "b": rng.random() < 0.5, **empty} for _ in range(2600)]
    with filled_store(rows) as (store, _ids, twin):
        # a window and a filter: two sources, so their matches are gathered and cut in id order
        for low in (5, 60):
            want = twin.expected("n >= ? AND b = 1", [low], "id")
            assert (len(want) > SORTED_AT) == (low == 5), len(want)  # the heap's side, then the sort's
            for limit, offset in ((20, 0), (7, 300), (50, len(want) - 30), (20, len(want))):
                params = [("n__gte", str(low)), ("b", "true"), ("limit", str(limit)), ("offset", str(offset))]
                records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query(params))
                assert [r["id"] for r in records] == want[offset : offset + limit] and total == len(want), (low, offset)
                assert more == (offset + limit < len(want))
            cursor = encode_cursor("Item", (), [], want[99])
            params = [("n__gte", str(low)), ("b", "true"), ("limit", "20"), ("cursor", cursor)]
            records, total, _watermark, _more = store.list_page("Item", ITEM.parse_list_query(params))
            assert [r["id"] for r in records] == want[100:120] and total == len(want)


def test_the_first_ids_after_a_cursor_reach_the_very_last_id():
    # seek.py `_first_ids` guesses how far to look: 1,000 ids, a window of 200 (the last id
    # among them, none other past 749), the page after id 749: the first round's top is
    # 749 + 50 * 1,000 // 200 + 1 = 1,000, the last id, which it must reach (one short, it
    # stops at 999 without the match)
    from dbsvc.cursors import encode_cursor
    from support.query_oracle import ITEM, filled_store

    rng = random.Random(37)
    held = set(rng.sample(range(1, 750), 199)) | {1000}
    empty = {"f": None, "s": None, "t": "t", "b": False, "dt": None, "g": None, "w": None}
    rows = [{"n": 1 if i in held else 0, **empty} for i in range(1, 1001)]
    with filled_store(rows) as (store, ids, _twin):
        assert ids == list(range(1, 1001))
        params = [("n__gte", "1"), ("limit", "20"), ("cursor", encode_cursor("Item", (), [], 749))]
        records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query(params))
        assert [r["id"] for r in records] == [1000] and total == 200 and not more


# -- a cursor page over kept batches, after writes and after a compaction ---------------


def test_a_cursor_page_after_writes_and_after_a_compaction_is_the_brute_force_page(tmp_path, stores):
    # scores of one decimal over 0-30: runs of ~2, so each batch is ordered and kept
    # (indexes.py `_kept`); the same cursor asked again after writes in its page's
    # sublist and after an online compaction (indexes built afresh) continues the list
    store = stores(str(tmp_path), sync="off")
    rng = random.Random(36)
    sort = (("score", True),)
    model = BLOG.BY_NAME["BlogPost"]

    def after_cursor(cursor) -> list[int]:
        every = Query(sort=sort, limit=10_000)
        ordered, _total = reference_list(store.table("BlogPost").records, model, every)
        (ck,), cid = cursor
        return [r["id"] for r in ordered if r["score"] < ck or (r["score"] == ck and r["id"] > cid)]

    def page(cursor) -> list[int]:
        got, _total, _watermark, _more = store.list_page("BlogPost", Query(sort=sort, limit=20, cursor=cursor))
        return [r["id"] for r in got]

    async def go() -> None:
        await store.insert("User", user(1))
        for i in range(1, 1501):
            await store.insert("BlogPost", post(i, score=rng.randint(0, 300) / 10))
        first, _total, _wm, _more = store.list_page("BlogPost", Query(sort=sort, limit=700))
        last = first[-1]
        cursor = ((last["score"],), last["id"])
        assert page(cursor) == page(cursor) == after_cursor(cursor)[:20]
        gone = page(cursor)[5]
        await store.delete("BlogPost", gone)  # on the page
        for i in range(2001, 2011):  # inside the page's scores, and one at the cursor's own
            await store.insert("BlogPost", post(i, score=last["score"] - (i % 3) / 10))
        assert page(cursor) == after_cursor(cursor)[:20] and gone not in page(cursor)
        await store.compactor.compact_now()
        assert store.stats()["compactions"] == 1
        assert page(cursor) == page(cursor) == after_cursor(cursor)[:20]

    run(go())


def orderings(fn) -> int:
    """How many times `fn()` put entries in descending order (keptparts.py `descending_ids`)."""
    seen = [0]

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "descending_ids":
            seen[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen[0]


def test_a_deep_page_across_a_sublists_end_is_kept_until_a_sublist_it_reaches_changes():
    # runs of ~100 in sublists of 512-1024: a deep page widened to whole runs crosses
    # sublist 0's end. Kept: the same page asked again orders nothing (it was ordered at
    # every list); made again after a write in a sublist it covers; right after a write
    # in a sublist it does not reach.
    keys = keyed(15, 3000, 30)
    index = index_of(keys)
    cut = sum(map(len, index.id_sublists[1:]))  # descending position of sublist 0's last entry
    page = (cut - 5, cut + 5)
    assert orderings(lambda: index.ids_descending(*page)) == 1
    assert orderings(lambda: index.ids_descending(*page)) == 0
    assert index.ids_descending(*page) == descending(keys)[slice(*page)]
    low = index.key_sublists[0][0]
    index.add(low, 90_001)  # into sublist 0: the span reaches it
    keys[90_001] = low
    assert index.ids_descending(*page) == descending(keys)[slice(*page)]
    top = max(keys.values()) + 1
    index.add(top, 90_002)  # at the top, the last sublist: the page's positions move by one
    keys[90_002] = top
    assert index.ids_descending(*page) == descending(keys)[slice(*page)]


def test_a_span_kept_by_id_and_the_same_span_kept_descending_stay_apart():
    # a range's ids by id and a deep page's widened runs over the very same two positions:
    # each kept under its own order, neither answered for the other
    keys = keyed(15, 3000, 30)
    index = index_of(keys)
    cut = sum(map(len, index.id_sublists[1:]))
    page = (cut - 5, cut + 5)
    want = descending(keys)[slice(*page)]
    begin, end = index.lower(keys[want[-1]], True), index.upper(keys[want[0]], True)
    assert begin[0] < end[0]  # across sublists: kept as a span
    by_id = sorted(i for i in keys if keys[want[-1]] <= keys[i] <= keys[want[0]])
    for _ in range(2):
        assert index.span_by_id(begin, end) == by_id
        assert index.ids_descending(*page) == want
    assert index.span_by_id(begin, end) == by_id
