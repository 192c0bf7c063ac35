"""A group's plain inserts are checked and taken as a run (storage/followrun.py), and
anything a run's checks do not pass goes one frame at a time through the general path:
so a group, whatever it holds, ends exactly as its frames applied one at a time end. The
same exception with the same message at the same frame, the same rows committed before
it, the same records, versions, offsets, watermarks and `as_of` answers, and the same
store after a restart (its log holds exactly those frames)."""

from __future__ import annotations

import asyncio
import json

import pytest

from dbsvc.errors import EpochChanged, StreamError
from dbsvc.runtime import Query
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.tenants import create_tenant
from dbsvc.storage.versions import Versions
from support.storage import open_store, post, text, user


def _event(at: int, values: dict, **over) -> bytes:
    """The frame at offset `at` of an insert of `values`, with `over` in its payload."""
    event = {"kind": "insert", "model": "User", "offset": at, "watermark": at, "id": values["id"]}
    event["record"] = values
    event.update(over)
    return encode_frame(at, json.dumps(event, separators=(",", ":")).encode())


def _users(first: int, count: int) -> list[dict]:
    return [
        user(n, age=n % 7, name=f"user {n % 13}", joined=f"2026-01-01T00:00:{n % 60:02d}.{n:06d}Z")
        for n in range(first, first + count)
    ]


def _group(fault: str) -> list[bytes]:
    """40 frames of plain inserts after the 10 of `_warm`, with `fault` at the 25th."""
    frames = [_event(n, r) for n, r in enumerate(_users(11, 40), start=11)]
    at, offset = 24, 35
    record = user(35, age=3, joined="2026-01-01T00:00:01Z")
    frame = {
        "id taken": lambda: _event(offset, user(4)),
        "id twice in the run": lambda: _event(offset, user(20)),
        "id far ahead": lambda: _event(offset, user(10**6)),
        "id below the run": lambda: _event(offset, user(-5)),
        "str id": lambda: _event(offset, record | {"id": "a"}, id="a"),
        "event id differs": lambda: _event(offset, record, id=36),
        "watermark jump": lambda: _event(offset, record, watermark=1),
        "payload offset": lambda: _event(offset, record, offset=99),
        "bool offset": lambda: _event(offset, record, offset=True),
        "header offset": lambda: encode_frame(99, _event(offset, record)[16:]),
        "unknown model": lambda: _event(offset, record, model="Nope"),
        "other model": lambda: _event(
            offset,
            {"id": 1, "author_id": 11, "title": "t", "body": "b", "published": False, "score": 1.0, "tags": None},
            model="BlogPost",
            watermark=1,
            id=1,
        ),
        "missing field": lambda: _event(offset, {k: v for k, v in record.items() if k != "profile"}),
        "fields out of order": lambda: _event(offset, dict(reversed(list(record.items())))),
        "datetime key": lambda: _event(offset, record | {"joined": "2026-13-01T00:00:00Z"}),
        "int64 key": lambda: _event(offset, record | {"age": 2**63}),
        "new types, refused": lambda: _event(offset, record | {"age": 3.5}),
        "new types, good": lambda: _event(offset, record | {"age": None}),
        "a batch mark": lambda: _event(offset, record, batch={"first": 35, "last": 36}),
        "an update": lambda: _event(
            offset, user(5, name="renamed"), kind="update", previous=user(5), id=5, watermark=35
        ),
        "not JSON": lambda: encode_frame(offset, b'{"kind":"insert"'),
        "NaN": lambda: encode_frame(offset, _event(offset, record)[16:].replace(b'"age":3', b'"age":NaN')),
        "a float past the doubles": lambda: encode_frame(
            offset, _event(offset, record | {"profile": [1.5]})[16:].replace(b"1.5", b"-1e400")
        ),
        "a record that is a list": lambda: _event(offset, record, record=[35]),
        "no fault": lambda: frames[at],
    }[fault]()
    frames[at] = frame
    if fault == "other model":  # the users after it: User's watermark is one behind the offset
        frames[at + 1 :] = [_event(n, r, watermark=n - 1) for n, r in enumerate(_users(36, 15), start=36)]
    if fault == "a batch mark":  # the batch's last row follows
        frames[at + 1] = _event(36, _users(36, 1)[0], batch={"first": 35, "last": 36})
    return frames


