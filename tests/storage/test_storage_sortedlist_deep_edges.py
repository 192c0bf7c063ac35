"""SortedIndex.slice's Fenwick path (storage/sortedlist.py) at the two edges its older tests
left out, in process, no fixture.

A deep slice (start at FOUND_FROM or past it) copies what it can from the sublist the
descent found and then takes the rest from the next sublists while some is left: a page
that needs exactly one entry of the next sublist is the loop's last step (session 24's
mutation pass, `left > 1` survived: the older pages took 19 or 599 from the next). A slice
whose stop lies before its start is empty on either path, as a list's is; on the Fenwick
path `j + stop - start` would be a negative bound and slice from the sublist's end
(`start < FOUND_FROM and stop <= start` survived: no older case asked a reversed range).
"""

from __future__ import annotations

from dbsvc.storage.sortedlist import FOUND_FROM, LOAD, SortedIndex


def _index() -> tuple[SortedIndex, list[int]]:
    """Eight sublists of LOAD entries (ids 0, 2, 4, ...) and the list they hold."""
    model = list(range(0, 16 * LOAD, 2))
    index = SortedIndex.from_sorted(list(model))
    assert [len(sub) for sub in index.sublists] == [LOAD] * 8
    return index, model


def test_a_deep_page_that_needs_one_entry_of_the_next_sublist_gets_it() -> None:
    index, model = _index()
    for edge in (3 * LOAD, 4 * LOAD, 7 * LOAD):  # each the first position of a sublist past FOUND_FROM
        start = edge - 1
        assert index.slice(start, start + 2) == model[start : start + 2], edge
        assert len(index.slice(start, start + 2)) == 2
        start = edge - LOAD  # a whole sublist, then one entry of the next
        assert index.slice(start, start + LOAD + 1) == model[start : start + LOAD + 1], edge


def test_a_deep_page_that_needs_one_entry_of_the_next_sublist_after_a_change() -> None:
    """The same once the counts are built and kept up (an entry removed in the third
    sublist: its page's edge moves one to the left)."""
    index, model = _index()
    assert index.slice(FOUND_FROM, FOUND_FROM + 1) == [model[FOUND_FROM]]  # builds the counts
    index.remove(model[2 * LOAD + 5])
    del model[2 * LOAD + 5]
    start = 3 * LOAD - 2  # the third sublist's last entry now
    assert index.slice(start, start + 2) == model[start : start + 2]


def test_a_reversed_or_empty_deep_range_is_empty() -> None:
    index, model = _index()
    n = len(model)
    for start, stop in (
        (FOUND_FROM + 2, FOUND_FROM - 4),  # stop before start, start just past a sublist's first
        (2 * LOAD + 3, 2 * LOAD + 1),
        (5 * LOAD + 1, 0),
        (n - 1, n - 5),
        (FOUND_FROM, FOUND_FROM),
        (n + 3, n),
    ):
        assert index.slice(start, stop) == model[start:stop] == [], (start, stop)
