"""OrderedIndex (storage/indexes.py) against a plain sorted list of (key, id) pairs, in
process, no fixture.

Each case builds an index of several sublists (LOAD is 512: a sublist holds at most 1,024
entries and splits in halves of 512 past that), changes it through its public methods and
compares everything a reader can ask with the same changes made to the model: iteration,
the sublists and their last keys and ids, `runs`, the ascending and descending walks with
and without a `keep`, `run_ids` / `run_count` / `holds` per key, `ids_slice` into the nulls,
`lower` / `upper` / `after` as flat offsets, `count_span`, `ids_span`,
`pairs_span_descending`, `ids_descending` and `batches_descending` between positions.
These are the decisions the session-8 mutation passes left unread or unreached
(docs/mutation.md, "storage/query.py, seek.py, indexes.py", session 9).
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_left, bisect_right, insort
from itertools import groupby

import pytest

from dbsvc.storage.indexes import OrderedIndex


class Model:
    """The index's entries as plain sorted lists: (key, id) pairs of values, and null ids."""

    def __init__(self, pairs=()):
        pairs = list(pairs)
        self.pairs = sorted(p for p in pairs if p[0] is not None)
        self.nulls = sorted(i for k, i in pairs if k is None)

    def add(self, key, id_):
        if key is None:
            insort(self.nulls, id_)
        else:
            insort(self.pairs, (key, id_))

    def remove(self, key, id_):
        if key is None:
            self.nulls.remove(id_)
        else:
            self.pairs.remove((key, id_))

    @property
    def descending(self):
        """Keys descending, ids ascending inside a run (what `ids_descending` orders)."""
        return sorted(self.pairs, key=lambda p: p[0], reverse=True)


def _position(index: OrderedIndex, offset: int) -> tuple[int, int]:
    """The normalised (sublist, entry) position of a flat offset among the non-null entries."""
    for i, ids in enumerate(index.id_sublists):
        if offset < len(ids):
            return i, offset
        offset -= len(ids)
    assert offset == 0
    return index.end


def _offset(index: OrderedIndex, position: tuple[int, int]) -> int:
    i, j = position
    assert j < len(index.id_sublists[i]) if i < len(index.id_sublists) else j == 0, position
    return sum(map(len, index.id_sublists[:i])) + j


def _check_layout(index: OrderedIndex, model: Model) -> None:
    keys = [k for k, _ in model.pairs]
    ids = [i for _, i in model.pairs]
    assert len(index) == len(model.pairs) + len(model.nulls)
    assert list(index) == model.pairs + [(None, i) for i in model.nulls]
    assert [k for sub in index.key_sublists for k in sub] == keys
    assert [i for sub in index.id_sublists for i in sub] == ids
    assert [len(s) for s in index.key_sublists] == [len(s) for s in index.id_sublists]
    assert all(0 < len(s) <= 1024 for s in index.id_sublists)
    assert index.last_keys == [s[-1] for s in index.key_sublists]
    assert index.last_ids == [s[-1] for s in index.id_sublists]
    assert index.end == (len(index.id_sublists), 0)


