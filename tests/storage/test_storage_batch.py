"""The store's atomic batch (storage/batchwrite.py, issue 35): ops checked against the state
the earlier ops leave, one durable group, undone whole on a refusal, and a log cut inside a
batch reopening with all of it or none (recovery.py, logfile.py rule 5). A closed store is
dropped (`del`) before the next open: an open freezes what is alive (recovery.py
`gc.freeze`), and the cut tests' stores outlived them frozen."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile

import pytest

from dbsvc.errors import ForeignKeyViolation, NotFound, Referenced, UniqueViolation
from dbsvc.runtime import Query
from dbsvc.storage.logfile import HEADER_SIZE, LogScan, frame_offset
from dbsvc.storage.tenants import create_tenant
from support.storage import check_indexes, open_store, post, user

ALL = Query(limit=10**9)
MODELS = ("User", "BlogPost", "Comment")


def state(store) -> dict:
    return {m: {r["id"]: r for r in store.list_records(m, ALL)[0]} for m in MODELS}


def batch_of(store, ops) -> asyncio.Future:
    """Run `ops` ((method, args) pairs) as one batch; aborted and re-raised on a refusal."""
    batch = store.begin_batch()
    try:
        for method, args in ops:
            getattr(batch, method)(*args)
    except BaseException:
        batch.abort()
        raise
    return batch.commit()


def test_batch_checks_each_op_against_the_earlier_ones_and_commits_one_group(tenant):
    async def main():
        store = open_store(tenant)
        try:
            durable = batch_of(
                store,
                [
                    ("insert", ("User", user(None, email="a@x"))),
                    ("insert", ("BlogPost", post(None, author=1))),
                    ("replace", ("BlogPost", 1, post(1, author=1, title="moved"))),
                ],
            )
            fsyncs = store.commit_queue.stats.fsyncs
            await durable
            assert store.commit_queue.stats.fsyncs == fsyncs + 1
            assert store.head_offset == 3
            assert store.get("BlogPost", 1)[0]["title"] == "moved"
        finally:
            await store.aclose()

    asyncio.run(main())
    with open(os.path.join(tenant, "log"), "rb") as f:
        scan = LogScan("log", f.read())
    marks = [json.loads(p)["batch"] for _o, p in scan.records()]
    assert marks == [{"first": 1, "last": 3}] * 3


@pytest.mark.parametrize(
    "bad, error",
    [
        (("insert", ("User", user(None, email="taken@x"))), UniqueViolation),
        (("insert", ("BlogPost", post(None, author=99))), ForeignKeyViolation),
        (("replace", ("User", 42, user(42))), NotFound),
        (("delete", ("User", 2)), Referenced),  # op 1 made user 2 a parent
    ],
)
def test_a_refused_op_undoes_the_whole_batch(tenant, bad, error):
    async def main():
        store = open_store(tenant)
        try:
            await store.insert("User", user(None, email="taken@x"))
            await store.insert("BlogPost", post(None, author=1))
            before, head = state(store), store.head_offset
            ops = [
                ("insert", ("User", user(None, email="new@x"))),
                ("replace", ("BlogPost", 1, post(1, author=2, title="changed"))),
                bad,
            ]
            with pytest.raises(error):
                batch_of(store, ops)
            assert state(store) == before
            assert store.head_offset == head
            check_indexes(store)
            # The next write takes the next offset and the next automatic id.
            await store.insert("User", user(None, email="later@x"))
            assert store.head_offset == head + 1
            assert store.get("User", 2)[0]["email"] == "later@x"
        finally:
            await store.aclose()

    asyncio.run(main())


def _write_batches(tenant: str) -> list[tuple[int, dict]]:
    """A single write, a batch of four, a single write; the state after each boundary."""

    async def main():
        store = open_store(tenant)
        boundaries = [(0, state(store))]
        try:
            await store.insert("User", user(None, email="one@x"))
            boundaries.append((store.head_offset, state(store)))
            await batch_of(
                store,
                [
                    ("insert", ("User", user(None, email="two@x"))),
                    ("insert", ("BlogPost", post(None, author=2))),
                    ("replace", ("User", 1, user(1, email="one@x", name="renamed"))),
                    (
                        "insert",
                        (
                            "Comment",
                            {"id": None, "post_id": 1, "author_id": 1, "body": "c", "created": "2026-01-01T00:00:00Z"},
                        ),
                    ),
                ],
            )
            boundaries.append((store.head_offset, state(store)))
            await store.delete("Comment", 1)
            boundaries.append((store.head_offset, state(store)))
        finally:
            await store.aclose()
        return boundaries

    return asyncio.run(main())


@pytest.fixture
def scratch(tmp_path):
    """A directory in memory when there is one: a thousand opens' fsyncs cost nothing there."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="dbsvc-batch-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


