"""Stores opened on the blog schema, and records to fill them: the storage tests' kit."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dbsvc.runtime import CompiledModel, Query, compact_json
from dbsvc.storage import Store, files, hashes
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.hashes import IdBits, OrderedFilter, UniqueFilter
from dbsvc.storage.query import sort_records
from dbsvc.storage.rows import pack
from dbsvc.storage.snapshotreader import decode_snapshot
from support.blog import BLOG


def user(i: int | None = None, **over) -> dict:
    rec = {
        "id": i,
        "email": f"u{i}@example.com" if i is not None else f"anon{id(over)}@x",
        "name": f"user {i}",
        "age": None,
        "role": "reader",
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }
    rec.update(over)
    return rec


def post(i: int | None = None, author: int = 1, **over) -> dict:
    rec = {
        "id": i,
        "author_id": author,
        "title": f"title {i}",
        "body": "body",
        "published": False,
        "score": 0.0,
        "tags": None,
    }
    rec.update(over)
    return rec


def text(value) -> str:
    """Compact JSON, characters as they are (as compact_json writes a record)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def open_store(path: str, **kw) -> Store:
    return Store.open(path, BLOG.MODELS, BLOG.DESCRIPTION, **kw)


def write_eight_rows(directory: str) -> None:
    """Eight rows into the tenant at `directory`, through a store opened and closed here:
    users 1-5, post 1 by user 1, user 2 replaced, user 5 deleted (an insert of each model,
    an update and a delete: every kind of frame a log holds)."""
    store = open_store(directory)

    async def go() -> None:
        for i in range(1, 6):
            await store.insert("User", user(i))
        await store.insert("BlogPost", post(1, author=1))
        await store.replace("User", 2, user(2, name="second"))
        await store.delete("User", 5)

    try:
        asyncio.run(go())
    finally:
        store.close()


def killed_child_records(code: str, fault: str) -> dict[int, dict]:
    """Run `python -c code` with DBSVC_FAULT=`fault` (a plan that ends in KILL), check that
    it died by SIGKILL, and hand back the last record it printed for each id (one JSON
    record a line, printed once its write was acknowledged): what the reopened store owes."""
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DBSVC_FAULT": fault},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == -signal.SIGKILL, res.stderr
    last: dict[int, dict] = {}
    for line in res.stdout.split("\n")[:-1]:
        rec = json.loads(line)
        last[rec["id"]] = rec
    assert last
    return last


_WRITERS_CHILD = """
import asyncio, json, sys
sys.path[:0] = [{root!r}, {tests!r}]
import importlib
from support.storage import open_store, user
for module, name, value in {settings!r}:
    setattr(importlib.import_module("dbsvc.storage." + module), name, value)
s = open_store({tenant!r}, **{store!r})

async def main():
    n = 0
    async def writer(k):
        nonlocal n
        while True:
            n += 1
            i = 1 + n % 20
            rec = user(i, name=f"w{{k}}-{{n}}", **{over!r})
            await s.replace("User", i, rec)
            sys.stdout.write(json.dumps(rec) + "\\n")
            sys.stdout.flush()
    await asyncio.wait_for(asyncio.gather(*(writer(k) for k in range(8))), 50)
asyncio.run(main())
"""


def killed_writers_records(
    tenant: str,
    fault: str,
    store: Mapping[str, Any],
    over: Mapping[str, Any] | None = None,
    settings: Mapping[str, int] | None = None,
) -> dict[int, dict]:
    """`killed_child_records` of a child that opens `tenant` (`open_store(tenant, **store)`)
    and runs eight writers replacing users 1-20 (`user(i, name="w<writer>-<n>", **over)`;
    n counts every write of the process, so a newer version of a record has a larger n)
    until `fault` kills it; `settings` sets storage modules' sizes first (for example
    `{"freeing.FREE_BYTES": 4096}`, each a dbsvc.storage module's attribute). The writers give up
    after 50 s, so a fault that never fires fails the test (the child exits, not killed)
    before `killed_child_records`' own timeout. Check the reopened store with
    `assert_acknowledged_kept`."""
    code = _WRITERS_CHILD.format(
        root=str(ROOT),
        tests=str(ROOT / "tests"),
        tenant=tenant,
        store=dict(store),
        over=dict(over or {}),
        settings=[(*key.split("."), value) for key, value in (settings or {}).items()],
    )
    return killed_child_records(code, fault)


