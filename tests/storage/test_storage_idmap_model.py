"""`IdMap` against a model: a plain dict for what it answers, plus the documented placement
rule for where each id is held, with ids in the list and ids in the side dict mixed in one
map (inserts, deletes, re-inserts, replaces, lookups of present and absent ids, iteration
order, size, `pick`, `copy`).

The placement rule (idmap.py's docstring), written here independently of the module:
a new int id goes to the list when 0 <= id < max(2 * the records in the list, the list's
length + 1024), growing the list to id + 1; any other id goes to the dict. An id stays where
it was first put until it is deleted, even once the list has grown past it. Iteration is
the list's ids ascending, then the dict's in the order they were put there."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from dbsvc.storage.idmap import IdMap, pick, records_of


class Model:
    """What an IdMap must hold and answer, as plain Python."""

    def __init__(self) -> None:
        self.records: dict[Any, bytes] = {}  # the plain dict: id -> record
        self.listed: set[int] = set()  # ids held in the list
        self.length = 0  # the list's length
        self.far: dict[Any, bytes] = {}  # ids held in the side dict, in the order put there

    def put(self, id_: Any, record: bytes) -> None:
        if id_ in self.records:  # a replace stays where the id is
            if id_ in self.far:
                self.far[id_] = record
        elif type(id_) is int and 0 <= id_ < max(2 * len(self.listed), self.length + 1024):
            self.listed.add(id_)
            self.length = max(self.length, id_ + 1)
        else:
            self.far[id_] = record
        self.records[id_] = record

    def delete(self, id_: Any) -> None:
        del self.records[id_]
        self.listed.discard(id_)
        self.far.pop(id_, None)

    def build(self, ids: list[int], records: list[bytes]) -> None:
        """`IdMap.from_ascending`: one list when it holds the ids well, else one by one."""
        if ids and ids[0] >= 0 and ids[-1] < max(2 * len(ids), 1024):
            self.records = dict(zip(ids, records))
            self.listed, self.length = set(ids), ids[-1] + 1
        else:
            for id_, record in zip(ids, records):
                self.put(id_, record)

    def check(self, m: IdMap, probes: list[Any]) -> None:
        """Every answer of `m` against the model, exactly (order included)."""
        order = sorted(self.listed) + list(self.far)
        assert list(m) == order
        assert len(m) == len(self.records)
        assert list(m.items()) == [(i, self.records[i]) for i in order]
        assert m.copy() == self.records and list(m.copy()) == order
        # Where each id is held.
        assert len(m.slots) == self.length
        assert {i for i, r in enumerate(m.slots) if r is not None} == self.listed
        assert list(m.far.items()) == list(self.far.items())
        for id_ in probes:
            if id_ in self.records:
                assert id_ in m and m[id_] == self.records[id_] and m.get(id_, "absent") == self.records[id_]
            else:
                assert id_ not in m and m.get(id_) is None and m.get(id_, "absent") == "absent"
                with pytest.raises(KeyError):
                    m[id_]
        present = [i for i in probes if i in self.records]
        assert m.pick(present[::-1]) == [self.records[i] for i in present[::-1]]


# Ids that exercise both homes: small ones, ones past the list's end that turn near once it
# grows (1029, 1030, 2050 with an empty list are far), far ones, negative ones, a text id.
POOL = [0, 1, 2, 3, 4, 7, 998, 999, 1000, 1023, 1024, 1029, 1030, 1031, 2050, 2051, 10**9, 10**9 + 1, -1, -1024, "x"]
ids = st.sampled_from(POOL)


class IdMapMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.step = 0

    @initialize(start=st.lists(st.sampled_from([i for i in POOL if type(i) is int]), unique=True, max_size=6))
    def start(self, start: list[int]) -> None:
        start.sort()
        records = [b"[%d]" % i for i in start]
        self.m = IdMap.from_ascending(start, records)
        self.model = Model()
        self.model.build(start, records)

    def record(self, id_: Any) -> bytes:
        self.step += 1
        return b'[%s,"s%d"]' % (str(id_).encode(), self.step)

    @rule(id_=ids)
    def put(self, id_: Any) -> None:
        record = self.record(id_)
        self.m[id_] = record
        self.model.put(id_, record)

    @rule(n=st.integers(1, 40))
    def put_next_ids(self, n: int) -> None:
        """A table's automatic ids: the next ones after the list's end."""
        for _ in range(n):
            id_ = len(self.m.slots)
            record = self.record(id_)
            self.m[id_] = record
            self.model.put(id_, record)

    @precondition(lambda self: bool(self.model.records))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        id_ = data.draw(st.sampled_from(sorted(self.model.records, key=str)))
        del self.m[id_]
        self.model.delete(id_)

    @rule(id_=ids)
    def delete_absent(self, id_: Any) -> None:
        if id_ not in self.model.records:
            with pytest.raises(KeyError):
                del self.m[id_]

    @invariant()
    def agrees(self) -> None:
        if hasattr(self, "m"):
            self.model.check(self.m, POOL + [5, 1025, 3000, -2, "y", 10**9 + 2])


TestIdMapModel = IdMapMachine.TestCase
TestIdMapModel.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def run_script(steps: list[tuple[str, Any]], start: list[int] = ()) -> IdMap:
    """Play `steps` ("put" or "del", id) on an IdMap and the model, checking after each."""
    start = sorted(start)
    m, model = IdMap.from_ascending(list(start), [b"[%d]" % i for i in start]), Model()
    model.build(list(start), [b"[%d]" % i for i in start])
    probes = POOL + [5, 3000]
    model.check(m, probes)
    for n, (op, id_) in enumerate(steps):
        if op == "put":
            m[id_] = b"[%s,%d]" % (str(id_).encode(), n)
            model.put(id_, b"[%s,%d]" % (str(id_).encode(), n))
        else:
            del m[id_]
            model.delete(id_)
        model.check(m, probes)
    return m


def test_a_dict_id_at_the_lists_end_is_replaced_in_the_dict_not_appended():
    """1030 goes to the dict (the list is empty), the list then grows to exactly 1030
    slots: putting 1030 again is a replace in the dict, not the next slot of the list."""
    m = run_script([("put", 1030), ("put", 1000), ("put", 1029), ("put", 1030)])
    assert len(m.slots) == 1030 and list(m.far) == [1030] and len(m) == 3
    run_script([("put", 1030), ("put", 1000), ("put", 1029), ("del", 1030), ("put", 1030)])  # now the list's


def test_a_dict_id_the_list_grew_past_is_found_deleted_and_put_back():
    """2050 goes to the dict, the list then grows past it (1000, 2000, 2060): slot 2050 is
    empty and the dict answers; a replace stays there; deleted and put back, it is the
    list's."""
    m = run_script([("put", 2050), ("put", 1000), ("put", 2000), ("put", 2060), ("put", 2050)])
    assert list(m) == [1000, 2000, 2060, 2050] and list(m.far) == [2050] and len(m.slots) == 2061
    grown = [("put", 2050), ("put", 1000), ("put", 2000), ("put", 2060)]
    m = run_script(grown + [("del", 2050), ("put", 2050), ("put", -1)])
    assert list(m) == [1000, 2000, 2050, 2060, -1] and list(m.far) == [-1]


