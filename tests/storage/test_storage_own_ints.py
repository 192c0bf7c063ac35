"""A number-keyed sort field's `OrderedIndex`, bulk-built at an open, holds id ints of its
own, made in its order (sortedlist.py `own_ints`): what it yields is unchanged (the same
ids, equal and in the same order); only the objects are new, so that a page's ids read at
1,000,000 records lie side by side in memory. Hash buckets keep the records' own ids (the
RSS limit: bench/README.md, docs/decisions.md, "Own ints"). Indexes built at an open
after writes and after a compaction still agree with the records."""

from __future__ import annotations

import random
from array import array

import pytest

from dbsvc.storage.indexes import OrderedIndex
from dbsvc.storage.sortedlist import own_ints
from support.storage import check_indexes, open_store, post, run, user

SMALL_MAX = 256  # CPython shares the ints -5..256: no new object is made for those


def test_own_ints_makes_a_new_object_for_each_int_past_the_small_ones_and_keeps_values():
    ids = [0, 5, 256, 257, 1000, 10**6, 2**62, -3, -300]
    ids = [int(str(i)) for i in ids]  # objects of their own, none a constant of this module
    made = own_ints(ids)
    assert made == ids and type(made) is list and made is not ids
    for old, new in zip(ids, made):
        assert type(new) is int
        if -5 <= old <= SMALL_MAX:
            assert new is old  # the shared small ints
        else:
            assert new is not old
    assert len({id(i) for i in made if i > SMALL_MAX}) == 4  # distinct objects, one an id


@pytest.mark.parametrize("ids", [["a", "b", "c"], [1, 2, 2**70], [1, 2.5], []])
def test_own_ints_keeps_ids_that_are_not_machine_ints_as_they_are(ids):
    """Text ids, ints past 64 bits, anything else: the very list, its objects untouched."""
    made = own_ints(ids)
    assert made == ids
    if ids:
        assert made is ids


def _pairs(n: int, gaps: bool, nulls: bool) -> tuple[list, list]:
    rng = random.Random(n * 4 + gaps * 2 + nulls)
    ids = [int(str(i)) for i in range(300, 300 + 3 * n, 3 if gaps else 1)][:n]
    if not gaps:
        ids = [int(str(i)) for i in range(300, 300 + n)]
    keys = [round(rng.random() * 50, 1) for _ in ids]  # many ties: runs of equal keys
    if nulls:
        for i in rng.sample(range(n), n // 10):
            keys[i] = None
    return ids, keys


@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("nulls", [False, True])
def test_a_number_keyed_ordered_index_yields_the_same_ids_in_the_same_order_as_its_own_objects(gaps, nulls):
    """Built from columns (a snapshot's open), a float sort field's index yields exactly what
    the index built entry by entry yields, (key, id) in order, nulls last; the ids of its
    sublists are objects of its own, equal to the table's."""
    ids, keys = _pairs(3000, gaps, nulls)
    column = keys if nulls else array("d", keys)
    built = OrderedIndex.from_columns(column, ids, "d")
    reference = OrderedIndex(zip(keys, ids), "d")
    assert list(built) == list(reference)
    assert list(built.ids_ascending()) == list(reference.ids_ascending())
    assert built.ids_slice(1500, 1530) == reference.ids_slice(1500, 1530)
    given = {id(i) for i in ids}
    held = [i for sub in built.id_sublists for i in sub]
    assert len(held) == len(ids) - nulls * 300
    assert not any(id(i) in given for i in held)
    for key, id_ in zip(keys, ids):  # and every write path finds its entries
        assert built.holds(key, id_)
    built.remove(keys[0], ids[0])
    built.add(7.5, ids[0])
    reference.remove(keys[0], ids[0])
    reference.add(7.5, ids[0])
    assert list(built) == list(reference)


def test_a_text_keyed_ordered_index_keeps_the_tables_id_objects():
    """The rule is for number-keyed sort fields alone: a text field's index holds the ids given."""
    ids = [int(str(i)) for i in range(300, 1300)]
    keys = [f"t{random.Random(i).randint(0, 99):02d}" for i in ids]
    built = OrderedIndex.from_columns(keys, ids)
    assert list(built) == sorted(zip(keys, ids))
    given = {id(i) for i in ids}
    assert all(id(i) in given for sub in built.id_sublists for i in sub)


def _posts_store(tenant: str) -> None:
    """Users 1-3 and 900 posts with ids 300-1199 (past the small ints), scores with ties."""
    s = open_store(tenant)

    async def go():
        for i in (1, 2, 3):
            await s.insert("User", user(i))
        for i in range(300, 1200):
            await s.insert("BlogPost", post(i, author=1 + i % 3, score=float(i * 7 % 50)))

    try:
        run(go())
    finally:
        s.close()


def _score_ids(store) -> list:
    return [id_ for _key, id_ in store.tables["BlogPost"].ordered["score"]]


def test_indexes_opened_after_writes_and_after_a_compaction_agree_with_the_records(tenant):
    """An open that replays the log, one that reads the snapshot of a compaction, and the
    writes in between (an insert, a score moved, a delete, an author changed): every index
    agrees with the records, the score index yields (score, id) in order, and after the
    snapshot's open its ids are objects of its own while the author buckets hold the
    primary key's."""
    _posts_store(tenant)
    s = open_store(tenant)
    try:
        check_indexes(s)
        want = sorted((float(i * 7 % 50), i) for i in range(300, 1200))
        assert list(s.tables["BlogPost"].ordered["score"]) == want

        async def compact():
            await s.compact_now()

        run(compact())
    finally:
        s.close()
    s = open_store(tenant)
    try:
        table = s.tables["BlogPost"]
        check_indexes(s)
        assert list(table.ordered["score"]) == want
        base = {id(i) for i in table.pk}
        assert not any(id(i) in base for i in _score_ids(s))
        buckets = table.hashes["author_id"].buckets
        assert sorted(buckets) == [1, 2, 3]
        assert all(id(i) in base for bucket in buckets.values() for i in bucket)

        async def writes():
            await s.insert("BlogPost", post(1500, author=2, score=3.0))
            await s.replace("BlogPost", 400, post(400, author=3, score=49.5))
            await s.delete("BlogPost", 401)
            await s.compact_now()

        run(writes())
        check_indexes(s)
    finally:
        s.close()
    s = open_store(tenant)
    try:
        check_indexes(s)
        want = sorted(
            [(float(i * 7 % 50), i) for i in range(300, 1200) if i not in (400, 401)] + [(3.0, 1500), (49.5, 400)]
        )
        assert list(s.tables["BlogPost"].ordered["score"]) == want
        assert s.tables["BlogPost"].hashes["author_id"].buckets[3] == sorted(
            [i for i in range(300, 1200) if 1 + i % 3 == 3 and i != 401] + [400]
        )
    finally:
        s.close()
