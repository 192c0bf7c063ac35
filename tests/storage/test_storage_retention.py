"""Retention (retain.py, replay.py): a compaction keeps the newest rows it removed, so
`frames_after` reaches back past it; offsets are never reused, whatever happens.

Everything runs through a real Store (and real subprocesses for kill -9). A closed store is
dropped (`del`) before the next open or offline compaction: each freezes what is alive
(recovery.py `gc.freeze`), and a store frozen there outlived its test in the worker."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import subprocess
import sys

import pytest

from dbsvc.errors import OffsetGone
from dbsvc.storage.logfile import HEADER_SIZE, decode_header
from dbsvc.storage.tenants import compact_tenant
from support.storage import ROOT, kill_writer, open_store, run, user

BIG = 1 << 40  # a compact_bytes that never triggers
RETAIN = 1 << 22  # a budget that keeps everything these tests write
TINY = 32 * 1024
OFFSETS_CHILD = os.path.join(os.path.dirname(__file__), "offsets_child.py")


# -- helpers -----------------------------------------------------------------------------


def offsets(frames) -> list[int]:
    return [int.from_bytes(f[:8], "big") for f in frames]


def rows(frames) -> list[tuple]:
    """What a frame says apart from its watermark: (offset, kind, model, id, record)."""
    out = []
    for f in frames:
        e = json.loads(f[16:])
        out.append((e["offset"], e["kind"], e["model"], e["id"], e["record"]))
    return out


def compact(tenant: str, retain_bytes: int = RETAIN) -> str:
    return compact_tenant(os.path.dirname(tenant), os.path.basename(tenant), retain_bytes=retain_bytes)


def segment_path(tenant: str) -> str:
    return os.path.join(tenant, "log.retained")


async def churn(s, n: int, users: int = 5, pad: int = 0) -> None:
    """`n` rows over `users` users: inserts while they are missing, then replaces."""
    for k in range(n):
        i = 1 + k % users
        if s.get("User", i)[0] is None:
            await s.insert("User", user(i, profile={"pad": "x" * pad} if pad else None))
        else:
            await s.replace("User", i, user(i, name=f"n{k}", profile={"pad": "y" * pad} if pad else None))


async def compact_online(s) -> None:
    """One online compaction, triggered by writes (the log must hold more than twice as
    many rows as live records) and awaited; nothing is written while it runs."""
    epoch = s.epoch
    s.compactor.compact_bytes = 1
    n = 0
    while s.compaction is None:
        n += 1
        assert n < 1000
        await s.replace("User", 1, user(1, name=f"trigger{n}"))
    s.compactor.compact_bytes = BIG
    while s.compaction is not None:
        await asyncio.sleep(0.001)
    assert s.epoch != epoch, "the online compaction did not happen"


def fresh(tenant: str, **kw):
    return open_store(tenant, compact_bytes=kw.pop("compact_bytes", BIG), **kw)


def check_next_write(s, head: int) -> None:
    """Offsets are never reused: the next write gets head + 1."""
    run(s.insert("User", user(None, email=f"next{head}@x")))
    assert s.head_offset == head + 1
    assert offsets(s.frames_after(head)) == [head + 1]


# -- frames_after across compactions -----------------------------------------------------


def test_frames_after_reaches_back_across_an_offline_compaction(tenant):
    s = fresh(tenant, replication=True)
    run(churn(s, 60))
    before = list(s.frames_after(0))
    head = s.head_offset
    s.close()
    del s
    assert "retained" in compact(tenant)
    s = fresh(tenant, replication=True, retain_bytes=RETAIN)
    assert s.head_offset == head and s.epoch_state.log_base == head and s.oldest_offset == 0
    for after in (0, 1, 17, head - 1, head):
        assert list(s.frames_after(after)) == before[after:]  # byte for byte
        assert [e.offset for e in s.events_after(after)] == list(range(after + 1, head + 1))
    run(churn(s, 5))
    assert offsets(s.frames_after(head - 3)) == list(range(head - 2, head + 6))
    s.close()


def test_frames_after_across_two_compactions_offline_and_at_open(tenant):
    s = fresh(tenant)
    run(churn(s, 40))
    s.close()
    del s
    compact(tenant)
    s = fresh(tenant, retain_bytes=RETAIN)
    run(churn(s, 40))
    before = list(s.frames_after(0))  # segment, then log
    head = s.head_offset
    s.close()
    del s
    s = fresh(tenant, compact_bytes=1, retain_bytes=RETAIN)  # compacts at open
    assert s.compacted_on_open and s.epoch_state.log_base == head
    assert s.oldest_offset == 0 and list(s.frames_after(0)) == before
    assert list(s.frames_after(55)) == before[55:]
    s.close()


def test_frames_after_across_two_online_compactions(tenant):
    s = fresh(tenant, retain_bytes=RETAIN)

    async def go():
        await churn(s, 50)
        before = list(s.frames_after(0))
        await compact_online(s)
        h1 = s.epoch_state.log_base
        after1 = list(s.frames_after(0))
        # Up to the cut (which includes the triggering write): the retained segment, byte
        # for byte. After it: the new log, whose watermarks were renumbered, so rows
        # compare without them.
        assert h1 > len(before) and after1[: len(before)] == before
        assert rows(after1[: len(before)]) == rows(before)
        assert offsets(after1) == list(range(1, s.head_offset + 1))
        await churn(s, 50)
        before2 = list(s.frames_after(0))
        await compact_online(s)
        h2 = s.epoch_state.log_base
        after2 = list(s.frames_after(0))
        assert h2 > len(before2) > h1 and s.oldest_offset == 0
        assert after2[: len(before2)] == before2 and after2[: len(before)] == before
        assert rows(after2[: len(before2)]) == rows(before2)
        assert offsets(after2) == list(range(1, s.head_offset + 1))
        for after in (0, h1 - 1, h1, h1 + 1, h2 - 1, h2):
            assert offsets(s.frames_after(after)) == list(range(after + 1, s.head_offset + 1))

    run(go())
    s.close()


def test_retained_frames_keep_the_watermarks_of_their_epoch(tenant):
    s = fresh(tenant, replication=True, retain_bytes=RETAIN)

    async def go():
        await churn(s, 30, users=3)
        await compact_online(s)

    run(go())
    events = list(s.events_after(0))
    assert [e.offset for e in events] == list(range(1, s.head_offset + 1))
    first_epoch = [e for e in events if e.offset <= s.epoch_state.log_base and e.model == "User"]
    assert [e.watermark for e in first_epoch] == list(range(1, len(first_epoch) + 1))
    s.close()


def test_a_stream_started_before_an_online_compaction_goes_on_without_a_gap(tenant):
    s = fresh(tenant, retain_bytes=RETAIN)

    async def go():
        await churn(s, 40)
        head = s.head_offset
        stream = s.frames_after(3)
        got = [next(stream) for _ in range(5)]
        await compact_online(s)  # the log under the stream is replaced
        got.extend(stream)
        assert offsets(got) == list(range(4, head + 1))
        got.extend(s.frames_after(head))
        assert offsets(got) == list(range(4, s.head_offset + 1))

    run(go())
    s.close()


def test_seek_into_a_large_segment_finds_every_offset(tenant):
    s = fresh(tenant)
    rnd = random.Random(5)

    async def go():
        for k in range(1500):
            i = 1 + k % 7
            pad = {"pad": "z" * (100_000 if k % 400 == 399 else rnd.randrange(0, 600))}
            if s.get("User", i)[0] is None:
                await s.insert("User", user(i, profile=pad))
            else:
                await s.replace("User", i, user(i, name=f"n{k}", profile=pad))

    run(go())
    before = list(s.frames_after(0))
    s.close()
    del s
    compact(tenant)
    s = fresh(tenant, retain_bytes=RETAIN)
    assert os.path.getsize(segment_path(tenant)) > 8 * 65536
    head = s.head_offset
    for after in sorted({*rnd.sample(range(head), 60), 0, 398, 399, 400, head - 2, head - 1, head}):
        got = s.frames_after(after)
        assert [next(got, None) for _ in range(3)] == (before[after:] + [None] * 3)[:3], after
    assert list(s.frames_after(0)) == before
    s.close()


# -- the budget --------------------------------------------------------------------------


def _fitting_suffix(frames: list[bytes], budget: int) -> list[bytes]:
    kept: list[bytes] = []
    size = HEADER_SIZE
    for f in reversed(frames):
        if size + len(f) > budget:
            break
        kept.insert(0, f)
        size += len(f)
    return kept


@pytest.mark.parametrize("budget", [3000, 20_000])
def test_budget_keeps_the_newest_whole_frames(tenant, budget):
    s = fresh(tenant)
    rnd = random.Random(budget)

    async def go():
        for k in range(120):
            i = 1 + k % 4
            rec = user(i, name=f"n{k}", profile={"pad": "p" * rnd.randrange(0, 300)})
            await (s.insert("User", rec) if s.get("User", i)[0] is None else s.replace("User", i, rec))

    run(go())
    before = list(s.frames_after(0))
    s.close()
    del s
    compact(tenant, retain_bytes=budget)
    kept = _fitting_suffix(before, budget)
    assert 0 < len(kept) < len(before)
    assert os.path.getsize(segment_path(tenant)) == HEADER_SIZE + sum(map(len, kept)) <= budget
    s = fresh(tenant, retain_bytes=budget)
    oldest = s.oldest_offset
    assert oldest == len(before) - len(kept)
    assert list(s.frames_after(oldest)) == kept
    with pytest.raises(OffsetGone, match=f"the oldest retained offset is {oldest}"):
        s.frames_after(oldest - 1)
    # A second compaction: the newest frames of (old segment + log) within the budget.
    run(s.replace("User", 1, user(1, name="again")))
    run(s.replace("User", 2, user(2, name="again")))
    before2 = list(s.frames_after(oldest))
    s.close()
    del s
    compact(tenant, retain_bytes=budget)
    kept2 = _fitting_suffix(before2, budget)
    s = fresh(tenant, retain_bytes=budget)
    assert os.path.getsize(segment_path(tenant)) <= budget
    assert list(s.frames_after(s.oldest_offset)) == kept2 and s.oldest_offset == s.head_offset - len(kept2)
    s.close()


def test_a_newest_frame_over_the_budget_retains_nothing(tenant):
    s = fresh(tenant)
    run(churn(s, 10, pad=5000))
    head = s.head_offset
    s.close()
    del s
    compact(tenant, retain_bytes=4000)
    assert not os.path.exists(segment_path(tenant))
    s = fresh(tenant, retain_bytes=4000)
    assert s.oldest_offset == head
    with pytest.raises(OffsetGone):
        s.frames_after(head - 1)
    s.close()


def test_retain_zero_answers_410_right_after_each_kind_of_compaction(tenant):
    s = fresh(tenant)
    run(churn(s, 30))
    s.close()
    del s
    compact(tenant, retain_bytes=0)  # offline
    assert not os.path.exists(segment_path(tenant))
    s = fresh(tenant)
    base = s.epoch_state.log_base
    with pytest.raises(OffsetGone, match=f"offset {base - 1} was compacted away"):
        s.frames_after(base - 1)
    run(churn(s, 30))
    s.close()
    del s
    s = fresh(tenant, compact_bytes=1)  # at open
    assert s.compacted_on_open and s.oldest_offset == s.epoch_state.log_base == s.head_offset
    with pytest.raises(OffsetGone):
        s.frames_after(s.head_offset - 1)
    run(compact_online(s))  # online
    with pytest.raises(OffsetGone):
        s.frames_after(s.epoch_state.log_base - 1)
    s.close()
    assert sorted(os.listdir(tenant)) == ["LOCK", "history", "log", "schema.json", "snapshot"]


def test_retain_zero_removes_a_segment_left_from_before(tenant, caplog):
    s = fresh(tenant)
    run(churn(s, 30))
    s.close()
    del s
    compact(tenant)
    assert os.path.exists(segment_path(tenant))
    ro = fresh(tenant, readonly=True)  # a read-only open touches nothing
    assert ro.oldest_offset == 0
    ro.close()
    del ro
    assert os.path.exists(segment_path(tenant))
    with caplog.at_level(logging.INFO, logger="dbsvc.storage"):
        s = fresh(tenant)
    assert not os.path.exists(segment_path(tenant)) and "removed the retained log segment" in caplog.text
    assert s.oldest_offset == s.epoch_state.log_base > 0
    s.close()


# -- damage ------------------------------------------------------------------------------


@pytest.fixture
def retained(tenant):
    """A tenant compacted once with 60 rows retained, and those rows' frames."""
    s = fresh(tenant)
    run(churn(s, 60))
    before = list(s.frames_after(0))
    s.close()
    del s
    compact(tenant)
    return tenant, before


