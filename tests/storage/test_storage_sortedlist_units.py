"""SortedIndex (storage/sortedlist.py) against a plain sorted list, in process, no fixture.

Each case builds an index of several sublists (LOAD is 512: a sublist holds at most 1,024
entries and splits in halves of 512 past that), changes it through its public methods and
compares everything a reader can ask (iteration both ways, `in`, `iter_after` from every
sublist's edges, `slice`, `len`, the sublists' sizes) with the same changes made to a list.
These are the decisions the session-7 mutation pass left open (docs/mutation.md, "mq").
"""

from __future__ import annotations

import random
from bisect import insort
from itertools import islice

import pytest

from dbsvc.storage.sortedlist import FOUND_FROM, SortedIndex, sorted_position, sublist_slice


def _check(index: SortedIndex, model: list[int]) -> None:
    """Everything a reader sees of `index` is what `model` (ascending) holds."""
    assert len(index) == len(model)
    assert list(index) == model
    assert list(reversed(index)) == model[::-1]
    assert all(len(sub) <= 1024 for sub in index.sublists)
    assert [e for sub in index.sublists for e in sub] == model
    present = set(model)
    edges = {model[0] - 1, model[-1] + 1} if model else {0}
    for sub in index.sublists:
        edges |= {sub[0] - 1, sub[0], sub[-1], sub[-1] + 1}
    for probe in sorted(edges):
        assert (probe in index) == (probe in present), probe
        assert list(index.iter_after(probe)) == [m for m in model if m > probe], probe
    for probe in model[::37]:
        assert probe in index
        assert list(islice(index.iter_after(probe), 3)) == [m for m in model if m > probe][:3]
    n = len(model)
    for start, stop in ((0, n), (0, 0), (5, 5), (511, 513), (n - 3, n + 5), (n + 1, n + 9), (700, 1600)):
        assert index.slice(start, stop) == model[start:stop], (start, stop)


def test_an_ascending_add_splits_a_sublist_only_past_1024_entries_in_halves_of_512() -> None:
    index = SortedIndex()
    model = []
    for i in range(1024):
        index.add(i * 2)
        model.append(i * 2)
    assert [len(s) for s in index.sublists] == [1024]
    _check(index, model)
    index.add(2048)
    model.append(2048)
    assert [len(s) for s in index.sublists] == [512, 513]
    assert index.sublists[0][-1] == 1022 and index.sublists[1][0] == 1024
    _check(index, model)


def test_adds_inside_the_first_of_three_sublists_split_it_and_keep_the_others() -> None:
    model = list(range(0, 3072, 2))  # 1,536 even numbers: three sublists of 512
    index = SortedIndex.from_sorted(list(model))
    assert [len(s) for s in index.sublists] == [512, 512, 512]
    for odd in range(1, 1026, 2):  # 513 entries into the first sublist, whose last entry is 1022
        index.add(odd)
    model = sorted(model + list(range(1, 1026, 2)))
    # the first sublist held 512 + 511 (the odd ones below 1022); 1,023 and 1,025 go to the second
    assert [len(s) for s in index.sublists] == [1023, 514, 512]
    index.add(3)  # 1,024: no split yet
    assert [len(s) for s in index.sublists] == [1024, 514, 512]
    index.add(5)
    model = sorted(model + [3, 5])
    assert [len(s) for s in index.sublists] == [512, 513, 514, 512]
    assert index.sublists[0][-1] == 509 and index.sublists[1][-1] == 1022
    _check(index, model)
    index.add(-1)
    index.add(5000)
    model = [-1, *model, 5000]
    _check(index, model)


def test_extend_past_splits_the_last_sublist_as_often_as_it_must() -> None:
    model = list(range(1000))
    index = SortedIndex.from_sorted(list(model))
    assert [len(s) for s in index.sublists] == [512, 488]
    index.extend_past(list(range(1000, 3100)))
    model += list(range(1000, 3100))
    assert [len(s) for s in index.sublists] == [512, 512, 512, 512, 512, 540]
    _check(index, model)
    index.extend_past([3100, 3101])
    model += [3100, 3101]
    assert [len(s) for s in index.sublists] == [512, 512, 512, 512, 512, 542]
    _check(index, model)
    index.extend_past(list(range(3102, 3584)))  # the last sublist reaches 1,024 exactly: no split
    model += list(range(3102, 3584))
    assert [len(s) for s in index.sublists] == [512, 512, 512, 512, 512, 1024]
    _check(index, model)
    index.extend_past([3584])
    model.append(3584)
    assert [len(s) for s in index.sublists] == [512, 512, 512, 512, 512, 512, 513]
    _check(index, model)


def test_extend_past_a_single_short_sublist_and_after_a_share() -> None:
    index = SortedIndex([5, 1, 3])
    handed = index.share()
    index.extend_past([7, 9])
    assert handed == [[1, 3, 5]]
    index.unshare()
    _check(index, [1, 3, 5, 7, 9])


def test_remove_empties_and_drops_a_middle_sublist_and_keeps_the_maxes() -> None:
    model = list(range(1536))
    index = SortedIndex.from_sorted(list(model))
    for x in range(511, 1024):  # the middle sublist whole, last entry first
        index.remove(x)
    model = [m for m in model if not 511 <= m < 1024]
    assert [len(s) for s in index.sublists] == [511, 512]
    _check(index, model)
    index.remove(1535)  # a last entry: the maxes move down
    model.pop()
    _check(index, model)


def test_remove_of_an_absent_entry_names_it_and_changes_nothing() -> None:
    index = SortedIndex(range(0, 2000, 2))
    for absent in (7, 1999, 5000):  # inside a sublist, between the last two, past every entry
        with pytest.raises(KeyError) as caught:
            index.remove(absent)
        assert caught.value.args == (absent,)
    _check(index, list(range(0, 2000, 2)))


