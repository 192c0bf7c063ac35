"""dbsvc/datatools/commands.py in-process (issue 33): `dbsvc export / import / backup /
tenant create --from` run through `dbsvc.cli.main` in the test process (the same parser,
command bodies and exit mapping as the subprocess tests, visible to mutmut), with exact
standard output, standard error and exit status.

A lock held by the test itself stands for a running server: the writer lock is a flock,
which conflicts within one process too (storage/lock.py rule 2).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from dbsvc.cli import main
from dbsvc.runtime import Query
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, post, user
from support.tree import dir_image

SCHEMA = str(Path(__file__).resolve().parents[2] / "schemas" / "blog.dbs")


@pytest.fixture
def env(monkeypatch, data):
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SERVICE_DATA", str(data))
    monkeypatch.setenv("SERVICE_TENANT", "t")
    return data


@pytest.fixture
def run(env, capsys):
    def go(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return go


@pytest.fixture
def tenant(env) -> str:
    directory = create_tenant(str(env), "t")
    store = open_store(directory)

    async def go() -> None:
        for i in (1, 2):
            await store.insert("User", user(i))
        await store.insert("BlogPost", post(1, author=2))

    asyncio.run(go())
    store.close()
    return directory


def epoch_of(directory: str) -> str:
    store = open_store(directory, readonly=True)
    try:
        return store.epoch
    finally:
        store.close()


SUMMARY = re.compile(r"exported (\d+) records in \d+\.\d s \([\d,]+/s; opening the tenant \d+\.\d s\): (.*)")


def test_export_to_standard_output_and_a_summary_on_standard_error(run, tenant):
    code, out, err = run("export", SCHEMA, "blog-post", "user", "-q")
    assert code == 0
    assert [json.loads(line)["model"] for line in out.splitlines()] == ["User", "User", "BlogPost"]
    match = SUMMARY.fullmatch(err.rstrip("\n"))
    assert match is not None, err
    assert match.group(2) == f"User 2 (watermark 2), BlogPost 1 (watermark 1); epoch {epoch_of(tenant)}"
    assert err.count("\n") == 1
    code, dash, _err = run("export", SCHEMA, "blog-post", "user", "-q", "-o", "-")
    assert (code, dash) == (0, out)


def test_export_as_of_in_route_form_through_the_command_line(run, tenant):
    code, out, err = run("export", SCHEMA, "user", "--as-of", "user=1", "-q")
    assert code == 0, err
    assert [json.loads(line)["record"]["id"] for line in out.splitlines()] == [1]
    code, out, err = run("export", SCHEMA, "user", "blog-post", "--as-of", "blog-post=0", "-q")
    assert code == 0, err
    assert [json.loads(line)["model"] for line in out.splitlines()] == ["User", "User"]
    code, out, err = run("export", SCHEMA, "user", "--as-of", "blogpost=1", "-q")
    assert (code, out) == (2, "")
    assert err == "dbsvc: error: --as-of 'blogpost=1': 'blogpost' is not one of the exported models (User)\n"


def test_export_to_a_file_writes_what_standard_output_gets(run, tenant, tmp_path):
    _code, out, _err = run("export", SCHEMA, "-q")
    code, stdout, err = run("export", SCHEMA, "-q", "-o", str(tmp_path / "x.jsonl"))
    assert (code, stdout) == (0, "")
    assert (tmp_path / "x.jsonl").read_text() == out
    assert SUMMARY.fullmatch(err.rstrip("\n")) is not None


def test_export_beside_a_lock_holder_exports_a_copy_and_says_so(run, tenant, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    _code, direct, _err = run("export", SCHEMA, "-q")
    image = dir_image(tenant)
    lock = WriterLock.acquire(tenant)
    try:
        code, out, err = run("export", SCHEMA, "-q")
    finally:
        lock.release()
    assert (code, out) == (0, direct)
    assert err.endswith(
        f" (from a consistent copy taken beside the running server, process {os.getpid()}, at offset 3)\n"
    )
    assert dir_image(tenant) == image
    assert os.listdir(scratch) == []  # the copy is removed


def test_the_note_names_a_holder_without_a_pid_a_server(tenant, tmp_path):
    from dbsvc.datatools.commands import export_running

    seen = []

    def export_from(copy: str) -> str:
        seen.append((os.path.basename(os.path.dirname(copy)), os.path.basename(copy), sorted(os.listdir(copy))))
        seen.append(json.loads(Path(copy, "manifest.json").read_text())["tenant"])
        return "R"

    report, note = export_running(tenant, "t", None, export_from)
    assert report == "R"
    (scratch, name, listed), manifest_tenant = seen
    assert scratch.startswith("dbsvc-export-") and name == "t" and manifest_tenant == "t"
    assert listed == ["history", "log", "manifest.json", "schema.json"]
    assert note == " (from a consistent copy taken beside the running server, a server, at offset 3)"


def test_a_copy_that_fails_names_the_two_step_way(run, tenant, monkeypatch):
    from dbsvc.datatools import commands

    monkeypatch.setattr(
        "dbsvc.datatools.backup.write_new", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device"))
    )
    lock = WriterLock.acquire(tenant)
    try:
        code, out, err = run("export", SCHEMA, "-q")
    finally:
        lock.release()
    assert (code, out) == (2, "")
    assert err == (
        f"dbsvc: error: tenant directory {tenant!r} is locked by process {os.getpid()}; one writer per data "
        "directory; "
        f"{commands.export_a_backup()} (the copy failed: [Errno 28] No space left on device)\n"
    )
    assert commands.export_a_backup() == (
        "to export while a server runs, export a backup of it: dbsvc backup DIR, then "
        "SERVICE_DATA=<DIR's parent> SERVICE_TENANT=<DIR's name> dbsvc export ..."
    )


def test_import_prints_a_summary_by_model(run, tenant, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"model": "User", "record": user(7)})
        + "\n"
        + json.dumps({"model": "Comment", "record": {"id": 1, "post_id": 1, "author_id": 7, "body": "hi"}})
        + "\n"
    )
    code, out, err = run("import", SCHEMA, str(path), "-q")
    assert (code, out) == (0, "")
    assert re.fullmatch(
        r"imported 2 records in \d+\.\d s \([\d,]+/s; read and validate \d+\.\d s, check \d+\.\d s, "
        r"write \d+\.\d s\): User 1, Comment 1\n",
        err,
    ), err


def test_a_refused_import_prints_its_lines_then_one_error_line(run, tenant, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(f'{{"model": "User", "record": {{"id": {i}, "name": "x"}}}}\n' for i in range(3, 25)))
    image = dir_image(tenant)
    code, out, err = run("import", SCHEMA, str(path), "-q")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert len(lines) == 21
    assert lines[0] == f"{path}:1: User: missing required field 'email' (a string)"
    assert lines[19] == f"{path}:20: User: missing required field 'email' (a string)"
    assert lines[20] == "dbsvc: error: import refused: 22 bad line(s) (2 more not shown); nothing was imported"
    assert dir_image(tenant) == image
    path.write_text('{"model": "User", "record": {"id": 3, "name": "x"}}\n')
    code, _out, err = run("import", SCHEMA, str(path), "-q")
    assert (code, err.splitlines()[-1]) == (1, "dbsvc: error: import refused: 1 bad line(s); nothing was imported")
    path.write_text("".join(f'{{"model": "User", "record": {{"id": {i}, "name": "x"}}}}\n' for i in range(3, 23)))
    code, _out, err = run("import", SCHEMA, str(path), "-q")
    assert err.splitlines()[-1] == "dbsvc: error: import refused: 20 bad line(s); nothing was imported"


def test_import_creates_the_default_tenant_but_not_a_named_one(run, env, tmp_path, monkeypatch):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"model": "User", "record": user(1)}) + "\n")
    code, _out, err = run("import", SCHEMA, str(path), "-q")
    assert (code, err) == (
        1,
        f"dbsvc: error: tenant 't' does not exist under {str(env)!r}: create it with `dbsvc tenant create t`\n",
    )
    assert not os.path.exists(env / "t")
    monkeypatch.delenv("SERVICE_TENANT")
    code, _out, err = run("import", SCHEMA, str(path), "-q")
    assert code == 0, err
    assert sorted(os.listdir(env)) == ["default"]
    path.write_text(json.dumps({"model": "User", "record": user(2)}) + "\n")
    code, _out, err = run("import", SCHEMA, str(path), "-q")  # into the default tenant it made
    assert code == 0, err
    store = open_store(str(env / "default"), readonly=True)
    try:
        assert [r["id"] for r in store.list_records("User", Query())[0]] == [1, 2]
    finally:
        store.close()
    code, _out, err = run("import", SCHEMA, str(tmp_path / "missing.jsonl"), "-q")
    assert (code, err) == (2, f"dbsvc: error: cannot import {str(tmp_path / 'missing.jsonl')!r}: no such file\n")


def test_a_file_that_cannot_be_imported_creates_no_default_tenant(run, env, tmp_path, monkeypatch):
    monkeypatch.delenv("SERVICE_TENANT")
    code, _out, _err = run("import", SCHEMA, str(tmp_path), "-q")
    assert code == 2
    assert not os.path.exists(env)


def test_import_frames_needs_a_file(run, env, tmp_path):
    code, _out, err = run("import", SCHEMA, "--frames", str(tmp_path))
    assert (code, err) == (
        2,
        f"dbsvc: error: --frames {str(tmp_path)!r}: not a file (expected a `replicate --out` file)\n",
    )


def test_backup_and_restore_print_what_they_did(run, tenant, env, tmp_path):
    bk = tmp_path / "bk"
    code, out, err = run("backup", str(bk))
    assert (code, err) == (0, "")
    manifest = json.loads((bk / "manifest.json").read_text())
    size = sum(f["bytes"] for f in manifest["files"].values())
    assert out == (f"backed up tenant 't' to {bk}: {size} bytes, head offset 3, epoch {epoch_of(tenant)}\n")
    code, out, err = run("tenant", "create", "copy", "--from", str(bk))
    assert (code, err) == (0, "")
    assert out == (
        f"created tenant 'copy' from the backup in {bk} (tenant 't', taken {manifest['created']}, head offset 3)\n"
    )
    assert epoch_of(str(env / "copy")) == epoch_of(tenant)


def test_backup_of_a_never_opened_tenant_says_so(run, env, tmp_path):
    create_tenant(str(env), "t")
    code, out, _err = run("backup", str(tmp_path / "bk"))
    assert (code, out) == (
        0,
        f"backed up tenant 't' to {tmp_path / 'bk'}: 0 bytes, head offset 0, epoch (never opened)\n",
    )


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_export_draws_a_bar_on_a_terminal_unless_quiet(run, tenant, monkeypatch, tmp_path):
    for quiet in (True, False):
        err = Tty()
        monkeypatch.setattr(sys, "stderr", err)
        args = ["export", SCHEMA, "-o", str(tmp_path / f"{quiet}.jsonl")] + (["-q"] if quiet else [])
        assert main(args) == 0
        bar = "\rexport  [##########################] 100%  3 records  "
        assert err.getvalue().startswith(bar) != quiet, err.getvalue()
        assert err.getvalue().startswith("exported 3 records") == quiet
    monkeypatch.setattr(sys, "stderr", err := Tty())
    assert main(["export", SCHEMA]) == 0
    assert err.getvalue().startswith("\rexport  [")


@pytest.fixture
def frames_file(tenant, tmp_path) -> Path:
    """tenant t's log without its 40-byte header: a `replicate --out` file of 3 frames."""
    out = tmp_path / "events.log"
    out.write_bytes(Path(tenant, "log").read_bytes()[40:])
    return out


