"""Sort keys by id (storage/keycolumns.py, issue 36 item 1): every `@sort` field's id -> key
column agrees with the records after every kind of write, an undo, a bulk insert, an
online and an offline compaction and a reopen; a list that sorts a filter's bucket reads
only its page's records; `KeyColumn.order` is the reference order on every layout (ids in
the slots and far from them, string ids, nulls)."""

from __future__ import annotations

import asyncio
import sys
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.cursors import encode_cursor
from dbsvc.errors import UniqueViolation
from dbsvc.storage import rows
from dbsvc.storage.keycolumns import STEP, KeyColumn
from dbsvc.storage.tenants import compact_tenant
from support.storage import BLOG, open_store, post, user

POST = BLOG.BY_NAME["BlogPost"]


def check_columns(store) -> None:
    """Each sort field's column holds exactly the live ids, each with its record's key."""
    for table in store.tables.values():
        for field, index in table.ordered.items():
            column, key = index.column, table.keys[field]
            assert len(column) == len(table.live), f"{table.name}.{field}"
            for id_, record in table.records.items():
                want = None if record[field] is None else key(record[field])
                assert column.get(id_) == want, f"{table.name}.{field} of {id_!r}"
            assert column.nulls == {i for i, r in table.records.items() if r[field] is None}


async def write_some(store) -> None:
    for i in range(1, 6):
        await store.insert("User", user(None, email=f"k{i}@x", age=None if i % 2 else 20 + i))
    for i in range(1, 31):
        await store.insert("BlogPost", post(None, author=1 + i % 3, title=f"t{i % 7}", score=float(i % 5)))
    await store.replace("User", 2, user(2, email="k2@x", age=None))  # a key becomes null
    await store.replace("User", 1, user(1, email="k1@x", age=77))  # a null becomes a key
    await store.replace("BlogPost", 4, post(4, author=2, title="moved", score=9.5))
    await store.delete("BlogPost", 5)
    await store.delete("User", 5)


def test_key_columns_follow_inserts_replaces_and_deletes(tenant):
    async def main():
        store = open_store(tenant)
        try:
            await write_some(store)
            check_columns(store)
        finally:
            await store.aclose()

    asyncio.run(main())


def test_key_columns_are_restored_by_the_undo_of_a_refused_batch(tenant):
    async def main():
        store = open_store(tenant)
        try:
            await write_some(store)
            batch = store.begin_batch()
            batch.insert("BlogPost", post(None, author=1, title="new", score=3.25))
            batch.replace("User", 4, user(4, email="k4@x", age=None))
            batch.delete("BlogPost", 6)
            with pytest.raises(UniqueViolation):
                batch.insert("User", user(None, email="k1@x"))  # taken: the batch is refused
            batch.abort()
            check_columns(store)
            assert store.get("User", 4)[0]["age"] == 24
        finally:
            await store.aclose()

    asyncio.run(main())


def test_key_columns_survive_compaction_reopen_and_bulk_inserts(tenant, tmp_path):
    async def online():
        store = open_store(tenant)
        try:
            await write_some(store)
            await store.compact_now()
            await store.insert("BlogPost", post(None, author=3, title="after", score=None or 1.0))
            check_columns(store)
        finally:
            await store.aclose()

    asyncio.run(online())
    compact_tenant(str(tmp_path / "data"), "t")
    store = open_store(tenant)  # the snapshot's columns (Table.load_base)
    try:
        check_columns(store)
        # a batch at least as large as the table rebuilds its indexes in one sort each
        store.insert_batch([("BlogPost", post(None, author=1, title=f"b{i}", score=i / 3)) for i in range(200)])
        check_columns(store)
    finally:
        store.close()


def reads_of(store, pairs: list[tuple[str, str]]) -> tuple[list[dict], int, int]:
    """(the page, total, how many stored records were read for it): the real decoder's
    calls counted by a profile hook, nothing replaced."""
    reads = []

    def hook(frame, event, _arg):
        if event == "call" and frame.f_code is rows.unpack.__code__:
            reads.append(1)

    query = POST.parse_list_query(pairs)
    sys.setprofile(hook)
    try:
        page, total, _watermark, _more = store.list_page("BlogPost", query)
    finally:
        sys.setprofile(None)
    return page, total, len(reads)


