"""`dbsvc import`'s FILE argument (issue 30, item 7): a file that cannot be imported as a
whole (missing, a directory, unreadable, a FIFO, not UTF-8) gets one `dbsvc: error:` line
saying what is wrong with it, exit status 2, and the tenant stays as it was; a UTF-8 byte
order mark at the start of the file is skipped, as most JSON Lines readers do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dbsvc.runtime import Query
from dbsvc.storage.tenants import create_tenant
from support.cli import run_dbsvc
from support.cli import run_on_tenant as cli
from support.storage import open_store, user
from support.tree import dir_image as _dir_image

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = str(ROOT / "schemas" / "blog.dbs")
LINE = json.dumps({"model": "User", "record": user(500)}) + "\n"


def dir_image(path: str) -> dict[str, bytes]:
    """Every file's bytes but LOCK's (an import that gets as far as locking writes its pid)."""
    return {name: data for name, data in _dir_image(path).items() if name != "LOCK"}


def users(directory: str) -> list[int]:
    store = open_store(directory, readonly=True)
    try:
        return [r["id"] for r in store.list_records("User", Query(limit=1000))[0]]
    finally:
        store.close()


@pytest.fixture
def tenant(data) -> str:
    return create_tenant(str(data), "t")


def refused(data: Path, tenant: str, path: Path, run=cli) -> str:
    """Run the import of `path` (`run`: a child process, or `cli_in_process`), check it is
    refused with one line and exit 2 and that the tenant is unchanged; the line."""
    before = dir_image(tenant)
    done = run(data, "import", SCHEMA, str(path), "-q")
    assert done.returncode == 2, done.stderr
    assert dir_image(tenant) == before
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dbsvc: error: cannot import {str(path)!r}: "), line
    return line


def test_a_file_starting_with_a_utf8_bom_is_imported(data, tenant, tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + LINE.encode())
    done = cli(data, "import", SCHEMA, str(path), "-q")
    assert done.returncode == 0, done.stderr
    assert users(tenant) == [500]


def test_a_bom_past_the_first_line_is_a_bad_line_that_names_it(data, tenant, tmp_path):
    path = tmp_path / "bom2.jsonl"
    path.write_bytes(LINE.encode() + b"\xef\xbb\xbf" + json.dumps({"model": "User", "record": user(501)}).encode())
    done = cli(data, "import", SCHEMA, str(path), "-q")
    assert done.returncode == 1, done.stderr
    assert (
        f"{path}:2: a UTF-8 byte order mark (EF BB BF) starts the line: only the file may start with one" in done.stderr
    )
    assert users(tenant) == []


def test_a_directory_is_named_a_directory(data, tenant, tmp_path, cli_in_process):
    path = tmp_path / "dump"
    path.mkdir()
    assert refused(data, tenant, path, cli_in_process).endswith("it is a directory, not a JSON Lines file")


def test_a_missing_file_is_a_usage_error(data, tenant, tmp_path, cli_in_process):
    assert refused(data, tenant, tmp_path / "missing.jsonl", cli_in_process).endswith("no such file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file_says_permission_denied(data, tenant, tmp_path, cli_in_process):
    path = tmp_path / "secret.jsonl"
    path.write_text(LINE)
    path.chmod(0)
    assert refused(data, tenant, path, cli_in_process).endswith("permission denied: this user may not read it")


def test_a_fifo_is_refused_without_waiting_for_a_writer(data, tenant, tmp_path):
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    line = refused(data, tenant, path)  # the run has a timeout: it must not block
    assert line.endswith("it is a FIFO, not a regular file: save the data to a file and import that")


@pytest.mark.parametrize(
    "data_bytes, said",
    [
        (LINE.encode("utf-16"), "it is not UTF-8: it starts with a UTF-16 byte order mark"),
        (LINE.encode("utf-16-le"), "it is not UTF-8: its first line holds NUL bytes (UTF-16 or UTF-32?)"),
        (b"\x00\x00\xfe\xff" + LINE.encode("utf-32-be"), "it is not UTF-8: it starts with a UTF-32 byte order mark"),
        (
            json.dumps({"model": "User", "record": user(502, name="Zoë")}, ensure_ascii=False).encode("latin-1")
            + b"\n",
            "it is not UTF-8: its first line has the byte 0xeb at byte",
        ),
    ],
    ids=["utf-16-bom", "utf-16-le", "utf-32-bom", "latin-1"],
)
def test_a_file_that_is_not_utf8_is_refused_as_a_whole(data, tenant, tmp_path, data_bytes, said, cli_in_process):
    path = tmp_path / "encoded.jsonl"
    path.write_bytes(data_bytes)
    line = refused(data, tenant, path, cli_in_process)
    assert said in line and "dbsvc import reads UTF-8" in line


def test_a_refused_file_creates_no_default_tenant(data, tmp_path):
    path = tmp_path / "dump"
    path.mkdir()
    done = run_dbsvc("import", SCHEMA, str(path), env={"SERVICE_DATA": str(data)})
    assert done.returncode == 2, done.stderr
    assert not (data / "default").exists()