FAULTS = [
    "id taken",
    "id twice in the run",
    "id far ahead",
    "id below the run",
    "str id",
    "event id differs",
    "watermark jump",
    "payload offset",
    "bool offset",
    "header offset",
    "unknown model",
    "other model",
    "missing field",
    "fields out of order",
    "datetime key",
    "int64 key",
    "new types, refused",
    "new types, good",
    "a batch mark",
    "an update",
    "not JSON",
    "NaN",
    "a float past the doubles",
    "a record that is a list",
    "no fault",
]


def _state(store) -> dict:
    users = store.list_records("User", Query(limit=1000))[0]
    return {
        "head": store.head_offset,
        "applied": store.applied_offset,
        "watermarks": store.watermarks(),
        "users": [(u, store.get_versioned("User", u["id"])[2]) for u in users],
        "by name": [u["id"] for u in store.list_records("User", Query(limit=1000, sort=(("name", True),)))[0]],
        "by joined": [u["id"] for u in store.list_records("User", Query(limit=1000, sort=(("joined", False),)))[0]],
        "by age": [u["id"] for u in store.list_records("User", Query(limit=1000, sort=(("age", False),)))[0]],
        "as_of 20": store.list_records("User", Query(limit=1000, as_of=20))[0],
    }


def _run(store, frames: list[bytes], grouped: bool) -> str | None:
    """Apply `frames` (as one group, or one at a time); the error's type and message."""

    async def main() -> str | None:
        try:
            if grouped:
                await store.apply_replicated_frames(frames)
            else:
                for frame in frames:
                    await store.apply_replicated(frame)
        except (StreamError, EpochChanged) as exc:
            while store.head_offset < store.applied_offset:  # the frames before it are committed
                await asyncio.sleep(0.001)
            return f"{type(exc).__name__}: {exc}"
        return None

    return asyncio.run(main())


def _warm() -> list[bytes]:
    return [_event(n, r) for n, r in enumerate(_users(1, 10), start=1)]


def _both_ways(tmp_path, frames: list[bytes], reopened: bool = False, teach: list[bytes] = ()) -> dict:  # noqa: ANN001 (pytest's tmp_path)
    """`frames` after `_warm()` (and after `teach`, taken the same way) into a fresh store
    taken as a group and one at a time: each way's (error, state), and with `reopened` the
    state a reopened store holds."""
    results = {}
    for way in ("grouped", "one at a time"):
        path = tmp_path / way.replace(" ", "-")
        store = open_store(create_tenant(str(path), "t"), sync="off", replication=True)
        try:
            assert _run(store, _warm(), grouped=True) is None
            if teach:
                assert _run(store, list(teach), grouped=way == "grouped") is None
            results[way] = (_run(store, frames, grouped=way == "grouped"), _state(store))
        finally:
            store.close()
        if reopened:
            again = open_store(str(path / "t"), sync="off", replication=True)
            try:
                results[way + " reopened"] = _state(again)
            finally:
                again.close()
    return results


@pytest.mark.parametrize("fault", FAULTS)
def test_a_group_ends_as_its_frames_one_at_a_time_end(tmp_path, fault):
    frames = _group(fault)
    results = _both_ways(tmp_path, frames, reopened=True)
    assert results["grouped"] == results["one at a time"]
    assert results["grouped reopened"] == results["one at a time reopened"] == results["grouped"][1]
    error, state = results["grouped"]
    if error is None:
        assert state["head"] == 50
    else:  # the 24 frames of the group before the fault are kept, nothing of it or after it
        assert state["head"] == 34 and state["applied"] == 34
    assert (error is None) == (
        fault
        in (
            "no fault",
            "new types, good",
            "id far ahead",
            "id below the run",
            "a batch mark",
            "an update",
            "other model",
        )
    )


@pytest.mark.parametrize(
    "fault, words",
    [
        ("NaN", "NaN is not valid JSON (RFC 8259 §6: numbers are finite)"),
        (
            "a float past the doubles",
            "the number -1e400 is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)",
        ),
    ],
)
def test_a_frame_the_strict_scanner_refuses_is_named_in_the_streams_error(tmp_path, fault, words):
    # followrun.py `FRAME_SCAN` (strictjson.py's scanner) refuses what no primary writes; its words are the
    # StreamError's, the operator's one clue to the frame, grouped or one at a time.
    results = _both_ways(tmp_path, _group(fault))
    expected = f"StreamError: replication frame at offset 35: payload is not JSON: {words}"
    assert results["grouped"][0] == results["one at a time"][0] == expected


