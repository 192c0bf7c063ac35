"""Online compaction's thread steps give the core back to the loop (online.py `Pacer`): the
snapshot is made in pieces with a pause between any two, and what the paced steps let the
loop write meanwhile is copied before the switch (`catch_up`), not by it on the loop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time

import pytest

from dbsvc.storage import online, snapshot, snapshotreader
from dbsvc.storage.snapshot import ModelStream, SnapshotImage, encode_snapshot, write_snapshot_stream
from support.storage import check_indexes, open_store, run, user


def _image_and_streams(s) -> tuple[SnapshotImage, list[ModelStream]]:
    """The store's records as one image (written whole) and as streams of 300-row chunks;
    user 300's name is a lone surrogate, as only a hand-made file holds one (the store
    refuses it), escaped in its row text: its key column is still written."""
    models, streams = [], []
    for table in s.tables.values():
        ids = sorted(table.live)
        rows = [table.live[i] for i in ids]
        if table.name == "User":
            rows[299] = rows[299].replace(b'"user 300"', b'"lone \\ud800"')
        fields = list(table.model.fields)
        models.append(snapshot.ModelImage(table.name, fields, rows, table.max_id, table.key_fields, [9] * len(rows)))
        chunks = [(rows[i : i + 300], [9] * len(rows[i : i + 300])) for i in range(0, len(rows), 300)]
        streams.append(ModelStream(table.name, fields, len(rows), table.max_id, chunks, table.key_fields))
    return SnapshotImage("e1", 9, models), streams


def columns_of(part, path: str) -> list:
    """Every value of the model's `name` key column, as the reader reads it."""
    return [value for _texts, keyed in snapshotreader.model_blocks(path, part) for value in keyed["name"]]


def test_a_snapshot_written_in_paced_pieces_is_the_file_written_whole(tenant, stores):
    s = stores(tenant, sync="off")

    async def fill():
        for i in range(1, snapshot.BLOCK_ROWS + 700):  # two blocks, the second short
            await s.insert("User", user(i))

    run(fill())
    image, streams = _image_and_streams(s)
    s.close()
    pauses = []
    path = os.path.join(tenant, "paced")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_snapshot_stream(fd, image.epoch, image.head_offset, streams, lambda: pauses.append(1))
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"".join(encode_snapshot(image))
    # Read back by the reader (its key columns, not the writer's `_block`): each column holds
    # every row's value of its field, in row order.
    _epoch, _head, parts = snapshotreader.read_snapshot(path, data)
    for part, model in zip(parts, image.models):
        rows = [json.loads(text) for text in model.rows]
        columns: dict[str, list] = {key: [] for key in model.keys}
        for _texts, keyed in snapshotreader.model_blocks(path, part):
            for key, column in keyed.items():
                columns[key] += list(column)
        for key, column in columns.items():
            at = model.fields.index(key)
            assert column == [list(row.values())[at] for row in rows], (model.name, key)
    assert "lone \ud800" in columns_of(parts[0], path)
    users = snapshot.BLOCK_ROWS + 699
    # A pause after every PIECE_ROWS records parsed, every key column encoded and every block
    # written: no piece of the User model's work runs longer than one of those between two.
    parsed = -(-snapshot.BLOCK_ROWS // snapshot.PIECE_ROWS) + -(-699 // snapshot.PIECE_ROWS)
    keys = len(image.models[0].keys)
    assert image.models[0].name == "User" and keys >= 2
    assert len(pauses) >= parsed + 2 * keys + 2, (len(pauses), parsed, keys)
    assert users == len(image.models[0].rows)


def test_writes_during_the_paced_steps_are_copied_before_the_switch_and_kept(tenant, monkeypatch, caplog, stores):
    # Every byte written since start_log is left to catch_up (SWITCH_BYTES 0), while sixteen
    # writers keep the log growing through every thread step.
    monkeypatch.setattr(online, "SWITCH_BYTES", 0)
    s = stores(tenant, replication=True)

    async def go():
        for i in range(1, 201):
            await s.insert("User", user(i))
        stop = asyncio.Event()

        async def writer(k: int) -> int:
            n = 0
            while not stop.is_set() and n < 2000:
                i = (k * 37 + n) % 200 + 1
                await s.replace("User", i, user(i, name=f"w{k}-{n}"))
                n += 1
            return n

        writers = [asyncio.create_task(writer(k)) for k in range(16)]
        await asyncio.sleep(0.05)
        await s.compact_now()
        stop.set()
        return sum(await asyncio.gather(*writers))

    with caplog.at_level(logging.INFO, logger="dbsvc.storage"):
        written = run(go())
    assert s.compactions == 1 and s.stats()["commits"] == 200 + written
    line = next(r.getMessage() for r in caplog.records if "compacted online" in r.getMessage())
    # How many catch-ups ran depends on what the loop wrote meanwhile (none, if the thread
    # step won every race): the line says, and what they copied is kept (below).
    assert re.search(r"\d+ bytes of log left to the switch after \d catch-ups", line), line
    want = {name: dict(t.records) for name, t in s.tables.items()}
    head, marks, epoch = s.head_offset, s.watermarks(), s.epoch
    s.close()
    s = stores(tenant, replication=True)
    try:
        assert {name: dict(t.records) for name, t in s.tables.items()} == want
        assert (s.head_offset, s.watermarks(), s.epoch) == (head, marks, epoch)
        check_indexes(s)
    finally:
        s.close()


def test_a_compaction_with_no_write_during_it_runs_no_catch_up(tenant, monkeypatch, caplog):
    # Even with nothing allowed to be left to the switch (SWITCH_BYTES 0), a log that did
    # not grow since start_log needs no catch-up step.
    monkeypatch.setattr(online, "SWITCH_BYTES", 0)
    s = open_store(tenant)

    async def go():
        for i in range(1, 21):
            await s.insert("User", user(i))
        await s.compact_now()

    try:
        with caplog.at_level(logging.INFO, logger="dbsvc.storage"):
            run(go())
        assert s.compactions == 1
    finally:
        s.close()
    line = next(r.getMessage() for r in caplog.records if "compacted online" in r.getMessage())
    assert "0 bytes of log left to the switch after 0 catch-ups" in line, line


def test_a_pause_sleeps_pace_times_the_cpu_used_since_the_last_and_stops_a_closed_compaction():
    progress = online.Progress()
    pause = online.Pacer(progress)
    for _round in range(2):  # the second measures from the first pause's end, not the start
        started = time.thread_time()
        while time.thread_time() - started < 0.01:  # 10 ms of this thread's CPU
            pass
        used = time.thread_time() - started
        before = time.perf_counter()
        pause()
        assert time.perf_counter() - before >= online.PACE * used
    progress.cancelled = True
    with pytest.raises(online.Cancelled):
        pause()