def assert_acknowledged_kept(records: Mapping[int, Mapping[str, Any]], last: Mapping[int, Mapping[str, Any]]) -> None:
    """Every version `killed_writers_records` saw acknowledged is in `records`, or a newer one
    (writers of one id are ordered by acknowledgement only per writer, so a later write of
    another writer may be the one kept)."""
    for i, rec in last.items():
        assert int(records[i]["name"].split("-")[1]) >= int(rec["name"].split("-")[1]), (i, records[i], rec)


_COMPACT_CHILD = """
import sys
sys.path.insert(0, {root!r})
from dbsvc.storage.tenants import compact_tenant
compact_tenant({data!r}, {name!r})
"""


def compact_in_child(tenant: str, fault: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """An offline compaction of `tenant` (`compact_tenant`, what `dbsvc compact` runs) in a
    child process, with DBSVC_FAULT=`fault` when given (a plan ending in KILL kills it at
    that step); its output captured. The caller judges the exit (-9 for a fault that fired)."""
    code = _COMPACT_CHILD.format(root=str(ROOT), data=os.path.dirname(tenant), name=os.path.basename(tenant))
    env = os.environ if fault is None else {**os.environ, "DBSVC_FAULT": fault}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=timeout, check=False)


def run(coro):
    return asyncio.run(coro)


def load_values(table, rows: list, max_id: int = 0) -> None:
    """`Table.load_base` of records given as their values (ascending ids), as the snapshot
    reader hands them: stored records and the index key columns."""
    fields, keys = table.model.fields, table.keys
    table.load_base(
        [pack(fields, r) for r in rows], {p: [keys[fields[p]](r[p]) for r in rows] for p in table.columns}, max_id
    )


def opened_users(tenant: str, **kw) -> tuple[dict, dict]:
    """User's records as dicts and as stored, after an open of `tenant` that checked every
    index (`check_indexes`): what a snapshot test compares with what was written."""
    s = open_store(tenant, **kw)
    try:
        check_indexes(s)
        table = s.tables["User"]
        return dict(table.records), dict(table.live)
    finally:
        s.close()


def snapshot_in_format_1(path: str) -> bytes:
    """Rewrite the snapshot at `path` as the format-1 writer wrote it: the header without
    keys or block rows, then one line per model holding all its rows, ",TAB" after each
    but the last (dbsvc/storage/snapshot.py). An open reads such a file by parsing its
    rows, the path these tests refuse damaged rows on. Returns the new bytes."""
    import json
    import os
    import zlib

    from dbsvc.storage.snapshotreader import decode_snapshot

    def line(body: bytes) -> bytes:
        return b"%08x " % zlib.crc32(body) + body + b"\n"

    image = decode_snapshot(path, open(path, "rb").read())
    header = {
        "format": 1,
        "epoch": image.epoch,
        "head_offset": image.head_offset,
        "models": [
            {"name": m.name, "fields": m.fields, "count": len(m.rows), "max_id": m.max_id} for m in image.models
        ],
    }
    data = line(json.dumps(header, separators=(",", ":")).encode()) + b"".join(
        line(b"[" + b",\t".join(compact_json(list(r)).encode() for r in m.rows) + b"]") for m in image.models
    )
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return data


def array_rows(body: bytes) -> bytes:
    """A format-4 rows line's body (its records' objects) as formats 1-3 wrote it: each row
    the array of its values, compact, rows joined by ",TAB"."""
    rows = json.loads(body.decode("utf-8", "surrogatepass"))
    return b"[" + b",\t".join(compact_json(list(r.values())).encode("utf-8", "surrogatepass") for r in rows) + b"]"


