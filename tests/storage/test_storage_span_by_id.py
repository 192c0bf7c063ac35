"""A window's ids kept sorted by id (`OrderedIndex.span_by_id`, keptparts.py), and its
bounds' positions and count (`lower`, `count_span`, kept until the next write) against the
plain answer (the entries between two keys, sorted), across the writes that keep an index:
adds, removes, updates that move a key, sublists split and emptied, entries put in place
(runs.py's `grown`) and a rebuild from columns (a compaction's, or a snapshot's load).

The kept span is found again by its positions until a sublist it reaches changes, so a
stale one would answer the ids of before the write: a hypothesis state machine asks spans
between writes and compares every answer with the plain one.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.keptparts import SPANS_KEPT

KEYS = st.integers(0, 40)  # few keys, long runs of equal keys crossing sublists (LOAD 512)


def span_of(index: OrderedIndex, low: int, high: int) -> list[int]:
    start, stop = index.lower(low, True), index.lower(high, False)  # keys in [low, high]
    return index.span_by_id(start, stop)


class SpanMachine(RuleBasedStateMachine):
    @initialize(count=st.integers(1200, 2600), seed=st.integers(0, 1000))
    def fill(self, count: int, seed: int) -> None:
        self.keys = {id_: (id_ * 7919 + seed) % 41 for id_ in range(1, count + 1)}
        self.next_id = count + 1
        self.index = OrderedIndex.from_columns([self.keys[i] for i in sorted(self.keys)], sorted(self.keys))

    def plain(self, low: int, high: int) -> list[int]:
        return sorted(id_ for id_, key in self.keys.items() if low <= key <= high)

    @rule(low=KEYS, width=st.integers(0, 6))
    def ask(self, low: int, width: int) -> None:
        got = span_of(self.index, low, low + width)
        span = self.index.lower(low, True), self.index.lower(low + width, False)
        assert got == self.plain(low, low + width)
        assert self.index.count_span(*span) == len(got)  # `lower` and `count_span` are kept until a write too
        assert span_of(self.index, low, low + width) is got  # kept while nothing changed

    @rule(key=KEYS, many=st.integers(1, 300))
    def add(self, key: int, many: int) -> None:  # enough of them at once to split a sublist
        for _ in range(many):
            self.index.add(key, self.next_id)
            self.keys[self.next_id] = key
            self.next_id += 1

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        if self.keys:
            id_ = data.draw(st.sampled_from(sorted(self.keys)))
            self.index.remove(self.keys.pop(id_), id_)

    @rule(data=st.data(), key=KEYS)
    def move(self, data: st.DataObject, key: int) -> None:  # an update that moves the key
        if self.keys:
            id_ = data.draw(st.sampled_from(sorted(self.keys)))
            self.index.remove(self.keys[id_], id_)
            self.index.add(key, id_)
            self.keys[id_] = key

    @rule(key=KEYS)
    def empty_run(self, key: int) -> None:  # a whole run removed: sublists emptied and dropped
        for id_ in [i for i, k in self.keys.items() if k == key]:
            self.index.remove(self.keys.pop(id_), id_)

    @rule(many=st.integers(1, 600))
    def put_in_place(self, many: int) -> None:
        # runs.py's bulk add: entries past the last put into the last sublist in place
        index = self.index
        if not index.id_sublists:
            return
        top = index.last_keys[-1]
        for _ in range(many):
            index.key_sublists[-1].append(top)
            index.id_sublists[-1].append(self.next_id)
            index.column.set(self.next_id, top)  # as runs.py's `set_many`
            self.keys[self.next_id] = top
            self.next_id += 1
        index.last_ids[-1] = self.next_id - 1
        index.grown(many)

    @rule()
    def rebuild(self) -> None:  # a compaction's or a snapshot's index, from columns
        ids = sorted(self.keys)
        self.index = OrderedIndex.from_columns([self.keys[i] for i in ids], ids)

    @invariant()
    def widest_span_is_every_id(self) -> None:
        assert span_of(self.index, 0, 40) == sorted(self.keys)


SpanMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_spans_by_id_agree_with_the_plain_answer_across_writes = SpanMachine.TestCase


def test_a_span_is_dropped_by_a_change_inside_it_and_kept_by_one_outside_it():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    assert len(index.id_sublists) == 6  # LOAD 512
    inside = span_of(index, 60, 100)  # sublists 1 and 2
    outside = span_of(index, 250, 260)  # sublist 4 and 5
    index.add(80, 5000)  # into sublist 1, no split
    assert span_of(index, 60, 100) is not inside and 5000 in span_of(index, 60, 100)
    assert span_of(index, 250, 260) is outside
    index.remove(80, 5000)
    assert span_of(index, 60, 100) == inside


def test_a_span_asked_at_the_same_positions_after_a_change_inside_it_is_made_again():
    # an entry replaced by another of the same key leaves every position where it was, so
    # the same bounds find the same two positions: only the drop rule makes the span anew,
    # whichever sublist of it (the first, the last, the only one) the change was in
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    for low, high, key in ((60, 69, 65), (45, 60, 47), (45, 60, 55)):  # (1, 88)-(1, 188); sublists 0 and 1
        before = span_of(index, low, high)
        old = key * 10 + 3
        index.remove(key, old)
        index.add(key, 10_000 + old)
        after = span_of(index, low, high)
        assert old not in after and 10_000 + old in after and len(after) == len(before), (low, high, key)


def test_an_index_keeps_at_most_spans_kept_spans():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))
    kept = [span_of(index, low, low) for low in range(SPANS_KEPT)]
    assert all(span_of(index, low, low) is kept[low] for low in range(SPANS_KEPT))
    span_of(index, 200, 200)  # one more: every kept span dropped first
    assert span_of(index, 0, 0) is not kept[0] and span_of(index, 0, 0) == kept[0]


def test_positions_and_counts_found_are_found_again_after_a_write():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    run = index.lower(50, True), index.lower(50, False)  # key 50's run: sublist 0's end, 1's start
    assert list(index.ids_span(*run)) == list(range(500, 510)) and index.count_span(*run) == 10
    index.add(50, 5000)  # the run grows by one
    run = index.lower(50, True), index.lower(50, False)
    assert list(index.ids_span(*run)) == [*range(500, 510), 5000] and index.count_span(*run) == 11
    index.remove(50, 500)
    run = index.lower(50, True), index.lower(50, False)
    assert list(index.ids_span(*run)) == [*range(501, 510), 5000] and index.count_span(*run) == 10


def test_a_count_to_the_end_is_found_again_after_entries_put_in_place():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    assert index.count_span(index.lower(290, True), index.end) == 100
    index.key_sublists[-1].append(299)  # runs.py's in-place run past the last entry
    index.id_sublists[-1].append(9000)
    index.column.set(9000, 299)
    index.last_ids[-1] = 9000
    index.grown(1)
    assert index.count_span(index.lower(290, True), index.end) == 101


# keptparts.py `KeptParts.changed`, where mutation testing found these two unpinned
# (docs/mutation.md, "... session 12, wt-mpo2"): which spans a change drops, and that the
# index still knows it keeps something after a change dropped only some of it.


def test_a_change_in_a_middle_sublist_drops_a_span_that_stops_early_in_a_later_one():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    assert (index.lower(200, True), index.lower(255, False)) == ((3, 464), (5, 0))  # sublists 3 to 5's start
    kept = span_of(index, 200, 255)
    index.add(230, 5000)  # into sublist 4: past the stop's offset (0), before its sublist (5)
    again = span_of(index, 200, 255)
    assert again is not kept and again == sorted([*kept, 5000])


def test_a_span_kept_apart_from_a_change_is_still_dropped_by_a_later_change_inside_it():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    span_of(index, 60, 100)  # sublist 1
    outside = span_of(index, 250, 260)  # sublists 4 and 5
    index.add(80, 5000)  # drops the first span only: the second is still kept
    assert span_of(index, 250, 260) is outside
    index.add(252, 5001)  # inside sublist 4, the span's bounds where they were: it must go
    assert span_of(index, 250, 260) == sorted([*outside, 5001])
    index.remove(252, 5001)
    assert span_of(index, 250, 260) == outside


def test_a_sublists_part_kept_after_its_span_went_is_still_dropped_by_a_change_in_it():
    index = OrderedIndex.from_columns([i // 10 for i in range(3000)], list(range(3000)))  # runs of 10
    before = span_of(index, 250, 260)  # sublists 4 and 5: a part of each, and the span
    index.add(290, 5000)  # into sublist 5, past the span: drops it and 5's part; 4's part is kept
    index.remove(252, 2525)  # an entry of sublist 4 replaced, its length unchanged
    index.add(252, 5001)
    assert span_of(index, 250, 260) == sorted([*(i for i in before if i != 2525), 5001])
