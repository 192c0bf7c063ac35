"""The write side of the indexes as a write reaches them: an ordered index's add (one bisect
to the end of its key's run, ids kept ascending within a run) and the word index's swap (the
unchanged `@search` fields cut into words only when a moved word may be one of theirs).

Each test holds the index to what a plain sorted list or a full re-cut of the record's words
says, so the cheaper paths answer exactly as the plain ones did (bench/README.md, session 9).
"""

from __future__ import annotations

import random

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.sortedlist import LOAD
from dbsvc.storage.words import WordIndex


def test_ordered_add_keeps_each_run_of_a_key_in_id_order_whatever_order_ids_come_in():
    rng = random.Random(7)
    index = OrderedIndex()
    entries = []
    ids = list(range(1, 6 * LOAD))
    rng.shuffle(ids)
    for id_ in ids:  # a few keys, long runs split over several sublists
        key = rng.choice((0.5, 1.5, 2.5))
        index.add(key, id_)
        entries.append((key, id_))
    assert list(index) == sorted(entries)


def test_ordered_add_of_a_new_largest_id_goes_to_the_end_of_its_run():
    index = OrderedIndex([(1.5, 10), (1.5, 20), (2.5, 5), (0.5, 30)])
    index.add(1.5, 40)
    index.add(1.5, 15)  # a smaller id than the run's last: inside the run
    index.add(2.5, 1)  # the smallest id of its run: first
    assert list(index) == [(0.5, 30), (1.5, 10), (1.5, 15), (1.5, 20), (1.5, 40), (2.5, 1), (2.5, 5)]
    index.remove(1.5, 15)
    index.remove(1.5, 40)
    assert list(index) == [(0.5, 30), (1.5, 10), (1.5, 20), (2.5, 1), (2.5, 5)]


def test_ordered_add_and_remove_agree_with_a_sorted_list_under_random_writes():
    rng = random.Random(11)
    index = OrderedIndex()
    held: dict[int, float] = {}
    for _step in range(8 * LOAD):
        id_ = rng.randint(1, 3 * LOAD)
        if id_ in held:
            index.remove(held.pop(id_), id_)
        else:
            held[id_] = rng.randint(0, 9) + 0.5
            index.add(held[id_], id_)
    assert list(index) == sorted((key, id_) for id_, key in held.items())


def words_of(index: WordIndex) -> dict[str, set]:
    return {word: set(ids) for word, ids in index.postings.items()}


def test_swap_keeps_a_word_the_unchanged_field_holds():
    # title (position 0) changes, body (position 1) does not: "pie" leaves the title but the
    # body still holds it, and "crust" comes to the title while the body holds it already
    index = WordIndex([0, 1])
    index.add(1, ("apple pie", "a pie crust"))
    index.swap(1, ("apple pie", "a pie crust"), ("crust tart", "a pie crust"))
    assert words_of(index) == {"a": {1}, "pie": {1}, "crust": {1}, "tart": {1}}
    assert list(index.ordered) == ["a", "crust", "pie", "tart"]


def test_swap_moves_a_word_found_only_inside_a_longer_word_of_the_unchanged_field():
    # "com" and "put" are in "computer" but are not its words: they move
    index = WordIndex([0, 1])
    index.add(1, ("com", "a computer"))
    index.swap(1, ("com", "a computer"), ("put", "a computer"))
    assert words_of(index) == {"a": {1}, "computer": {1}, "put": {1}}
    index.swap(1, ("put", "a computer"), ("A", "a computer"))
    assert words_of(index) == {"a": {1}, "computer": {1}}


def test_swap_folds_the_unchanged_field_before_looking_for_a_moved_word():
    index = WordIndex([0, 1])
    index.add(1, ("ete", "L'Été"))
    index.swap(1, ("ete", "L'Été"), ("x", "L'Été"))  # "ete" is the body's word once folded
    assert words_of(index) == {"l": {1}, "ete": {1}, "x": {1}}
    index.swap(1, ("x", "L'Été"), ("x", None))
    assert words_of(index) == {"x": {1}}


def test_swap_gives_the_words_a_full_recut_gives_under_random_updates():
    rng = random.Random(3)
    vocabulary = ["red", "pie", "com", "computer", "put", "Été", "ete", "x1", "x", "tart"]

    def text() -> str | None:
        return None if rng.random() < 0.1 else " ".join(rng.sample(vocabulary, rng.randint(1, 3)))

    index, plain = WordIndex([0, 1]), WordIndex([0, 1])
    records = {i: (text(), text()) for i in range(1, 30)}
    for id_, values in records.items():
        index.add(id_, values)
    for _ in range(600):
        id_ = rng.randint(1, 29)
        old = records[id_]
        new = (text(), old[1]) if rng.random() < 0.7 else (old[0], text())
        index.swap(id_, old, new)
        records[id_] = new
    for id_, values in records.items():
        plain.add(id_, values)
    assert words_of(index) == words_of(plain)
    assert list(index.ordered) == list(plain.ordered)


