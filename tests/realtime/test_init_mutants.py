"""A live query's Init (dbsvc/realtime/init.py) at the unit where each decision is made: the
projection of its records, the state it reads (as of the last event observed, never the
store's newest), which events it keeps a state for (after its offset, not yet sent) and
where a slice ends (its records' JSON plus one comma each, against 64 KiB). Written for the
survivors of a mutation run (docs/mutation.md); a real store, no broker: the test shows
`observe` the events a broker would, or holds them back as a broker whose drain has not run
yet would."""

from __future__ import annotations

import json

from dbsvc.realtime.init import InitSlices
from dbsvc.storage.events import ChangeEvent
from support.realtime_kit import BLOG, open_blog_store, run

USER = BLOG.BY_NAME["User"]
JOINED = "2026-01-01T00:00:00Z"


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", "joined": JOINED, **over})


def payload(frame: bytes) -> bytes:
    """The text of a server's unmasked text frame."""
    assert frame[0] == 0x81
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def records(frame: bytes) -> list[dict]:
    return json.loads(payload(frame))["records"]


def init_of(store, projection: str | None = None) -> InitSlices:
    return InitSlices(store, USER, {}, projection, store.applied_offset, 100)


def recorded(store) -> list[ChangeEvent]:
    """The store's change stream from now on, as the broker would be handed it."""
    events: list[ChangeEvent] = []
    store.subscribe(lambda event, _frame: events.append(event))
    return events


def test_an_init_with_a_projection_sends_each_record_projected_in_its_field_order(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i))
        init = init_of(store, "card")
        frame = init.next_frame()
        assert init.done
        assert payload(frame) == (
            b'{"type":"Init","model":"User","records":[{"id":1,"name":"n1"},{"id":2,"name":"n2"}],'
            b'"watermark":2,"offset":2,"complete":true}'
        )
        store.close()

    run(body())


def test_an_init_reads_the_state_at_its_offset_past_a_write_not_yet_published(tmp_path):
    """A write applied after the Init's offset whose event the broker has not drained (its
    fsync in flight): the Init still shows the record as it was at the offset."""

    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i))
        init = init_of(store)
        await store.replace("User", 1, new_user(1, name="later"))
        assert [r["name"] for r in records(init.next_frame())] == ["n1", "n2"]
        store.close()

    run(body())


def test_an_observed_event_moves_the_read_point_to_its_watermark_and_no_further(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2, 3):
            await store.insert("User", new_user(i))
        init = init_of(store)
        events = recorded(store)
        await store.replace("User", 3, new_user(3, name="three"))
        await store.replace("User", 2, new_user(2, name="two"))  # applied, not yet observed
        init.observe(events[0])
        got = [r["name"] for r in records(init.next_frame())]
        assert got == ["n1", "n2", "n3"]  # 3 from the event's `previous`, 2 as of its watermark
        store.close()

    run(body())


def test_the_event_at_the_inits_own_offset_is_already_in_it(tmp_path):
    """The broker may still hold the event at the Init's offset when the Init is made (it is
    applied, not yet drained): observing it must not bring back the record before it."""

    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i))
        events = recorded(store)
        await store.replace("User", 1, new_user(1, name="now"))
        init = init_of(store)
        assert events[0].offset == init.offset == 3
        init.observe(events[0])
        assert [r["name"] for r in records(init.next_frame())] == ["now", "n2"]
        store.close()

    run(body())


def test_a_change_to_the_next_id_after_a_one_record_slice_keeps_its_state_at_the_offset(tmp_path):
    """The first slice holds one record (larger than a slice's 64 KiB): a change to the id
    right after it, the next to be sent, is kept; the change to the id already sent is not."""

    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1, profile={"pad": "x" * 70_000}))
        for i in (2, 3):
            await store.insert("User", new_user(i))
        init = init_of(store)
        events = recorded(store)
        assert [r["id"] for r in records(init.next_frame())] == [1]
        await store.replace("User", 2, new_user(2, name="two"))
        await store.replace("User", 1, new_user(1, name="one"))
        for event in events:
            init.observe(event)
        assert [r["name"] for r in records(init.next_frame())] == ["n2", "n3"]
        assert init.done
        store.close()

    run(body())


def user_of_json_length(i: int, length: int) -> dict:
    """User `i` whose stored record is exactly `length` bytes of compact JSON."""
    record = new_user(i, profile={"p": ""})
    shown = {**record, "id": i}
    pad = length - len(json.dumps(shown, separators=(",", ":")).encode())
    assert pad >= 0
    return {**record, "profile": {"p": "x" * pad}}


def first_slice_ids(store) -> list[int]:
    init = init_of(store)
    frame = init.next_frame()
    assert not init.done
    got = records(frame)
    assert all(len(json.dumps(r, separators=(",", ":"))) == len(json.dumps(got[0], separators=(",", ":"))) for r in got)
    return [r["id"] for r in got]


def test_a_slice_ends_once_its_records_and_commas_reach_64_kib(tmp_path):
    """255 bytes of JSON a record, plus its comma, is 256: the 256th record makes exactly
    65,536 bytes, and the slice ends with it."""

    async def body():
        store = open_blog_store(tmp_path)
        store.insert_batch([("User", user_of_json_length(i, 255)) for i in range(1, 301)])
        assert len(json.dumps(store.get("User", 300)[0], separators=(",", ":"))) == 255
        assert first_slice_ids(store) == list(range(1, 257))
        store.close()

    run(body())


def test_a_slice_one_byte_short_of_64_kib_takes_one_more_record(tmp_path):
    """256 bytes of JSON a record plus its comma: 255 records make 65,535 bytes, under the
    bound, so a 256th goes in the same slice."""

    async def body():
        store = open_blog_store(tmp_path)
        store.insert_batch([("User", user_of_json_length(i, 256)) for i in range(1, 301)])
        assert len(json.dumps(store.get("User", 300)[0], separators=(",", ":"))) == 256
        assert first_slice_ids(store) == list(range(1, 257))
        store.close()

    run(body())
