"""Every `ChangeEvent` a write or a replica's apply publishes holds all of its fields.

The hot paths build the named tuple by `tuple.__new__(ChangeEvent, (...))` with every field
by position (storage/writes.py `_event`, storage/followrun.py's runs): one field added to
`ChangeEvent` with a default and not to those tuples would give events one item short,
whose new attribute raises IndexError, and nothing else would say so. Through a real store
on disk and its public `subscribe` (session 18, wt-tidy)."""

from __future__ import annotations

from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, run, user


def whole(events: list[ChangeEvent]) -> list[ChangeEvent]:
    """The events that lack a field (an empty list when each is whole)."""
    return [event for event in events if len(event) != len(ChangeEvent._fields)]


def test_a_primarys_insert_replace_and_delete_publish_whole_events(tmp_path):
    store = open_store(create_tenant(str(tmp_path / "data"), "t"))
    events: list[ChangeEvent] = []
    try:
        store.subscribe(lambda event, frame: events.append(event))

        async def writes() -> None:
            await store.insert("User", user(1))
            await store.replace("User", 1, user(1, name="renamed"))
            await store.delete("User", 1)

        run(writes())
    finally:
        store.close()
    assert [event.kind for event in events] == [EventKind.INSERT, EventKind.UPDATE, EventKind.DELETE]
    assert whole(events) == []
    assert [event._asdict()["batch"] for event in events] == [None, None, None]


def test_a_replicas_runs_publish_whole_events(tmp_path):
    frames = [ChangeEvent(EventKind.INSERT, "User", n, n, n, user(n)).frame() for n in range(1, 7)]
    for offset, id_ in ((7, 2), (8, 3)):
        frames.append(
            ChangeEvent(EventKind.UPDATE, "User", offset, offset, id_, user(id_, name="renamed"), user(id_)).frame()
        )
    store = open_store(create_tenant(str(tmp_path / "replica"), "t"), replication=True)
    events: list[ChangeEvent] = []
    try:
        store.subscribe(lambda event, frame: events.append(event))

        async def apply() -> None:
            # The first record of a model takes the general path (its validator runs once,
            # followrun.py rule 1); the groups after it are runs, built by `tuple.__new__`.
            await store.apply_replicated_frames(frames[:1])
            await store.apply_replicated_frames(frames[1:6])  # a run of inserts
            await store.apply_replicated_frames(frames[6:])  # a run of updates

        run(apply())
    finally:
        store.close()
    assert [event.offset for event in events] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert whole(events) == []
