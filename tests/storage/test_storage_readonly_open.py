"""A reader changes no byte of the tenant directory, whatever state the directory is in.

recovery.py: "A read-only open does steps 2-4 and 7 in memory only: it renames, truncates
and writes nothing, ignores a torn tail (a writer may be appending it right now)". The
readers: `Store.open(readonly=True)` (beside a running writer or alone), `dbsvc tenant
list`, `dbsvc backup`, and `dbsvc export` (which also takes the writer lock, and so writes
its pid into `LOCK`: the one file it may change, rule 1 of lock.py). Each is run on a
tenant with a torn tail, and `Store.open(readonly=True)` also on the leftovers of a
compaction killed at each step, on stray `.tmp` files, and on a tenant never opened.
Every file's bytes, and the set of files, must be as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dbsvc.runtime import Query
from dbsvc.storage.compact import finish_interrupted
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.tenants import create_tenant
from support.cli import run_dbsvc
from support.storage import ROOT, compact_in_child, open_store, run, user
from support.tree import dir_image

HOLDER = os.path.join(os.path.dirname(__file__), "holder_child.py")
WHOLE = 5  # whole frames in the log before the torn one


def fill(tenant: str) -> None:
    s = open_store(tenant)
    for i in range(1, WHOLE + 1):
        run(s.insert("User", user(i)))
    s.close()


def tear(log: str) -> None:
    """Append the first half of the next frame, as a writer cut off mid-append leaves it."""
    payload = json.dumps({"kind": "insert", "model": "User", "record": user(WHOLE + 1)}).encode()
    frame = encode_frame(WHOLE + 1, payload)
    with open(log, "ab") as f:
        f.write(frame[: len(frame) // 2])


def current_log(tenant: str) -> str:
    """The log file a reader reads (after an interrupted compaction, maybe `log.new`)."""
    return finish_interrupted(tenant, readonly=True).log


@pytest.fixture
def torn(tenant) -> str:
    fill(tenant)
    tear(current_log(tenant))
    return tenant


def read_only_view(tenant: str) -> tuple[set, int, bool]:
    """(ids of the users, head offset, whether it met a torn tail) as a read-only open sees them."""
    s = open_store(tenant, readonly=True)
    try:
        records, _total, _watermark = s.list_records("User", Query(limit=1000))
        return {r["id"] for r in records}, s.head_offset, s.recovered_tail is not None
    finally:
        s.close()


def cli(*args: str, data: str, name: str) -> subprocess.CompletedProcess:
    done = run_dbsvc(*args, env={"SERVICE_DATA": data, "SERVICE_TENANT": name}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def cli_on(tenant: str, *args: str) -> subprocess.CompletedProcess:
    return cli(*args, data=os.path.dirname(tenant), name=os.path.basename(tenant))


# -- Store.open(readonly=True) ------------------------------------------------------------


def test_read_only_open_leaves_a_torn_tail_in_place(torn):
    before = dir_image(torn)
    assert read_only_view(torn) == (set(range(1, WHOLE + 1)), WHOLE, True)  # whole frames only
    assert dir_image(torn) == before


def test_read_only_open_beside_a_running_writer_leaves_its_tail(tenant):
    """The writer holds the lock and is (as far as the reader can tell) appending the torn
    frame right now: the reader must not cut it."""
    fill(tenant)
    child = subprocess.Popen([sys.executable, HOLDER, tenant], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().startswith("READY")
        tear(os.path.join(tenant, "log"))
        before = dir_image(tenant)
        assert read_only_view(tenant) == (set(range(1, WHOLE + 1)), WHOLE, True)
        assert dir_image(tenant) == before
    finally:
        child.stdin.close()
        child.wait(timeout=60)


def test_read_only_open_of_a_never_opened_tenant_creates_nothing(tmp_path):
    tenant = create_tenant(str(tmp_path / "data"), "fresh")
    before = dir_image(tenant)
    assert read_only_view(tenant) == (set(), 0, False)
    assert dir_image(tenant) == before
    assert sorted(os.listdir(tenant)) == sorted(before)


def test_read_only_open_leaves_stray_tmp_files(torn):
    for name in ("schema.json.tmp", "snapshot.tmp", "log.tmp"):
        with open(os.path.join(torn, name), "wb") as f:
            f.write(b"left by a crash before its rename")
    before = dir_image(torn)
    assert read_only_view(torn)[2]
    assert dir_image(torn) == before


@pytest.mark.parametrize("step", range(1, 10))
def test_read_only_open_leaves_an_interrupted_compaction_as_it_found_it(torn, step):
    """A compaction killed after step K leaves `.new` files (before or after its commit
    point); finishing or discarding them is a writer's job (compact.py)."""
    done = compact_in_child(torn, f"compact:{step}:KILL")
    assert done.returncode in (0, -9), done.stderr
    # compact_tenant's writer open cut the torn tail first: tear the log a reader reads again.
    tear(current_log(torn))
    before = dir_image(torn)
    assert read_only_view(torn) == (set(range(1, WHOLE + 1)), WHOLE, True)
    assert dir_image(torn) == before


# -- the reading commands -----------------------------------------------------------------


def test_tenant_list_changes_no_byte(torn):
    before = dir_image(torn)
    listed = cli_on(torn, "tenant", "list")
    assert listed.stdout.startswith(f"{os.path.basename(torn)}\t")
    assert dir_image(torn) == before


def test_backup_changes_no_byte_and_copies_whole_frames(torn, tmp_path):
    before = dir_image(torn)
    dest = tmp_path / "backup"
    cli_on(torn, "backup", str(dest))
    assert dir_image(torn) == before
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["head_offset"] == WHOLE
    cli("tenant", "create", "restored", "--from", str(dest), data=str(tmp_path / "elsewhere"), name="restored")
    assert read_only_view(str(tmp_path / "elsewhere" / "restored")) == (set(range(1, WHOLE + 1)), WHOLE, False)


def test_export_changes_no_byte_but_the_lock_holders_pid(torn, tmp_path):
    before = dir_image(torn)
    out = tmp_path / "export.jsonl"
    cli_on(torn, "export", str(ROOT / "schemas" / "blog.dbs"), "User", "-o", str(out), "-q")
    after = dir_image(torn)
    assert after.pop("LOCK").decode().strip().isdigit()
    before.pop("LOCK")
    assert after == before
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["record"]["id"] for line in exported) == list(range(1, WHOLE + 1))
