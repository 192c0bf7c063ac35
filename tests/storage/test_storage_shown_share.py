"""The record cache past its floor (storage/shown.py `budget`): a table's cache keeps more
than `capacity` entries while their weight stays under SHOWN_SHARE bytes a live record
of the table, evicts the oldest down to that share, and whatever it keeps, every page it
answers is the records as they are: the same bytes as the records' own JSON, through
updates and deletes inside a page, inserts between pages, pages of dicts (as a projection
asks), `as_of` pages and cursors. A floor of a few entries (SHOWN patched before the
store opens) puts a small table's cache where a 1,000,000-record table's is: full, past
its floor, every new record weighed (issue 36 item 2, wt-pack). Before the budget, the
floor was the cache's size: `test_a_cache_past_its_floor_keeps_what_its_share_allows`
fails there (the cache stays at its floor)."""

from __future__ import annotations

import json
import random

from dbsvc.runtime import Query, compact_json
from dbsvc.storage import Store, shown
from dbsvc.storage.shown import ShownDicts, weight
from dbsvc.storage.tenants import create_tenant
from support.shownkit import FIELDS, decoded, stored
from support.storage import open_store, run, user


def test_a_cache_past_its_floor_keeps_what_its_share_allows():
    """Dicts kept past `capacity` (each from its second read) while their weight is under
    the share of the table's records; then each new one evicts the oldest, and the weight
    stays within one entry of the share."""
    records = [1]  # the table's count, as `sized` reads it
    dicts = ShownDicts(decoded, capacity=2, window=64, fields=FIELDS, id_field="id", sized=lambda: records[0])
    each = weight((stored(10), {}))  # ids 10-99: the same weight each

    def twice(ids) -> None:  # noqa: ANN001 (ids)
        for i in ids:
            for _ in range(2):
                dicts.one(i, stored(i))

    twice(range(10, 18))
    assert len(dicts.ids) == 2 and dicts.weighs == 2 * each  # 1 record allows 128 bytes: the floor only
    records[0] = 200  # the table grew: 25,600 bytes allow as many entries as weigh less
    twice(range(20, 80))
    allowed = -(-shown.SHOWN_SHARE * 200 // each)  # admitted while under: the last one crosses it
    kept = list(dicts.ids)
    assert len(kept) == allowed and kept[-1] == 79 and dicts.weighs == allowed * each


def test_a_dict_asked_alone_is_kept_past_the_floor_from_its_second_read():
    """A GET's dict (`one`) past `capacity` is refused on its first read however light the
    cache, and kept from its second; a page with texts keeps nothing and refuses nothing."""
    dicts = ShownDicts(decoded, capacity=1, window=64, fields=FIELDS, id_field="id", sized=lambda: 1000)
    first = stored(1)
    dicts.one(1, first)
    record = stored(2)
    assert dicts.one(2, record) == {"id": 2, "name": "r2"} and list(dicts.ids) == [1] and dicts.refused == 1
    dicts.one(2, record)
    assert list(dicts.ids) == [1, 2]
    dicts.page([3], [stored(3)], texts=True, keyed=False)
    assert list(dicts.ids) == [1, 2] and dicts.refused == 1


def test_the_weight_follows_every_entry_and_returns_to_nothing():
    """Dicts kept by pages, records replaced, made too long to keep, and forgotten: the
    summed weight is the kept entries' all along."""
    dicts = ShownDicts(decoded, capacity=4, window=64, fields=FIELDS, id_field="id", sized=lambda: 1000)
    kept = {i: stored(i) for i in range(1, 5)}  # an entry is found by its stored record's identity
    dicts.page([1, 2, 3, 4], [kept[1], kept[2], kept[3], kept[4]])
    assert dicts.weighs == sum(weight((kept[i], {})) for i in (1, 2, 3, 4))
    dicts.page([1, 2], [kept[1], kept[2]], texts=True)  # nothing kept, nothing weighed
    assert dicts.weighs == sum(weight((kept[i], {})) for i in (1, 2, 3, 4))
    dicts.remember(1, stored(1, "new"), {"id": 1, "name": "new"})
    dicts.remember(3, b'{"id":3,"name":%s}' % json.dumps("x" * 5000).encode(), {"id": 3, "name": "x" * 5000})
    assert sorted(dicts.ids) == [1, 2, 4]
    assert dicts.weighs == weight((stored(1, "new"), {})) + weight((kept[2], {})) + weight((kept[4], {}))
    for i in (1, 2, 4):
        dicts.forget(i)
    assert dicts.weighs == 0 and not dicts.ids


def test_pages_past_the_floor_are_the_records_as_they_are(tmp_path, monkeypatch):
    """A primary and its follower whose caches' floor is 3 entries, so that their pages of
    60 users mostly come from records kept past the floor or evicted from it, asked at
    random offsets and cursors in id order with texts, as dicts, and as of an earlier
    watermark, with writes between them (a follower's replicated updates leave its kept
    entries as they were: only the identity test tells them stale): each record is its own
    JSON, byte for byte, and each page the reference's."""
    monkeypatch.setattr(shown, "SHOWN", 3)
    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), sync="off")
    follower = open_store(create_tenant(str(tmp_path / "f"), "t"), sync="off")
    frames: list[bytes] = []
    primary.subscribe(lambda _event, frame: frames.append(bytes(frame)))
    rng = random.Random(36)
    ref: dict[int, dict] = {}
    history: list[dict[int, dict]] = []

    def check(store: Store, query: Query, texts: bool, state: dict[int, dict]) -> None:
        records, total, _watermark, more = store.list_page("User", query, texts=texts)
        ids = sorted(i for i in state if query.cursor is None or i > query.cursor[1])
        want = ids[query.offset : query.offset + query.limit]
        assert total == len(ids if query.cursor is None else state)
        got = [r if type(r) is bytes else getattr(r, "text", None) or compact_json(r).encode() for r in records]
        assert got == [compact_json(state[i]).encode() for i in want], (query, texts)
        assert more == (query.offset + len(want) < len(ids))
        if records and more:  # the Link reads the last record's id
            assert records[-1]["id"] == want[-1]

    async def write(kind: str, i: int) -> None:
        if kind == "insert":
            await primary.insert("User", ref[i])
        elif kind == "replace":
            await primary.replace("User", i, ref[i])
        else:
            await primary.delete("User", i)
        history.append(dict(ref))
        await follower.apply_replicated_frames(frames[follower.applied_offset :])

    async def go() -> None:
        for i in range(1, 61):
            ref[i] = user(i, name=f"n{i}")
            await write("insert", i)
        for step in range(240):
            if step % 3 == 1:  # an update inside the pages just asked
                i = rng.choice(sorted(ref))
                ref[i] = user(i, name=f"m{step}", age=step % 100)
                await write("replace", i)
            elif step % 11 == 5 and len(ref) > 20:  # a delete inside them
                i = rng.choice(sorted(ref))
                del ref[i]
                await write("delete", i)
            elif step % 13 == 7:  # an insert past the last id
                i = max(ref) + 1
                ref[i] = user(i, name=f"new{step}")
                await write("insert", i)
            at = rng.randrange(0, 60)
            cursor = rng.randrange(0, 70)
            when = rng.randrange(60, len(history) + 1)
            for store in (primary, follower):
                check(store, Query(limit=20, offset=at), True, ref)
                check(store, Query(limit=20, offset=at), False, ref)  # dicts, as a projection's page asks
                check(store, Query(limit=20, cursor=((), cursor)), True, ref)
                check(store, Query(limit=20, offset=at, as_of=when), False, history[when - 1])
        for store in (primary, follower):
            table = store.table("User")
            assert len(table.dicts.ids) > 3  # past its floor
        # kept entries gain their dict or JSON when first asked, and a delete lowers the
        # share: a new record evicts the oldest down to it again
        i = max(ref) + 1
        ref[i] = user(i)
        await primary.insert("User", ref[i])
        table = primary.table("User")
        assert table.dicts.weighs - weight((table.live[i], {}, None)) <= table.dicts.budget

    try:
        run(go())
    finally:
        primary.close()
        follower.close()
