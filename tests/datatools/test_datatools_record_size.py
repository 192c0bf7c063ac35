"""Issue 30 item 2 through `dbsvc import`: a record whose log frame no open would take
(70 MB: over the 64 MiB frame limit) used to be imported with exit 0, after which the
tenant refused to open ("frame length ... exceeds 67108864") or, with nothing after the
frame, cut it as a torn tail. Now the import refuses the line as `FILE:LINE: record too
large: ...`, writes nothing, and the tenant opens with what it held; a record exactly at
the record limit (storage/events.py "Sizes") is imported and survives a reopen.

These are the real-size cases (tens of MB each); the size rule near a small limit, as a
property, is in tests/storage/test_storage_record_size.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dbsvc.runtime import Query, compact_json
from dbsvc.storage.events import record_limit
from dbsvc.storage.logfile import MAX_PAYLOAD
from dbsvc.storage.tenants import create_tenant
from support.cli import run_on_tenant as cli
from support.storage import open_store, user

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = str(ROOT / "schemas" / "blog.dbs")
MAX_RECORD = record_limit(MAX_PAYLOAD)
ALL = Query(limit=1000)


@pytest.fixture
def tenant(data) -> str:
    directory = create_tenant(str(data), "t")
    s = open_store(directory)
    try:
        for i in (1, 2):
            s.insert_batch([("User", user(i))])
    finally:
        s.close()
    return directory


def big_user(i: int, size: int) -> dict:
    """User `i` whose stored JSON is exactly `size` bytes (a long `profile` string)."""
    rec = user(i, profile="")
    rec["profile"] = "x" * (size - len(compact_json(rec).encode()))
    return rec


def write_lines(path: Path, records: list[dict]) -> None:
    with open(path, "w") as f:
        for rec in records:
            f.write(json.dumps({"model": "User", "record": rec}) + "\n")


def stored_users(directory: str) -> dict:
    s = open_store(directory)
    try:
        return {r["id"]: r for r in s.list_records("User", ALL)[0]}
    finally:
        s.close()


def test_import_of_a_70_mb_record_is_refused_and_the_tenant_still_opens(data, tenant, tmp_path):
    path = tmp_path / "big.jsonl"
    write_lines(path, [user(3), big_user(4, 70_000_000), user(5)])
    before = stored_users(tenant)
    done = cli(data, "import", SCHEMA, str(path), "-q")
    assert done.returncode == 1, done.stderr
    assert (
        f"{path}:2: record too large: the User record is 70000000 bytes of JSON, the limit is "
        f"{MAX_RECORD}" in done.stderr
    )
    assert "nothing was imported" in done.stderr
    assert stored_users(tenant) == before and sorted(before) == [1, 2]


def test_import_of_a_record_at_the_limit_is_stored_and_reopens(data, tenant, tmp_path):
    path = tmp_path / "limit.jsonl"
    at_limit = big_user(4, MAX_RECORD)
    write_lines(path, [user(3), at_limit])
    done = cli(data, "import", SCHEMA, str(path), "-q")
    assert done.returncode == 0, done.stderr
    after = stored_users(tenant)
    assert sorted(after) == [1, 2, 3, 4] and after[4] == at_limit