def _check(index: OrderedIndex, model: Model, rnd: random.Random) -> None:
    """Everything a reader sees of `index` is what `model` holds."""
    _check_layout(index, model)
    pairs, nulls = model.pairs, model.nulls
    keys = [k for k, _ in pairs]
    ids = [i for _, i in pairs]
    every = ids + nulls
    n, total = len(pairs), len(every)
    runs = [(k, [i for _, i in g]) for k, g in groupby(pairs, key=lambda p: p[0])]
    assert list(index.runs()) == runs + ([(None, nulls)] if nulls else [])
    assert list(index.ids_ascending()) == every
    assert list(index.nulls_ascending()) == nulls
    assert list(index.pairs_descending()) == pairs[::-1]
    odd = lambda i: i % 2  # noqa: E731
    assert list(index.ids_ascending(odd)) == [i for i in every if i % 2]
    assert list(index.nulls_ascending(odd)) == [i for i in nulls if i % 2]
    assert list(index.pairs_descending(odd)) == [p for p in pairs[::-1] if p[1] % 2]
    distinct = sorted(set(keys))
    probes = rnd.sample(distinct, min(40, len(distinct)))
    if distinct:
        probes += [distinct[0], distinct[-1], distinct[0] - 1, distinct[-1] + 1]
        probes += [k + 0.5 for k in rnd.sample(distinct, min(10, len(distinct)))]
        probes += index.last_keys + [s[0] for s in index.key_sublists]
    for key in probes:
        run = [i for k, i in pairs if k == key]
        assert index.run_ids(key) == run, key
        assert index.run_count(key) == len(run), key
        for inclusive in (True, False):
            first = bisect_left(keys, key) if inclusive else bisect_right(keys, key)
            assert _offset(index, index.lower(key, inclusive)) == first, (key, inclusive)
            past = bisect_right(keys, key) if inclusive else bisect_left(keys, key)
            assert _offset(index, index.upper(key, inclusive)) == past, (key, inclusive)
        for id_ in (run[:1] + run[-1:] + [-5, 10**9]) if run else [0]:
            assert _offset(index, index.after(key, id_)) == bisect_right(pairs, (key, id_)), (key, id_)
    assert index.run_ids(None) == nulls and index.run_count(None) == len(nulls)
    for key, id_ in rnd.sample(pairs, min(40, n)) + pairs[:1] + pairs[-1:]:
        assert index.holds(key, id_)
        assert not index.holds(key, id_ + 10**6)
        assert not index.holds(key + 0.5, id_)
        assert not index.holds(None, id_)
    for id_ in nulls[:3]:
        assert index.holds(None, id_) and not index.holds(0, id_)
    assert not index.holds(None, 10**9)
    if distinct:
        assert not index.holds(distinct[-1] + 1, 1) and not index.holds(distinct[0] - 1, 1)
    cuts = sorted(
        {0, 1, n - 1, n, n + 1, total, total + 3, 511, 512, 513, 1023, 1024, 1025}
        | set(rnd.sample(range(total + 1), min(8, total + 1)))
    )
    cuts = [c for c in cuts if c >= 0]
    for a in cuts:
        for b in cuts:
            assert index.ids_slice(a, b) == every[a:b], (a, b)
    spots = sorted({0, n} | set(rnd.sample(range(n + 1), min(6, n + 1))))
    spots += [sum(map(len, index.id_sublists[:i])) for i in range(len(index.id_sublists) + 1)]
    spots = sorted(set(spots))
    descending = model.descending
    for a in spots:
        for b in spots:
            start, stop = _position(index, a), _position(index, b)
            assert index.count_span(start, stop) == max(b - a, 0), (a, b)
            assert list(index.ids_span(start, stop)) == ids[a:b], (a, b)
            assert list(index.pairs_span_descending(start, stop)) == pairs[a:b][::-1], (a, b)
            assert index.ids_descending(a, b) == [i for _, i in descending[a:b]], (a, b)
            # [start, stop) of the ascending order, keys descending, ids ascending in a run
            batches = list(index.batches_descending(start, stop))
            expected = sorted(pairs[a:b], key=lambda p: p[0], reverse=True)
            assert [i for batch in batches for i in batch] == [i for _, i in expected], (a, b)
    assert index.ids_descending(0, n + 10) == [i for _, i in descending]
    assert index.ids_descending(n, n + 5) == [] and index.ids_descending(3, 3) == []


def _entries(rnd: random.Random, count: int, spread: int, null_share: float = 0.1) -> list[tuple]:
    ids = rnd.sample(range(1, count * 4), count)
    return [(None if rnd.random() < null_share else rnd.randrange(spread), i) for i in ids]


def test_an_ascending_add_splits_a_sublist_only_past_1024_entries_in_halves_of_512() -> None:
    index, model = OrderedIndex(), Model()
    for i in range(1024):
        index.add(i * 2, i)
        model.add(i * 2, i)
    assert [len(s) for s in index.id_sublists] == [1024]
    _check_layout(index, model)
    index.add(2048, 1024)
    model.add(2048, 1024)
    assert [len(s) for s in index.id_sublists] == [512, 513]
    assert index.last_keys == [1022, 2048] and index.last_ids == [511, 1024]
    _check(index, model, random.Random(1))