def _damage(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x20]))


@pytest.mark.parametrize("where", ["header", "first", "last", "truncated", "empty", "garbage"])
def test_a_damaged_segment_is_logged_and_ignored_at_open(retained, caplog, where):
    tenant, before = retained
    path = segment_path(tenant)
    size = os.path.getsize(path)
    if where == "header":
        _damage(path, 20)
    elif where == "first":
        _damage(path, HEADER_SIZE + 30)
    elif where == "last":
        _damage(path, size - 3)
    elif where == "truncated":
        os.truncate(path, size - 10)
    elif where == "empty":
        os.truncate(path, 0)
    else:
        with open(path, "wb") as f:
            f.write(os.urandom(5000))
    for readonly in (True, False):
        with caplog.at_level(logging.WARNING, logger="dbsvc.storage"):
            s = fresh(tenant, readonly=readonly, retain_bytes=RETAIN)
        assert "ignoring the retained log segment" in caplog.text
        caplog.clear()
        base = s.epoch_state.log_base
        assert s.oldest_offset == base == len(before)
        with pytest.raises(OffsetGone, match=f"the oldest retained offset is {base}"):
            s.frames_after(0)
        assert list(s.frames_after(base)) == []
        if not readonly:
            check_next_write(s, base)
        s.close()
        del s