def snapshot_in_format_2(path: str) -> None:
    """Rewrite a format-4 snapshot in place as the format-2 writer wrote it: no versions
    lines, each row the array of its values (`array_rows`), every line's CRC made again."""
    lines = open(path, "rb").read().split(b"\n")[:-1]
    header = json.loads(lines[0][9:])
    header["format"] = 2
    bodies = [json.dumps(header).encode()]
    body_lines = [line[9:] for line in lines[1:]]
    for i in range(0, len(body_lines), 3):
        bodies += [body_lines[i], array_rows(body_lines[i + 1])]
    with open(path, "wb") as f:
        f.write(b"".join(b"%08x " % zlib.crc32(b) + b + b"\n" for b in bodies))


def check_indexes(store: Store) -> None:
    """Every index of every table (primary key, unique, hash, ordered, ref counts) agrees
    with the records: what a store reopened after a crash must still hold."""
    for table in store.tables.values():
        recs = table.records
        assert list(table.pk) == sorted(recs)
        for f, index in table.unique.items():
            want = {table.keys[f](r[f]): i for i, r in recs.items() if r[f] is not None}
            assert index == want, f"unique index {table.name}.{f} disagrees with the records"
        for f, hindex in table.hashes.items():
            want: dict = {}
            for i, r in recs.items():
                want.setdefault(table.keys[f](r[f]), set()).add(i)
            if type(hindex) is OrderedFilter:  # the sort index's runs are its buckets
                assert f not in table.unique and hindex.ordered is table.ordered[f]
                assert {k: set(ids) for k, ids in hindex.buckets.items()} == want
                for k, ids in want.items():
                    assert hindex.count([k]) == len(ids) and hindex.ids([k]) == ids
                    assert all(hindex.has([k], i) for i in ids)
                continue
            if f in table.unique:  # the unique map holds all but null
                assert type(hindex) is UniqueFilter and hindex.unique is table.unique[f]
                assert all(len(ids) == 1 for k, ids in want.items() if k is not None)
                want = {k: ids for k, ids in want.items() if k is None}
                hindex = hindex.nulls
            assert {k: set(ids) for k, ids in hindex.buckets.items()} == want
            for bucket in hindex.buckets.values():
                if type(bucket) is list:  # sorted and small
                    assert bucket == sorted(bucket) and len(bucket) <= hashes.SET_AT
                elif type(bucket) is IdBits:  # as long as the id space, counted right
                    assert len(bucket.flags) == hindex.span and len(bucket) == bucket.flags.count(1)
            if hindex.span >= 0:  # every live id is inside the id space
                assert all(0 <= i < hindex.span for i in recs)
        for f, sindex in table.ordered.items():
            pairs = [(table.keys[f](r[f]), i) for i, r in recs.items()]
            assert list(sindex) == sorted(p for p in pairs if p[0] is not None) + [
                (None, i) for k, i in sorted(pairs, key=lambda p: p[1]) if k is None
            ]
        for f, counts in table.refs.items():
            want = {}
            for r in recs.values():
                if r[f] is not None:
                    want[r[f]] = want.get(r[f], 0) + 1
            assert counts == want


def kill_writer(argv: list[str], head: int, delay: float) -> str:
    """One round of a kill -9 loop: start a writer child (`python ARGV`), wait for its
    `READY <head offset>` line (which must say `head`: nothing was lost or invented since
    the last round), let it write for `delay` seconds, SIGKILL it, and return everything it
    printed after READY (its acknowledgements; the last line may be torn)."""
    with tempfile.TemporaryFile("w+") as errors:
        child = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=errors, text=True)
        ready = child.stdout.readline()  # type: ignore[union-attr]
        if not ready.startswith("READY"):
            child.wait()
            errors.seek(0)
            raise AssertionError(f"child did not start: {errors.read()}")
        assert int(ready.split()[1]) == head
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        out = child.stdout.read()  # type: ignore[union-attr]   not communicate(): it would skip readline's buffer
        child.wait()
    return out


def reference_list(records: Mapping[Any, dict], model: CompiledModel, query: Query) -> tuple[list[dict], int]:
    """(page, total) of `query` over record dicts by brute force: every record matched by
    the generated `match`, all of them sorted: the oracle the store's planned and as_of
    lists are held to."""
    match, filters = model.match, query.filters
    chosen = [r for r in records.values() if match(r, filters)] if filters else list(records.values())
    sort_records(chosen, query.sort, model)
    return chosen[query.offset : query.offset + query.limit], len(chosen)