def test_adds_inside_a_sublist_split_it_at_its_own_place_and_keep_the_last_entries() -> None:
    pairs = [(k, k) for k in range(0, 3072, 2)]  # 1,536 even keys: three sublists of 512
    index, model = OrderedIndex(pairs), Model(pairs)
    assert [len(s) for s in index.id_sublists] == [512, 512, 512]
    for odd in range(1, 1026, 2):  # the first sublist's last key is 1,022: 511 go into it
        index.add(odd, odd)
        model.add(odd, odd)
    assert [len(s) for s in index.id_sublists] == [1023, 514, 512]
    index.add(3, 10**6)  # a run of key 3: its ids ascend, 1,024 entries, no split yet
    model.add(3, 10**6)
    assert [len(s) for s in index.id_sublists] == [1024, 514, 512]
    index.add(3, 2)
    model.add(3, 2)
    assert [len(s) for s in index.id_sublists] == [512, 513, 514, 512]
    assert index.last_keys == [509, 1022, 2046, 3070]
    assert index.last_ids == [509, 1022, 2046, 3070]
    assert index.run_ids(3) == [2, 3, 10**6]
    _check(index, model, random.Random(2))


@pytest.mark.parametrize("seed", range(3))
def test_random_adds_and_removes_with_runs_across_sublists_agree_with_the_model(seed: int) -> None:
    rnd = random.Random(seed)
    pairs = _entries(rnd, 2600, rnd.choice([5, 40, 3000]))
    index, model = OrderedIndex(pairs[:1500]), Model(pairs[:1500])
    for key, id_ in pairs[1500:]:
        index.add(key, id_)
        model.add(key, id_)
    _check(index, model, rnd)
    present = list(pairs)
    rnd.shuffle(present)
    for key, id_ in present[:1800]:
        index.remove(key, id_)
        model.remove(key, id_)
    _check(index, model, rnd)
    for key, id_ in present[:300]:
        index.add(key, id_)
        model.add(key, id_)
    _check(index, model, rnd)