def test_damage_in_the_middle_is_found_while_reading(retained, caplog):
    tenant, before = retained
    path = segment_path(tenant)
    s = fresh(tenant, retain_bytes=RETAIN)
    assert s.oldest_offset == 0  # only the ends are checked at open
    # Flip a byte inside the payload of frame 30.
    position = HEADER_SIZE + sum(map(len, before[:29])) + 20
    _damage(path, position)
    got = []
    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        with pytest.raises(OffsetGone, match="damaged"):
            for frame in s.frames_after(0):
                got.append(frame)
    assert got == before[:29]  # only the good frames before the damage
    assert "ignoring the retained log segment" in caplog.text and f"byte {position - 20}" in caplog.text
    assert s.oldest_offset == s.epoch_state.log_base
    with pytest.raises(OffsetGone):
        s.frames_after(40)  # dropped for the rest of the store's life
    s.close()


def test_a_segment_that_does_not_meet_the_log_is_ignored_and_the_next_compaction_replaces_it(retained, caplog):
    tenant, before = retained
    stale = open(segment_path(tenant), "rb").read()
    s = fresh(tenant, retain_bytes=RETAIN)
    run(churn(s, 20))
    head = s.head_offset
    s.close()
    del s
    compact(tenant, retain_bytes=0)
    with open(segment_path(tenant), "wb") as f:  # the segment of the first compaction
        f.write(stale)
    with caplog.at_level(logging.WARNING, logger="dbsvc.storage"):
        s = fresh(tenant, retain_bytes=RETAIN)
    assert "ignoring the retained log segment" in caplog.text
    assert s.oldest_offset == head
    run(churn(s, 10))
    s.close()
    del s
    compact(tenant)
    s = fresh(tenant, retain_bytes=RETAIN)
    assert s.oldest_offset == head and offsets(s.frames_after(head)) == list(range(head + 1, s.head_offset + 1))
    s.close()