def file_offsets(path: Path) -> list[int]:
    """Offsets of the whole frames in a headerless log such as a `replicate --out` file (a
    partial last frame is ignored), read with the layout written out here, independently of
    dbsvc.storage.logfile: u64 offset, u32 crc, u32 length, then the payload."""
    data = path.read_bytes() if path.exists() else b""
    offsets, pos = [], 0
    while pos + 16 <= len(data):
        offset, _crc, length = struct.unpack_from(">QII", data, pos)
        if pos + 16 + length > len(data):
            break
        offsets.append(offset)
        pos += 16 + length
    return offsets


def with_stores(go: Callable[..., Awaitable[None]], count: int = 1, timeout: float = 60) -> None:
    """Run `go(*stores)` over `count` fresh blog stores (no fsync), closed and removed after."""
    directory = tempfile.mkdtemp(prefix="stores-")
    stores: list[Store] = []
    try:
        for n in range(count):
            os.mkdir(f"{directory}/{n}")
            stores.append(open_store(f"{directory}/{n}", sync="off"))
        asyncio.run(asyncio.wait_for(go(*stores), timeout))
    finally:
        for store in stores:
            store.close()
        shutil.rmtree(directory, ignore_errors=True)


class CountingStore:
    """A real store with its `get` calls counted: (model, id, as_of) each."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.gets: list[tuple[str, Any, int | None]] = []

    def get(self, model: str, id: Any, as_of: int | None = None):  # noqa: ANN201 (the store's answer)
        self.gets.append((model, id, as_of))
        return self.store.get(model, id, as_of)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class HoldAfterSnapshot(FaultPlan):
    """A fault plan that fails nothing and holds an online compaction's thread at its first
    step (snapshot.new written) until the test sets `release`; `reached` says it is there.
    Lets a test write past the cut, or queue work, while the compaction waits."""

    def __init__(self) -> None:
        super().__init__(None)
        self.reached = threading.Event()
        self.release = threading.Event()

    def check(self, op: str) -> None:
        if op == "compact" and not self.reached.is_set():
            self.reached.set()
            assert self.release.wait(60), "the test never released the compaction"


class HeldSnapshot(files.FileOps):
    """A file layer holding an online compaction's snapshot thread at its first write into
    snapshot.new, before it reads any record of the image, until the test sets `release`;
    `reached` says it is there. Unlike `HoldAfterSnapshot` the cut is already taken, so a
    test can write past it and check that the image is still the state at the cut."""

    def __init__(self) -> None:
        self.snapshot_fds: set[int] = set()
        self.reached = threading.Event()
        self.release = threading.Event()

    def open(self, path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[override]
        fd = super().open(path, flags, mode, dir_fd=dir_fd)
        if path.endswith("snapshot.new"):
            self.snapshot_fds.add(fd)
        return fd

    def write(self, fd, data):  # type: ignore[override]
        if fd in self.snapshot_fds and not self.release.is_set():
            self.reached.set()
            assert self.release.wait(60), "the test never released the snapshot thread"
        return super().write(fd, data)


def snapshot_users(tenant: str) -> tuple[int, dict[Any, dict]]:
    """The tenant's snapshot file as a compaction wrote it: its head offset and its User
    rows as records by id (what the image holds, compared with the store's state at the
    cut)."""
    with open(os.path.join(tenant, "snapshot"), "rb") as f:
        image = decode_snapshot("snapshot", f.read())
    users = next(m for m in image.models if m.name == "User")
    at = users.fields.index("id")
    return image.head_offset, {row[at]: dict(zip(users.fields, row)) for row in users.rows}


def filled_store(fill: Callable[[Store], Awaitable[None]]) -> Iterator[Store]:
    """A store in a directory of its own, filled by `fill` once, closed and removed after
    (a module-scoped fixture's body: `yield from filled_store(fill)`)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(tmp, sync="off")
        try:
            run(fill(store))
            yield store
        finally:
            store.close()