def test_a_run_of_new_ids_in_order_is_one_run_of_the_table(tmp_path):
    # Two groups of plain inserts, the second's ids after the first's: a replica that
    # restarts between them, or not, holds the same records, versions and index orders.
    store = open_store(create_tenant(str(tmp_path / "r"), "t"), sync="off", replication=True)
    try:
        assert _run(store, _warm(), grouped=True) is None
        assert _run(store, [_event(n, r) for n, r in enumerate(_users(11, 40), start=11)], grouped=True) is None
        state = _state(store)
    finally:
        store.close()
    assert state["head"] == 50 and [v for _u, v in state["users"]] == list(range(1, 51))
    assert state["by joined"] == sorted(range(1, 51), key=lambda n: (n % 60, n))


@pytest.mark.parametrize(
    "held, ids",
    [
        ([], [0, 1, 2]),  # from the empty array's end
        ([], [1, 2, 3]),  # a gap first: one at a time
        ([1, 2], [3, 4, 5]),  # from the end: one extend
        ([1, 2], [3, 5]),  # a gap
        ([1, 2], [2, 3]),  # one of them held
        ([1, 10**6], [3, 4]),  # a far id held
        ([1, 2], [10**6, 10**6 + 1]),  # far
        ([1, 2], ["a", "b"]),
        ([1, 2], [True, 4]),
    ],
)
def test_versions_of_a_run_are_set_as_one_at_a_time(held, ids):
    one, run = Versions(), Versions()
    for n, id_ in enumerate(held, start=1):
        one.set(id_, n)
        run.set(id_, n)
    offsets = list(range(100, 100 + len(ids)))
    for id_, offset in zip(ids, offsets):
        one.set(id_, offset)
    run.set_run(ids, offsets)
    probe = [*held, *ids, 0, 7, 10**6 + 2, "c"]
    assert [run.get(i) for i in probe] == [one.get(i) for i in probe] and len(run) == len(one)


def _update(at: int, values: dict, **over) -> bytes:
    """The frame at offset `at` of an update to `values` (its watermark: `at`, all Users)."""
    return _event(at, values, kind="update", previous=user(values["id"]), **over)


def _updates(fault: str) -> list[bytes]:
    """40 updates after the 10 inserts of `_warm` (ids 1-10, each updated 4 times), with
    `fault` at the 25th (offset 35)."""
    frames = [_update(n, user((n - 11) % 10 + 1, name=f"name {n}", age=n % 9)) for n in range(11, 51)]
    at, offset = 24, 35
    record = user(5, name="renamed", age=3, joined="2026-01-01T00:00:01Z")
    frame = {
        "no fault": lambda: frames[at],
        "id absent": lambda: _update(offset, user(99)),
        "unhashable id": lambda: _update(offset, record | {"id": [5]}, id=[5]),
        "event id differs": lambda: _update(offset, record, id=6),
        "watermark jump": lambda: _update(offset, record, watermark=1),
        "payload offset": lambda: _update(offset, record, offset=99),
        "header offset": lambda: encode_frame(99, _update(offset, record)[16:]),
        "fields out of order": lambda: _update(offset, dict(reversed(list(record.items())))),
        "datetime key": lambda: _update(offset, record | {"joined": "2026-13-01T00:00:00Z"}),
        "new types, good": lambda: _update(offset, record | {"age": None}),
        "new types, refused": lambda: _update(offset, record | {"age": 3.5}),
        "previous null": lambda: _event(offset, record, kind="update", previous=None),
        "no previous": lambda: _event(offset, record, kind="update"),
        "a delete": lambda: _event(offset, user(5), kind="delete"),
    }[fault]()
    frames[at] = frame
    if fault == "a delete":  # the rows after it update the others
        frames[at + 1 :] = [_update(n, user(6 + n % 4, name=f"name {n}")) for n in range(36, 51)]
    return frames


UPDATE_FAULTS = [
    "no fault",
    "id absent",
    "unhashable id",
    "event id differs",
    "watermark jump",
    "payload offset",
    "header offset",
    "fields out of order",
    "datetime key",
    "new types, good",
    "new types, refused",
    "previous null",
    "no previous",
    "a delete",
]