# -- kill -9 at each step of a compaction at open ----------------------------------------

AT_OPEN_CHILD = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from support.storage import open_store
open_store({tenant!r}, compact_bytes=1, retain_bytes={retain})
"""


@pytest.mark.parametrize("step", range(1, 10))
def test_compaction_at_open_killed_after_each_step_keeps_retention_consistent(tenant, step):
    s = fresh(tenant)
    run(churn(s, 40))
    s.close()
    del s
    compact(tenant)  # a segment exists: the next one merges it
    s = fresh(tenant, retain_bytes=RETAIN)
    run(churn(s, 40))
    before = list(s.frames_after(0))
    head, records = s.head_offset, dict(s.tables["User"].records)
    s.close()
    del s
    code = AT_OPEN_CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"), tenant=tenant, retain=RETAIN)
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DBSVC_FAULT": f"compact:{step}:KILL"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == -9, res.stderr
    for readonly in (True, False):
        s = fresh(tenant, readonly=readonly, retain_bytes=RETAIN)
        assert s.head_offset == head and s.tables["User"].records == records
        assert s.oldest_offset == 0 and list(s.frames_after(0)) == before
        if not readonly:
            names = sorted(os.listdir(tenant))
            assert names == ["LOCK", "history", "log", "log.retained", "schema.json", "snapshot"]
            with open(segment_path(tenant), "rb") as f:
                assert decode_header("log.retained", f.read(HEADER_SIZE)).base_offset == 0
            check_next_write(s, head)
        s.close()
        del s


# -- offsets are never reused ------------------------------------------------------------


def test_head_survives_restart_and_every_compaction(tenant):
    s = fresh(tenant)
    run(churn(s, 30))
    head = s.head_offset
    s.close()
    del s
    s = fresh(tenant)  # restart
    assert s.head_offset == head
    check_next_write(s, head)
    head = s.head_offset
    s.close()
    del s
    compact(tenant)  # offline
    s = fresh(tenant)
    assert s.head_offset == s.epoch_state.log_base == head
    check_next_write(s, head)
    run(churn(s, 30))
    head = s.head_offset
    s.close()
    del s
    s = fresh(tenant, compact_bytes=1)  # at open
    assert s.compacted_on_open and s.head_offset == head
    check_next_write(s, head)
    head = s.head_offset
    s.compactor.compact_bytes = BIG
    run(compact_online(s))  # online
    assert s.head_offset == s.epoch_state.log_base > head  # the trigger's rows
    head = s.head_offset
    check_next_write(s, head)
    head = s.head_offset
    s.close()
    del s
    s = fresh(tenant)
    assert s.head_offset == head
    check_next_write(s, head)
    s.close()


def offsets_loop(tenant: str, rounds: int, seed: int) -> int:
    """Kill -9 a child writing under online compaction (and compaction at open) at random
    moments; after each kill every offset ever seen must still name the same row, the head
    must cover every committed row, and the next write must get head + 1."""
    rnd = random.Random(seed)
    seen: dict[int, tuple] = {}  # offset -> (kind, model, id), over every round
    head = oldest = 0
    committed_total = 0
    for round_ in range(rounds):
        out = kill_writer(
            [OFFSETS_CHILD, tenant, str(seed * 1000 + round_), str(TINY), str(RETAIN)], head, rnd.uniform(0.05, 0.4)
        )
        lines = [line.split() for line in out.split("\n")[:-1] if line.startswith("C ")]
        for _c, offset, kind, model, id_ in lines:
            row = (kind, model, id_)
            assert seen.setdefault(int(offset), row) == row, f"offset {offset} reused"
        committed_total += len(lines)

        s = fresh(tenant, retain_bytes=RETAIN)
        try:
            if lines:
                assert s.head_offset >= int(lines[-1][1])  # every committed row survived
            assert s.head_offset >= head and s.oldest_offset >= oldest
            oldest, head = s.oldest_offset, s.head_offset
            frames = list(s.frames_after(oldest))
            assert offsets(frames) == list(range(oldest + 1, head + 1))
            for offset, kind, model, id_, _record in rows(frames):
                row = (kind, model, str(id_))
                assert seen.setdefault(offset, row) == row, f"offset {offset} reused"
            check_next_write(s, head)
            event = json.loads(list(s.frames_after(head))[0][16:])
            seen[head + 1] = (event["kind"], event["model"], str(event["id"]))
            head += 1
        finally:
            s.close()
        del s
    return committed_total


def test_offsets_are_never_reused_across_kill_9_and_compactions(tenant):
    assert offsets_loop(tenant, rounds=6, seed=1) > 100


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_offsets_soak(tenant):
    offsets_loop(tenant, rounds=150, seed=2)