def test_a_common_word_added_after_its_ids_became_a_set_and_back_reaches_the_index():
    index = WordIndex([0])
    for id_ in range(1, 10):  # nine ids: a set past eight
        index.add(id_, ("common rare",))
    for id_ in range(1, 7):  # down to three: a tuple again
        index.remove(id_, ("common rare",))
    index.add(20, ("common",))  # not through the set it no longer has
    assert words_of(index) == {"common": {7, 8, 9, 20}, "rare": {7, 8, 9}}
    assert type(index.postings["common"]) is tuple
    for id_ in range(21, 27):  # a set again: the new set takes the adds
        index.add(id_, ("common",))
    index.add(30, ("common new",))
    assert words_of(index)["common"] == {7, 8, 9, 20, 21, 22, 23, 24, 25, 26, 30}
    assert words_of(index)["new"] == {30} and list(index.ordered) == ["common", "new", "rare"]


def test_a_built_index_takes_adds_to_its_common_words():
    index = WordIndex([0])
    index.build((id_, ("common",)) for id_ in range(1, 12))
    index.add(12, ("common",))
    index.remove(1, ("common",))
    assert words_of(index) == {"common": set(range(2, 13))}


def test_swap_adds_no_second_entry_for_a_word_the_unchanged_field_holds():
    # only a came word is in the body ("crust"): the record is under it once, not twice
    index = WordIndex([0, 1])
    index.add(1, ("apple", "a pie crust"))
    index.swap(1, ("apple", "a pie crust"), ("crust", "a pie crust"))
    assert index.postings == {"a": (1,), "pie": (1,), "crust": (1,)}
    assert index.postings_count() == 3


def test_a_built_index_turns_a_common_word_back_into_a_tuple_on_removes():
    index = WordIndex([0])
    index.build((id_, ("common rare",) if id_ == 1 else ("common",)) for id_ in range(1, 10))
    for id_ in range(1, 6):  # nine ids down to four: a tuple again, with no add before
        index.remove(id_, ("common rare",) if id_ == 1 else ("common",))
    assert index.postings == {"common": (6, 7, 8, 9)}


def test_a_built_index_takes_adds_to_its_rare_words():
    index = WordIndex([0])
    index.build([(1, ("rare",)), (2, ("rare",))])
    index.add(3, ("rare",))
    assert index.postings == {"rare": (1, 2, 3)}


def test_ordered_add_splits_a_full_sublist_in_two_halves_and_routes_later_writes_by_them():
    rng = random.Random(5)
    keys = list(range(2 * LOAD + 1))
    rng.shuffle(keys)
    index = OrderedIndex()
    for key in keys[: 2 * LOAD]:
        index.add(key, key)
    assert [len(ids) for ids in index.id_sublists] == [2 * LOAD]  # full, not split yet
    index.add(keys[2 * LOAD], keys[2 * LOAD])  # one past: two halves
    assert [len(ids) for ids in index.id_sublists] == [LOAD, LOAD + 1]
    assert index.last_keys == [LOAD - 1, 2 * LOAD]
    for key in keys:  # every entry found again through the halves' last keys
        index.remove(key, key)
        index.add(key, key)
    assert list(index) == [(key, key) for key in range(2 * LOAD + 1)]


def test_ordered_add_splits_a_run_of_one_key_by_its_ids():
    index = OrderedIndex()
    for id_ in range(1, 2 * LOAD + 2):
        index.add(0.5, id_)
    assert [ids[-1] for ids in index.id_sublists] == [LOAD, 2 * LOAD + 1]
    index.add(0.5, 0)  # the smallest id: into the first half, by the halves' last ids
    index.remove(0.5, LOAD)
    index.remove(0.5, LOAD + 1)
    assert list(index) == [(0.5, id_) for id_ in range(2 * LOAD + 2) if id_ not in (LOAD, LOAD + 1)]


def test_ordered_add_keeps_counts_and_a_sublists_ids_in_id_order_current():
    index = OrderedIndex([(key + 0.5, key) for key in range(10)])
    end = index.end
    assert index.count_span((0, 0), end) == 10 and index.sorted_ids(0) == list(range(10))
    index.add(3.5, 30)
    index.add(3.5, 20)
    assert index.count_span((0, 0), index.end) == 12
    assert index.sorted_ids(0) == [*range(10), 20, 30]