def test_removing_a_middle_sublists_every_entry_drops_it_and_its_last_entry() -> None:
    pairs = [(k // 3, k) for k in range(1536)]  # runs of three, three sublists of 512
    index, model = OrderedIndex(pairs), Model(pairs)
    index.count_span((0, 0), index.end)  # the sublists' counts built, then kept by removes
    middle = list(zip(index.key_sublists[1], index.id_sublists[1]))
    for key, id_ in middle[:-1]:
        index.remove(key, id_)
        model.remove(key, id_)
        assert index.count_span((0, 0), index.end) == len(model.pairs)
    assert [len(s) for s in index.id_sublists] == [512, 1, 512]
    assert index.last_keys[1] == middle[-1][0] and index.last_ids[1] == middle[-1][1]
    index.remove(*middle[-1])
    model.remove(*middle[-1])
    assert [len(s) for s in index.id_sublists] == [512, 512]
    assert index.count_span((0, 0), index.end) == 1024
    _check(index, model, random.Random(3))
    for key, id_ in list(model.pairs):
        index.remove(key, id_)
    assert len(index) == 0 and index.id_sublists == [] and index.last_keys == [] and index.last_ids == []
    assert list(index.runs()) == [] and index.end == (0, 0)
    index.add(5, 9)
    assert list(index) == [(5, 9)] and index.last_keys == [5] and index.last_ids == [9]


def test_a_remove_of_an_absent_entry_is_a_key_error_and_changes_nothing() -> None:
    pairs = [(k // 4, k) for k in range(1, 1200)] + [(None, 5000), (None, 5001)]
    index, model = OrderedIndex(pairs), Model(pairs)
    first_run = index.run_ids(1)  # ids 4..7: a run in the middle of the first sublist
    for key, id_ in [(1, 3), (1, 8), (1, 6.5), (0.5, 2), (10**6, 1), (-1, 1), (1, 10**6), (299, 1199.5)]:
        with pytest.raises(KeyError) as caught:
            index.remove(key, id_)
        assert caught.value.args == ((key, id_),)
    with pytest.raises(KeyError):
        index.remove(None, 4)
    assert index.run_ids(1) == first_run == [4, 5, 6, 7]
    _check(index, model, random.Random(4))
    index.remove(1, 6)  # inside its run, not the first of it
    model.remove(1, 6)
    index.remove(None, 5000)
    model.remove(None, 5000)
    _check(index, model, random.Random(5))
    assert len(index.column) == len(index) and index.column.get(7) == 1 and index.column.get(5001) is None


@pytest.mark.parametrize("typecode", ["", "q", "d"])
def test_every_reader_agrees_with_the_model_for_each_key_form(typecode: str) -> None:
    rnd = random.Random(7)
    pairs = _entries(rnd, 2200, 60, 0.05)
    if typecode == "d":
        pairs = [(None if k is None else k / 4, i) for k, i in pairs]
    index, model = OrderedIndex(pairs, typecode), Model(pairs)
    assert all(type(s) is (array if typecode else list) for s in index.key_sublists)
    _check(index, model, rnd)


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(list(range(0, 1300)), id="a-run-from-0"),
        pytest.param(list(range(65536, 65536 + 1300)), id="a-run-from-the-shift-limit"),
        pytest.param(list(range(65537, 65537 + 1300)), id="a-run-past-the-shift-limit"),
        pytest.param(list(range(-3, 1297)), id="a-run-from-below-0"),
        pytest.param(list(range(1, 2600, 2)), id="ids-with-gaps"),
        pytest.param([f"k{i:05}" for i in range(1300)], id="str-ids"),
    ],
)
@pytest.mark.parametrize("with_nulls", [False, True])
def test_from_columns_builds_what_the_pairs_build(ids: list, with_nulls: bool) -> None:
    rnd = random.Random(len(ids))
    keys = [rnd.randrange(50) for _ in ids]
    if with_nulls:
        keys = [None if rnd.random() < 0.1 else k for k in keys]
    built = OrderedIndex.from_columns(keys, ids)
    model = Model(zip(keys, ids))
    _check_layout(built, model)
    assert [len(s) for s in built.id_sublists] == [512, 512, len(model.pairs) - 1024]
    assert list(built.nulls_ascending()) == model.nulls
    assert [built.column.get(i) for i in ids] == keys
    assert list(built.runs()) == list(OrderedIndex(zip(keys, ids)).runs())


@pytest.mark.parametrize("typecode", ["q", "d"])
def test_from_columns_of_array_keys_builds_arrays_and_the_same_order(typecode: str) -> None:
    rnd = random.Random(11)
    ids = list(range(1, 1100))
    plain = [rnd.randrange(30) for _ in ids]
    values = [float(k) / 2 for k in plain] if typecode == "d" else plain
    built = OrderedIndex.from_columns(array(typecode, values), ids, typecode)
    assert built.typecode == typecode
    assert all(type(s) is array and s.typecode == typecode for s in built.key_sublists)
    _check(built, Model(zip(values, ids)), rnd)
    assert list(built.nulls_ascending()) == []


def test_from_columns_of_nothing_is_an_empty_index() -> None:
    built = OrderedIndex.from_columns([], [])
    assert len(built) == 0 and list(built) == [] and built.id_sublists == [] and built.end == (0, 0)
    assert built.ids_slice(0, 5) == [] and built.ids_descending(0, 5) == [] and list(built.runs()) == []
    built.add(3, 1)
    built.add(None, 2)
    assert list(built) == [(3, 1), (None, 2)] and len(built) == 2


def test_an_index_of_nulls_only_answers_every_reader_from_the_nulls() -> None:
    index = OrderedIndex([(None, 3), (None, 1), (None, 2)])
    assert len(index) == 3 and index.id_sublists == [] and index.end == (0, 0)
    assert list(index) == [(None, 1), (None, 2), (None, 3)]
    assert list(index.runs()) == [(None, [1, 2, 3])]
    assert index.ids_slice(0, 2) == [1, 2] and index.ids_slice(1, 9) == [2, 3]
    assert list(index.pairs_descending()) == []
    assert index.lower(5, True) == (0, 0) and index.upper(5, False) == (0, 0) and index.after(5, 1) == (0, 0)
    assert index.run_ids(5) == [] and index.run_count(5) == 0 and not index.holds(5, 1)


def test_entries_put_in_place_count_once_grown_is_told() -> None:
    """storage/runs.py appends a run to the last sublists in place, then calls `grown`: the
    length, the kept counts and the kept id-sorted copies all follow."""
    pairs = [(k, k) for k in range(1, 601)]
    index = OrderedIndex(pairs)
    assert index.count_span((0, 0), index.end) == 600
    assert index.sorted_ids(1) == list(range(513, 601))
    index.key_sublists[1].extend([700, 701])
    index.id_sublists[1].extend([5, 4])
    index.last_keys[1] = 701
    index.last_ids[1] = 4
    index.grown(2)
    assert len(index) == 602
    assert index.count_span((0, 0), index.end) == 602
    assert index.sorted_ids(1) == [4, 5, *range(513, 601)]
    assert index.ids_slice(599, 605) == [600, 5, 4]


@pytest.mark.parametrize("typecode", ["q", "d"])
@pytest.mark.parametrize("as_array", [False, True])
def test_an_index_made_from_columns_keeps_its_key_column_as_an_array_of_its_typecode(
    typecode: str, as_array: bool
) -> None:
    values = [3, 1, 2] if typecode == "q" else [3.5, 1.5, 2.5]
    keys = array(typecode, values) if as_array else values
    built = OrderedIndex.from_columns(keys, [1, 2, 3], typecode)
    assert built.column.typecode == typecode
    assert type(built.column.slots) is array and built.column.slots.typecode == typecode
    assert list(built) == [(values[1], 2), (values[2], 3), (values[0], 1)]


def test_id_0_is_walked_like_any_other_id() -> None:
    """An id of 0 is falsy: a walk with no `keep` yields it, valued or null."""
    index = OrderedIndex([(None, 0), (5, 1), (None, 2)])
    assert list(index.nulls_ascending()) == [0, 2]
    assert list(index.ids_ascending()) == [1, 0, 2]
    index = OrderedIndex([(5, 0), (4, 1)])
    assert list(index.ids_ascending()) == [1, 0]
    assert list(index.pairs_descending()) == [(5, 0), (4, 1)]
    assert list(index.runs()) == [(4, [1]), (5, [0])]


@pytest.mark.parametrize("ids", [[1, 2, 5], [10, 11, 12, 14, 16], [0, 3, 4]])
def test_from_columns_of_ids_with_gaps_orders_by_each_ids_own_key(ids: list) -> None:
    keys = [30 - i for i in ids]  # descending with the id: the index is the ids reversed
    built = OrderedIndex.from_columns(keys, ids)
    assert list(built) == [(30 - i, i) for i in reversed(ids)]


def test_a_remove_drops_its_sublists_kept_id_sorted_copy() -> None:
    index = OrderedIndex([(k % 7, k) for k in range(1, 1500)])  # three sublists
    before = index.sorted_ids(1)
    assert before == sorted(index.id_sublists[1])
    key, id_ = index.key_sublists[1][3], index.id_sublists[1][3]
    index.remove(key, id_)
    assert index.sorted_ids(1) == sorted(index.id_sublists[1]) == [i for i in before if i != id_]
    index.add(key, id_)
    assert index.sorted_ids(1) == sorted(index.id_sublists[1]) == before


@pytest.mark.parametrize("typecode", ["", "q", "d"])
def test_moves_of_keys_agree_with_the_model_and_keep_the_key_column(typecode: str) -> None:
    """`move(was, now, id_)` (a replace that changed the key) leaves what `remove` then
    `add` leave, its key column included: ids kept in the column's slots and far past its
    end (its dict), moves to and from null, inside a run and across sublists, with the
    sublists' counts and kept copies in use."""
    rnd = random.Random(23)
    pairs = _entries(rnd, 2400, 80, 0.05) + [(rnd.randrange(80), 10**7 + i) for i in range(20)]
    if typecode == "d":
        pairs = [(None if k is None else k / 4, i) for k, i in pairs]
    index, model = OrderedIndex(pairs, typecode), Model(pairs)
    keys = dict((i, k) for k, i in pairs)
    index.count_span((0, 0), index.end)  # the sublists' counts built, then kept by moves
    index.sorted_ids(1)
    far = set(index.column.far)  # ids the column holds in its dict: they stay there
    assert {10**7 + i for i in range(20)} <= far
    for id_ in rnd.sample(sorted(keys), 900) + [10**7 + i for i in range(20)]:
        was = keys[id_]
        now = None if rnd.random() < 0.08 else rnd.randrange(80)
        if now is not None and typecode == "d":
            now /= 4
        if now == was:
            continue
        index.move(was, now, id_)
        model.remove(was, id_)
        model.add(now, id_)
        keys[id_] = now
    _check(index, model, rnd)
    assert index.count_span((0, 0), index.end) == len(model.pairs)
    assert all(index.column.get(i) == k for i, k in keys.items())
    assert len(index.column) == len(keys) and index.column.nulls == set(model.nulls)
    assert set(index.column.far) == far


def test_a_move_of_an_absent_entry_is_a_key_error_and_changes_nothing() -> None:
    pairs = [(k // 4, k) for k in range(1, 1200)] + [(None, 5000)]
    index, model = OrderedIndex(pairs), Model(pairs)
    for was, id_ in [(1, 3), (0.5, 2), (None, 4), (10**6, 1)]:
        with pytest.raises(KeyError):
            index.move(was, 7, id_)
    _check(index, model, random.Random(6))
    assert index.column.get(3) == 0 and index.column.get(5000) is None