def test_import_frames_rebuilds_the_default_tenant_and_reports_a_torn_tail(run, env, frames_file, monkeypatch):
    size = frames_file.stat().st_size
    with open(frames_file, "ab") as f:
        f.write(b"\x00" * 5)
    monkeypatch.delenv("SERVICE_TENANT")
    code, out, err = run("import", SCHEMA, "--frames", str(frames_file))
    assert (code, out) == (0, "")
    torn, summary = err.splitlines()
    assert (
        torn
        == f"{frames_file}: left out a torn tail of 5 bytes at byte {size} (truncated frame header (5 of 16 bytes))"
    )
    assert re.fullmatch(
        r"imported 3 frames in \d+\.\d\d s \([\d,]+ frames/s\): head offset 3, a new history [0-9a-f]{8} "
        r"\(no events.log.history\); records: User 2, BlogPost 1, Comment 0",
        summary,
    ), summary
    store = open_store(str(env / "default"), readonly=True)
    try:
        assert store.head_offset == 3
    finally:
        store.close()


def test_import_frames_without_a_torn_tail_prints_the_summary_only(run, env, frames_file):
    create_tenant(str(env), "u")
    code, out, err = run_as(run, "u", "import", SCHEMA, "--frames", str(frames_file))
    assert (code, out) == (0, "")
    assert err.startswith("imported 3 frames in ") and err.count("\n") == 1