def test_random_adds_and_removes_match_a_sorted_list() -> None:
    rng = random.Random(34)
    index = SortedIndex()
    model: list[int] = []
    for step in range(6000):
        if model and rng.random() < 0.3:
            x = model.pop(rng.randrange(len(model)))
            index.remove(x)
        else:
            x = rng.randrange(4000)
            index.add(x)
            model.append(x)
            model.sort()
        if step % 1500 == 1499:
            _check(index, model)
    _check(index, model)


def test_sorted_position_is_the_place_or_minus_one() -> None:
    items = [1, 3, 3, 8]
    assert [sorted_position(items, x) for x in (0, 1, 2, 3, 8, 9)] == [-1, 0, -1, 1, 3, -1]
    assert sorted_position([], 4) == -1


def test_sublist_slice_by_position_across_sublists() -> None:
    lists = [[0, 1, 2], [3, 4], [5, 6, 7, 8]]
    flat = list(range(9))
    for start in range(11):
        for stop in range(11):
            assert sublist_slice(lists, start, stop) == flat[start:stop], (start, stop)
    assert sublist_slice([], 0, 3) == []


def _deep_slices_match(index: SortedIndex, model: list[int]) -> None:
    """Every slice starting past FOUND_FROM (the Fenwick's descent) at each sublist's edges
    and in between, pages of 1, 20 and 600 (one running on into the next sublists)."""
    n = len(model)
    starts = {FOUND_FROM, n - 1, n, n + 3}
    pos = 0
    for sub in index.sublists:
        starts |= {pos - 1, pos, pos + 1, pos + len(sub) // 2}
        pos += len(sub)
    for start in sorted(s for s in starts if s >= FOUND_FROM):
        for size in (1, 20, 600):
            assert index.slice(start, start + size) == model[start : start + size], (start, size)


def test_a_deep_slice_is_found_again_after_every_kind_of_change() -> None:
    """The counts built by one deep slice follow each change that moves a position: an
    entry added inside a sublist, removed before the slice, appended at the end, appended
    in a run (`extend_past`), a split, a sublist emptied, a fill; each asked right after
    (the counts then already built), so a change they missed shows as a page off by one."""
    model = list(range(0, 8192, 2))  # eight sublists of 512
    index = SortedIndex.from_sorted(list(model))
    _deep_slices_match(index, model)  # builds the counts
    changes = [  # (what, the change made to the index, the same to the model)
        ("add inside the first sublist", lambda: index.add(1), lambda: [1]),
        ("remove before the slices", lambda: index.remove(600), lambda: [-600]),
        ("append at the end", lambda: index.add(9000), lambda: [9000]),
        ("a run past the end", lambda: index.extend_past([9001, 9003]), lambda: [9001, 9003]),
        ("a run that splits", lambda: index.extend_past(list(range(9005, 11000, 2))), lambda: range(9005, 11000, 2)),
        (
            "adds that split a sublist",
            lambda: [index.add(x) for x in range(2049, 3200, 2)],
            lambda: range(2049, 3200, 2),
        ),
        ("a sublist emptied", lambda: [index.remove(x) for x in range(4096, 5120, 2)], lambda: range(-4096, -5120, -2)),
    ]
    for label, change, made in changes:
        change()
        for x in made():  # a negative number: that entry removed
            if x < 0:
                model.remove(-x)
            else:
                insort(model, x)
        assert index.slice(FOUND_FROM, FOUND_FROM + 3) == model[FOUND_FROM : FOUND_FROM + 3], label
        _deep_slices_match(index, model)
    _check(index, model)
    index = SortedIndex(model[::-1])  # a fill drops the counts with the sublists
    _deep_slices_match(index, model)


def test_a_deep_slice_after_share_and_random_changes_matches_a_sorted_list() -> None:
    rng = random.Random(24)
    model = sorted(rng.sample(range(20000), 5000))
    index = SortedIndex.from_sorted(list(model))
    handed = index.share()  # copies made before a change keep the lengths: the counts hold
    for step in range(3000):
        if rng.random() < 0.4:
            x = model.pop(rng.randrange(len(model)))
            index.remove(x)
        else:
            x = rng.randrange(22000)
            index.add(x)
            insort(model, x)
        if step % 97 == 0:
            start = rng.randrange(FOUND_FROM, len(model) + 5)
            assert index.slice(start, start + 20) == model[start : start + 20], (step, start)
    index.unshare()
    assert sum(map(len, handed)) == 5000
    _deep_slices_match(index, model)


def test_head_after_is_the_seek_from_a_skip_sliced_across_sublists() -> None:
    """`head_after` (a cursor's page in id order) is `iter_after`'s entries from `skip`, at
    most `count`: from every sublist's edges, skips that run past one or every sublist,
    pages that run on into the next ones or past the end."""
    model = list(range(0, 6000, 2))
    index = SortedIndex.from_sorted(list(model))
    index.remove(1030)  # sublists of unequal lengths: 512, 511, 512, ...
    model.remove(1030)
    probes = {-1, 5999, 6000}
    for sub in index.sublists:
        probes |= {sub[0] - 1, sub[0], sub[-1], sub[-1] + 1}
    for probe in sorted(probes):
        after = [m for m in model if m > probe]
        for skip in (0, 1, 510, 511, 512, 1100, len(after) - 1, len(after), len(after) + 3):
            for count in (0, 1, 21, 600):
                got = index.head_after(probe, skip, count)
                assert got == after[skip : skip + count], (probe, skip, count)
    assert SortedIndex().head_after(3, 0, 5) == []