def test_deletes_and_reinserts_move_ids_between_the_dict_order_and_the_list():
    run_script(
        [("put", -1), ("put", "x"), ("put", 10**9), ("del", "x"), ("put", "x"), ("put", -1), ("del", -1), ("put", 3)]
        + [("put", i) for i in range(4, 12)]
        + [("del", 3), ("put", 3), ("del", 10**9), ("put", 0), ("put", 0)],  # id 0 replaced in the list
        start=[0, 1, 2],
    )


def test_the_list_takes_ids_up_to_twice_its_records():
    """1,500 records in a list of 1,501 slots take ids below 3,000 (past 1,501 + 1,024);
    10 records in 11 slots take ids below 11 + 1,024 (past twice 10)."""
    m = run_script([("put", 3100), ("put", 3000), ("put", 2999)], start=list(range(1, 1501)))
    assert list(m.far) == [3100, 3000] and len(m.slots) == 3000
    m = run_script([("put", 1034), ("put", 2059), ("put", 2058)], start=list(range(1, 11)))
    assert list(m.far) == [2059] and len(m.slots) == 2059


@pytest.mark.parametrize(
    ("start", "listed", "far"),
    [
        ([], 0, []),
        ([0, 1, 2], 3, []),
        ([3, 5, 1023], 1024, []),  # the last id just under 1024
        ([3, 5, 1024], 1025, []),  # at 1024: put one by one, 1024 is near the list's end
        ([3, 5, 2000], 6, [2000]),  # one by one, 2000 is far past it
        ([-2, 1, 2], 3, [-2]),
        ([600, 1100], 1101, []),
        ([*range(1100), 2200], 2201, []),  # 2,200 < twice 1,101 ids: one list (put one by one, 2,200 is far)
        ([*range(1100), 2210], 1100, [2210]),  # past twice the ids: one by one, and 2,210 is far
        ([*range(1100), 2202], 1100, [2202]),  # exactly twice the 1,101 ids: one by one too
    ],
)
def test_from_ascending_holds_each_id_where_the_rule_says(start, listed, far):
    m = run_script([], start=start)
    assert len(m.slots) == listed and list(m.far) == far


def test_records_of_chooses_the_map_by_id_kind_and_pick_reads_either():
    """Int ids get an IdMap, any other kind a plain dict; `pick` reads a list page from both,
    in the order asked."""
    ints = records_of(True, [1, 2, 5000], [b"[1]", b"[2]", b"[5000]"])
    assert type(ints) is IdMap and list(ints.far) == [5000] and len(ints.slots) == 3
    assert pick(ints, [5000, 2, 1]) == [b"[5000]", b"[2]", b"[1]"]
    texts = records_of(False, ["a", "b"], [b'["a"]', b'["b"]'])
    assert type(texts) is dict and texts == {"a": b'["a"]', "b": b'["b"]'}
    assert pick(texts, ["b", "a"]) == [b'["b"]', b'["a"]']
    assert records_of(True) == IdMap() and type(records_of(False)) is dict and records_of(False) == {}
    with pytest.raises(KeyError):
        pick(texts, ["c"])