def run_as(run, tenant: str, *argv: str):
    os.environ["SERVICE_TENANT"] = tenant  # the env fixture's monkeypatch restores it
    return run(*argv)


def test_a_refused_import_frames_prints_why_and_that_the_tenant_was_left(run, env, tenant, frames_file):
    image = dir_image(tenant)
    code, out, err = run("import", SCHEMA, "--frames", str(frames_file))
    assert (code, out) == (1, "")
    assert err == (
        "dbsvc: error: tenant 't' holds rows up to offset 3: --frames rebuilds an empty tenant only (its offsets "
        "would name other rows); create a new tenant and import into it\n"
    )
    create_tenant(str(env), "v")
    first = frames_file.read_bytes()[:30]  # the first frame's header and 14 bytes of its payload
    frames_file.write_bytes(first)
    length = int.from_bytes(first[12:16], "big")
    code, out, err = run_as(run, "v", "import", SCHEMA, "--frames", str(frames_file))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"{frames_file}: holds no whole frame (truncated payload (14 of {length} bytes))",
        "dbsvc: error: import refused; tenant 'v' was left as it was",
    ]
    assert dir_image(tenant) == image


def test_import_frames_into_a_missing_named_tenant_is_refused(run, env, frames_file):
    code, _out, err = run_as(run, "w", "import", SCHEMA, "--frames", str(frames_file))
    assert (code, err) == (
        1,
        f"dbsvc: error: tenant 'w' does not exist under {str(env)!r}: create it with `dbsvc tenant create w`\n",
    )
    assert sorted(os.listdir(env)) == ["t"]  # no tenant w was created