def _frame_cuts(image: bytes) -> list[int]:
    """Cut positions: each frame's first, second and last byte, and the header's end of the
    next frame (every way a frame can be torn, at a quarter of the cost of every byte)."""
    starts = [HEADER_SIZE]
    walk = LogScan("log", image)
    for _offset, _payload in walk.records():
        starts.append(walk.end)
    cuts = set()
    for start, end in zip(starts, starts[1:] + [len(image)]):
        cuts.update((start, start + 1, start + 16, end - 1))
    cuts.add(len(image))
    return sorted(c for c in cuts if HEADER_SIZE <= c <= len(image))


def _check_cuts(tenant: str, scratch: str, cuts_of) -> None:
    boundaries = dict(_write_batches(tenant))
    with open(os.path.join(tenant, "log"), "rb") as f:
        image = f.read()
    work = os.path.join(scratch, "cut")
    shutil.copytree(tenant, work, ignore=shutil.ignore_patterns("LOCK"))
    for cut in cuts_of(image):
        with open(os.path.join(work, "log"), "wb") as f:
            f.write(image[:cut])
        store = open_store(work)
        try:
            head = store.head_offset
            assert head in boundaries, f"cut at byte {cut}: head {head} is inside a batch"
            assert state(store) == boundaries[head], f"cut at byte {cut}"
            check_indexes(store)
        finally:
            store.close()
        del store
        again = open_store(work, readonly=True)
        try:
            assert again.recovered_tail is None and again.head_offset == head, f"cut at byte {cut}"
        finally:
            again.close()
        del again


def test_a_log_cut_inside_any_frame_reopens_with_all_of_a_batch_or_none(tenant, scratch):
    """Cuts in every frame (`_frame_cuts`): the reopened store stands at a batch boundary
    (never inside the batch) with exactly that boundary's state, and the cut batch was
    truncated away (a second open finds no damage)."""
    _check_cuts(tenant, scratch, _frame_cuts)


@pytest.mark.slow
def test_a_log_cut_at_every_byte_reopens_with_all_of_a_batch_or_none(tenant, scratch):
    _check_cuts(tenant, scratch, lambda image: range(HEADER_SIZE, len(image) + 1))


def test_a_follower_applies_a_batch_only_with_its_last_row(tenant, tmp_path):
    """A follower store fed the primary's frames one at a time (Store.apply_replicated):
    after every frame its state is the primary's at a batch boundary, never inside one."""
    boundaries = dict(_write_batches(tenant))
    primary = open_store(tenant, readonly=True, replication=True)
    try:
        frames = list(primary.frames_after(0))
    finally:
        primary.close()
    del primary
    follower_dir = create_tenant(str(tmp_path / "replica"), "t")

    async def main():
        follower = open_store(follower_dir)
        seen = []
        try:
            for frame in frames:
                await follower.apply_replicated(frame)
                head = follower.head_offset
                assert head in boundaries, f"after frame {frame_offset(frame)}: head {head} is inside a batch"
                assert state(follower) == boundaries[head]
                seen.append(head)
        finally:
            await follower.aclose()
        return seen

    seen = asyncio.run(main())
    assert seen == [1, 1, 1, 1, 5, 6]