@pytest.mark.parametrize("fault", UPDATE_FAULTS)
def test_a_group_of_updates_ends_as_its_frames_one_at_a_time_end(tmp_path, fault):
    frames = _updates(fault)
    results = _both_ways(tmp_path, frames, reopened=True)
    assert results["grouped"] == results["one at a time"]
    assert results["grouped reopened"] == results["one at a time reopened"] == results["grouped"][1]
    error, state = results["grouped"]
    assert state["head"] == (50 if error is None else 34)
    assert (error is None) == (fault in ("no fault", "new types, good", "previous null", "no previous", "a delete"))


# A frame of a group of plain inserts spelled otherwise than a primary spells it: the
# group is not read from its records alone (followrun.py rule 5) and ends as its frames
# one at a time end, taken or refused.
SPELLINGS = {
    "a space after a colon": ('"kind":"insert"', '"kind": "insert"'),
    "keys in another order": ('"watermark":35,"id":35', '"id":35,"watermark":35'),
    "an id of 35.0": ('"id":35,"record"', '"id":35.0,"record"'),
    "an event id that differs": ('"id":35,"record"', '"id":36,"record"'),
    "an escaped model name": ('"User"', '"Us\\u0065r"'),
    "space before the end": ("}}", "} }"),
    "a key after the record": ("}}", '},"x":1}'),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_group_spelled_otherwise_ends_as_its_frames_one_at_a_time_end(tmp_path, spelling):
    frames = _group("no fault")
    old, new = SPELLINGS[spelling]
    payload = frames[24][16:].decode()
    assert payload.count(old) == 1
    frames[24] = encode_frame(35, payload.replace(old, new).encode())
    results = _both_ways(tmp_path, frames)
    assert results["grouped"] == results["one at a time"]


def test_a_whole_group_into_a_model_the_replica_does_not_know_is_refused_as_one_frame_is(tmp_path):
    # follow.py `_take_inserts`: a group spelled as a primary's plain inserts into one model
    # this replica's schema lacks (a primary with a newer schema) is left to the general
    # path, which refuses its first frame; never taken as applied with nothing applied
    # (docs/mutation.md, "... session 12, wt-mpo2")
    frames = [_event(n, r, model="Nope") for n, r in enumerate(_users(11, 3), start=11)]
    results = _both_ways(tmp_path, frames)
    assert results["grouped"] == results["one at a time"]
    error, state = results["grouped"]
    assert error is not None and "Nope" in error and state["head"] == 10


# A group of plain inserts in a primary's spelling keeps each record's text as its frame
# carried it (followrun.py rule 6) when that text is exactly what this store writes for
# the record; otherwise the records are packed from their values. Either way the stored
# records, and so a compaction's snapshot, are byte for byte the old path's.
EPOCH = "e" * 32


def _spelled(at: int, watermark: int, model: str, id_: int, record: str) -> bytes:
    """An insert's frame as a primary spells it (events.py `ChangeEvent.frame`), its record's text `record`."""
    head = f'{{"kind":"insert","model":"{model}","offset":{at},"watermark":{watermark},"id":{id_},"record":'
    return encode_frame(at, (head + record + "}").encode())


def _posts(records: list[str], before: int = 0) -> list[bytes]:
    """BlogPost inserts of ids 1 on, their records' texts `records`, after `_warm`'s ten
    users and `before` posts: at offsets 11 + `before` on."""
    return [_spelled(10 + before + n, before + n, "BlogPost", n, r) for n, r in enumerate(records, start=1)]


def _post_text(n: int, **over) -> str:
    return text(post(n, author=n % 10 + 1, title=f"title {n}", score=n / 8, **over))


# One post taken alone after `_warm` (a lone frame goes the general path, whose validator
# teaches the store the value types of `_post_text`'s records, followrun.py rule 4), so
# that a group of such posts after it is a run. What a store learned is its own
# (`Table.fit`): each fresh store is taught again.
TEACH_POST = _spelled(11, 1, "BlogPost", 41, _post_text(41))


def _stored(tmp_path, frames: list[bytes], way: str) -> dict:  # noqa: ANN001 (pytest's tmp_path)
    """`frames` after `_warm()` and `TEACH_POST` into a fresh replica store (as a group, or
    one at a time), then compacted at its head: the error, the records of `frames` kept as
    their frames carried them, the snapshot file's bytes, and the records a reopened store reads."""
    path = tmp_path / way.replace(" ", "-")
    store = open_store(create_tenant(str(path), "t"), sync="off", replication=True)
    try:
        assert _run(store, _warm(), grouped=True) is None
        assert _run(store, [TEACH_POST], grouped=False) is None
        warm = store.stats()["kept_texts"]
        error = _run(store, frames, grouped=way == "grouped")

        async def compact() -> None:
            await store.compact_at(EPOCH, store.applied_offset)

        asyncio.run(compact())
        kept = store.stats()["kept_texts"] - warm
        before = {m: store.list_records(m, Query(limit=1000))[0] for m in ("User", "BlogPost")}
    finally:
        store.close()
    with open(path / "t" / SNAPSHOT_NAME, "rb") as file:
        snapshot = file.read()
    again = open_store(str(path / "t"), sync="off", replication=True)
    try:
        after = {m: again.list_records(m, Query(limit=1000))[0] for m in ("User", "BlogPost")}
    finally:
        again.close()
    assert after == before
    return {"error": error, "kept": kept, "snapshot": snapshot, "records": after}


def test_a_primarys_group_is_stored_as_its_frames_carry_it_byte_for_byte(tmp_path):
    # A real primary's frames: users and posts with every kind of value a record holds
    # (null, bool, -0.0, 1e300, a float's shortest spelling, non-ASCII as it is, a json
    # field with floats and escapes inside it), in one group a model. The first round's
    # records are of value types new to the replica, so they go one at a time (followrun.py
    # rule 1); the second round's, of the same types, are whole runs.
    names = ["café", "ünïcödé 名前", "plain", "tab\there", 'say "hi"', "back\\slash", "\u2028 sep", "x" * 90]
    scores = [0.0, -0.0, 1e300, 0.1, 1.5, 123456789.125, 5e-324, 2.0**60]
    tags = [None, [], ["a", "b"], {"k": [1, 2.5, None, True]}, {"é": "\n"}, [{"x": 1e-7}], "s", 3]

    async def main(primary) -> None:
        for first in (1, 41):
            for i in range(first, first + 40):
                await primary.insert("User", user(i, name=names[i % 8], age=i % 5 or None, profile=tags[i % 8]))
            for i in range(first, first + 40):
                over = {"title": names[i % 8], "score": scores[i % 8], "tags": tags[(i + 3) % 8]}
                await primary.insert("BlogPost", post(i, author=i, **over, published=i % 2 == 0))
        frames.extend(primary.frames_after(0))
        await primary.compact_at(EPOCH, primary.applied_offset)

    primary = open_store(create_tenant(str(tmp_path / "p"), "t"), sync="off", replication=True)
    frames: list[bytes] = []
    try:
        asyncio.run(main(primary))
        records = {m: primary.list_records(m, Query(limit=1000))[0] for m in ("User", "BlogPost")}
    finally:
        primary.close()
    with open(tmp_path / "p" / "t" / SNAPSHOT_NAME, "rb") as file:
        snapshot = file.read()
    assert len(frames) == 160
    replicas = {}
    for way in ("grouped", "one at a time"):
        path = tmp_path / way.replace(" ", "-")
        store = open_store(create_tenant(str(path), "t"), sync="off", replication=True)
        try:
            for at in range(0, 160, 40):  # one model a group: a whole group of plain inserts
                group = frames[at : at + 40]
                assert _run(store, group, grouped=way == "grouped") is None

            async def compact() -> None:
                await store.compact_at(EPOCH, store.applied_offset)

            asyncio.run(compact())
            replicas[way] = store.stats()["kept_texts"]
        finally:
            store.close()
        with open(path / "t" / SNAPSHOT_NAME, "rb") as file:
            assert file.read() == snapshot, way
        again = open_store(str(path / "t"), sync="off", replication=True)
        try:
            assert {m: again.list_records(m, Query(limit=1000))[0] for m in ("User", "BlogPost")} == records
        finally:
            again.close()
    assert replicas == {"grouped": 80, "one at a time": 0}


def test_each_store_learns_its_value_types_alone_and_counts_its_own_kept_texts(tmp_path):
    # Two replica stores of one schema, open together in one process (they share its compiled
    # models), each given the same two groups of posts. A store's first group is of value
    # types new to it, so it goes one frame at a time (followrun.py rule 1) and keeps no
    # text; its second, of the same types, is one run and keeps all 40 (rule 6). What the
    # first store learned is its own (`Table.fit`): the second's first group is new to it too.
    first = _posts([_post_text(n) for n in range(1, 41)])
    second = [_spelled(10 + n, n, "BlogPost", n, _post_text(n)) for n in range(41, 81)]
    stores = {
        name: open_store(create_tenant(str(tmp_path / name), "t"), sync="off", replication=True) for name in ("a", "b")
    }
    kept: dict[str, list[int]] = {"a": [], "b": []}
    try:
        for name, store in stores.items():
            assert _run(store, _warm(), grouped=True) is None
            for group in (first, second):
                assert _run(store, group, grouped=True) is None
                kept[name].append(store.stats()["kept_texts"])
    finally:
        for store in stores.values():
            store.close()
    assert kept == {"a": [0, 40], "b": [0, 40]}


# The 25th post's record text (offset 36, after `TEACH_POST`) spelled otherwise: `True` when it is still
# exactly the text this store writes (the run keeps its frames' texts), `False` when the
# run must pack its records (or, for the records the run's checks refuse, go one frame
# at a time).
POST_SPELLINGS = {
    "as written": (lambda t: t, True),
    "non-ASCII as it is": (lambda t: t.replace('"title 25"', '"café 25"'), True),
    "1e300 spelled as repr does": (lambda t: t.replace('"score":3.125', '"score":1e+300'), True),
    "escapes this store writes": (lambda t: t.replace('"body":"body"', '"body":"a\\"b\\\\c\\n\\u001f"'), True),
    "an escaped é": (lambda t: t.replace('"title 25"', '"caf\\u00e9 25"'), False),
    "an escaped /": (lambda t: t.replace('"title 25"', '"a\\/b"'), False),
    "an escape in upper case": (lambda t: t.replace('"body":"body"', '"body":"\\u001F"'), False),
    "a space after a colon": (lambda t: t.replace('"score":', '"score": '), False),
    "a space before the end": (lambda t: t[:-1] + " }", False),
    "keys in another order": (
        lambda t: t.replace('"body":"body","published":false', '"published":false,"body":"body"'),
        False,
    ),
    "3.125 as 3.1250": (lambda t: t.replace('"score":3.125', '"score":3.1250'), False),
    "1e300 as written by hand": (lambda t: t.replace('"score":3.125', '"score":1e300'), False),
    "1.0 as 1": (lambda t: t.replace('"score":3.125', '"score":1'), False),
    "1 as 1.0": (lambda t: t.replace('"author_id":6', '"author_id":6.0'), False),
    "-0 for 0": (lambda t: t.replace('"tags":null', '"tags":-0'), False),
    "a json field spaced": (lambda t: t.replace('"tags":null', '"tags":[1, 2]'), False),
    "a key twice": (lambda t: t.replace('"body":"body"', '"body":"x","body":"body"'), False),
    "an extra field": (lambda t: t[:-1] + ',"extra":1}', False),
    "a missing field": (lambda t: t.replace(',"tags":null', ""), False),
}


@pytest.mark.parametrize("spelling", sorted(POST_SPELLINGS))
def test_a_record_spelled_otherwise_is_packed_and_stored_as_before(tmp_path, spelling):
    respell, kept = POST_SPELLINGS[spelling]
    records = [_post_text(n) for n in range(1, 41)]
    assert records[24].count('"score":3.125') == 1 and records[24].count('"author_id":6,') == 1
    records[24] = respell(records[24])
    assert kept == (spelling == "as written") or records[24] != _post_text(25)
    results = {way: _stored(tmp_path, _posts(records, before=1), way) for way in ("grouped", "one at a time")}
    grouped, alone = results["grouped"], results["one at a time"]
    assert grouped["snapshot"] == alone["snapshot"] and grouped["records"] == alone["records"]
    assert grouped["error"] == alone["error"]
    assert alone["kept"] == 0
    assert grouped["kept"] == (40 if kept else 0)
    if kept:
        assert grouped["error"] is None and len(grouped["records"]["BlogPost"]) == 40 + 1  # and TEACH_POST