@pytest.fixture
def posts(tenant):
    """300 posts, 60 of them by author 2, scores 0-100; reopened, so no record is
    remembered as a dict yet."""

    async def fill():
        store = open_store(tenant)
        await store.insert("User", user(None, email="a@x"))
        await store.insert("User", user(None, email="b@x"))
        for i in range(300):
            await store.insert("BlogPost", post(None, author=1 + (i % 5 == 0), score=float((i * 37) % 101)))
        await store.aclose()

    asyncio.run(fill())
    store = open_store(tenant)
    yield store
    store.close()


def test_ordering_a_bucket_reads_only_the_page(posts):
    """`author_id=X&sort=-score,title`: the bucket's 60 records are ordered by the score
    and title columns; only the page's 10 are read (issue 36 item 1)."""
    page, total, reads = reads_of(posts, [("author_id", "2"), ("sort", "-score,title"), ("limit", "10")])
    assert total == 60 and len(page) == 10
    scores = [r["score"] for r in posts.list_records("BlogPost", POST.parse_list_query([("author_id", "2")]))[0]]
    assert [r["score"] for r in page] == sorted(scores, reverse=True)[:10]
    assert reads == 10


def test_a_range_beside_a_filter_and_a_cursor_read_only_the_page(posts):
    """A range tested on a filter's bucket, and a cursor's place in a sort on two keys,
    take their keys from the columns: only the page is read."""
    page, total, reads = reads_of(posts, [("author_id", "2"), ("score__gte", "50"), ("limit", "5")])
    assert len(page) == 5 and all(r["score"] >= 50 and r["author_id"] == 2 for r in page)
    assert reads == 5 and total == sum(1 for i in range(0, 300, 5) if (i * 37) % 101 >= 50)
    first, _total, _reads = reads_of(posts, [("sort", "score,title"), ("limit", "3")])
    last = first[-1]
    cursor = encode_cursor("BlogPost", (("score", False), ("title", False)), [last["score"], last["title"]], last["id"])
    page, _total, reads = reads_of(posts, [("sort", "score,title"), ("limit", "4"), ("cursor", cursor)])
    assert len(page) == 4 and reads == 4
    assert (page[0]["score"], page[0]["title"], page[0]["id"]) > (last["score"], last["title"], last["id"])


# -- KeyColumn on its own ----------------------------------------------------------------


def reference(pairs: dict, desc: bool) -> list:
    """Ids by key (nulls last ascending, first descending), ties on the id ascending."""
    keyed = sorted((k, i) for i, k in pairs.items() if k is not None)
    nulls = sorted(i for i, k in pairs.items() if k is None)
    if desc:
        keyed.sort(key=lambda p: p[0], reverse=True)
        return nulls + [i for _k, i in keyed]
    return [i for _k, i in keyed] + nulls


IDS = st.one_of(st.integers(-5, 40), st.integers(10**9, 10**9 + 3), st.sampled_from([2 * STEP + 7, 5 * STEP]))


@settings(max_examples=150, deadline=None)
@given(
    typecode=st.sampled_from(["", "d", "q"]),
    entries=st.dictionaries(IDS, st.one_of(st.none(), st.integers(-3, 3)), max_size=40),
    dropped=st.sets(st.integers(0, 39), max_size=10),
    desc=st.booleans(),
)
def test_key_column_orders_ids_as_the_reference(typecode, entries, dropped, desc):
    cast = float if typecode == "d" else int
    pairs = {i: None if k is None else cast(k) for i, k in entries.items()}
    column = KeyColumn(typecode)
    for i, k in pairs.items():
        column.set(i, k)
    for position, i in enumerate(list(pairs)):
        if position in dropped:
            column.discard(i)
            del pairs[i]
    assert len(column) == len(pairs)
    assert all(column.get(i) == k for i, k in pairs.items())
    assert column.order(sorted(pairs), desc) == reference(pairs, desc)


@pytest.mark.parametrize("typecode", ["", "d", "q"])
@pytest.mark.parametrize("ids", [[1, 2, 3, 4], [0, 3, 9, 10], [5, 6, 7], [2, 9000, 9001]])
def test_key_column_from_columns_matches_one_set_at_a_time(typecode, ids):
    keys = [None if n % 3 == 1 else float(n % 4) if typecode == "d" else n % 4 for n in range(len(ids))]
    built = KeyColumn.from_columns(keys, ids, typecode)
    if None not in keys and typecode:
        assert KeyColumn.from_columns(array(typecode, keys), ids, typecode).slots == built.slots
    pairs = dict(zip(ids, keys))
    assert len(built) == len(ids) and built.nulls == {i for i, k in pairs.items() if k is None}
    assert all(built.get(i) == k for i, k in pairs.items())
    for desc in (False, True):
        assert built.order(ids, desc) == reference(pairs, desc)


def test_key_column_of_string_ids_holds_them_in_its_dict():
    column = KeyColumn.from_columns(["b", None, "a"], ["x", "y", "z"])
    assert column.far == {"x": "b", "y": None, "z": "a"} and len(column.slots) == 0
    assert column.order(["x", "y", "z"], False) == ["z", "x", "y"]
    column.discard("y")
    assert column.order(["x", "z"], True) == ["x", "z"] and column.nulls == set()


def test_an_as_of_list_reads_only_the_records_written_since_and_the_page(posts):
    """A list at a past watermark is the live plan without the records written since,
    merged with their records then: it reads those and the page, not every record."""
    watermark = posts.watermarks()["BlogPost"]

    async def later():
        await posts.replace("BlogPost", 1, post(1, author=2, score=100.0))  # stays in the bucket, on top now
        await posts.replace("BlogPost", 6, post(6, author=1, score=1.0))  # leaves it
        await posts.delete("BlogPost", 11)
        await posts.insert("BlogPost", post(None, author=2, score=99.5))

    asyncio.run(later())
    pairs = [("author_id", "2"), ("sort", "-score"), ("limit", "10"), ("as_of", str(watermark))]
    page, total, reads = reads_of(posts, pairs)
    then = [(i, float((i - 1) * 37 % 101)) for i in range(1, 301, 5)]  # post i was insert i - 1
    want = sorted(then, key=lambda p: (-p[1], p[0]))[:10]
    assert [(r["id"], r["score"]) for r in page] == want and total == 60
    assert reads <= 2 * 4 + 2 * (11 + 4)


def test_two_filters_over_many_candidates_agree_with_the_records(tenant):
    """Two filtered fields whose smallest bucket is past KEEPER_AT: the other is tested by
    its kept set, with the same matches, total and order as the records say."""

    async def fill():
        store = open_store(tenant)
        await store.insert("User", user(None, email="a@x"))
        await store.insert("User", user(None, email="b@x"))
        for i in range(400):
            await store.insert("BlogPost", post(None, author=1 + (i % 3 == 0), published=i % 5 < 2, score=i % 7))
        await store.aclose()

    asyncio.run(fill())
    store = open_store(tenant)
    try:
        records = store.table("BlogPost").records
        for pairs in ([("author_id", "2"), ("published", "true")], [("author_id", "1"), ("published", "false")]):
            want = sorted(
                i
                for i, r in records.items()
                if r["author_id"] == int(pairs[0][1]) and r["published"] == (pairs[1][1] == "true")
            )
            query = POST.parse_list_query([*pairs, ("limit", "1000")])
            page, total, _watermark, _more = store.list_page("BlogPost", query)
            assert [r["id"] for r in page] == want and total == len(want)
        assert min(sum(1 for r in records.values() if r["author_id"] == a) for a in (1, 2)) > 64
    finally:
        store.close()
