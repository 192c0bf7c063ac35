"""Offline compaction (compact.py `compact_directory`, `dbsvc compact`) at the unit where it
decides: which records, fields, ids and versions (versions.py: the offset of each live
record's last write) the new snapshot holds, in which model and field order, and the report
line word for word (rows, live records, head, the torn tail dropped, the bytes retained).
A tenant is written through a store, compacted in process, and its new snapshot read back
with `decode_snapshot`; expected values are written out here."""

from __future__ import annotations

import copy
import os
import re

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import CorruptLog
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.compact import compact_directory
from dbsvc.storage.snapshotreader import decode_snapshot
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, open_store, post, run, user

REPORT = re.compile(
    r"compacted (.+): (\d+) log rows -> (\d+) live records, head offset (\d+), new epoch ([0-9a-f]{32})(.*)"
)


def snapshot_of(tenant: str):
    path = os.path.join(tenant, "snapshot")
    with open(path, "rb") as f:
        return decode_snapshot(path, f.read())


def models_of(image) -> dict:
    """name -> (fields, rows, max_id, keys, versions), in the file's model order."""
    return {m.name: (m.fields, [list(r) for r in m.rows], m.max_id, m.keys, list(m.versions)) for m in image.models}


def values(record: dict) -> list:
    return list(record.values())


USER_FIELDS = ["id", "email", "name", "age", "role", "joined", "profile"]
USER_KEYS = ["id", "email", "name", "age", "role", "joined"]
POST_FIELDS = ["id", "author_id", "title", "body", "published", "score", "tags"]
POST_KEYS = ["id", "author_id", "title", "published", "score"]


@pytest.fixture
def written(tenant) -> str:
    """Offsets 1-3 insert users 1-3, 4 renames user 1, 5 deletes user 2, 6 inserts post 1."""
    s = open_store(tenant)
    try:
        for i in (1, 2, 3):
            run(s.insert("User", user(i)))
        run(s.replace("User", 1, user(1, name="renamed")))
        run(s.delete("User", 2))
        run(s.insert("BlogPost", post(1, author=3)))
    finally:
        s.close()
    return tenant


def test_the_snapshot_holds_each_live_record_with_its_last_writes_offset_in_schema_order(written):
    report = compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    image = snapshot_of(written)
    match = REPORT.fullmatch(report)
    assert match is not None, report
    assert match.groups() == (written, "6", "3", "6", image.epoch, "")
    assert image.head_offset == 6
    models = models_of(image)
    assert list(models) == ["User", "BlogPost", "Comment"]
    assert models["User"] == (USER_FIELDS, [values(user(1, name="renamed")), values(user(3))], 3, USER_KEYS, [4, 3])
    assert models["BlogPost"][1:] == ([values(post(1, author=3))], 1, POST_KEYS, [6])
    assert models["BlogPost"][0] == POST_FIELDS
    assert models["Comment"][1:3] == ([], 0)
    with open(os.path.join(written, "log"), "rb") as f:
        header = f.read()
    # the new epoch's header alone: magic, version, epoch, base offset 6, crc32
    assert len(header) == 40 and header[:12] == b"DBSVCLOG\x00\x00\x00\x01"
    assert header[12:36] == bytes.fromhex(image.epoch) + (6).to_bytes(8, "big")
    assert not os.path.exists(os.path.join(written, "log.retained"))


def test_a_second_compaction_carries_the_snapshots_versions_and_the_logs_new_ones(written):
    compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    s = open_store(written)
    try:
        run(s.insert("User", user(4)))  # offset 7
        run(s.replace("User", 3, user(3, name="three")))  # 8
        run(s.delete("User", 1))  # 9
    finally:
        s.close()
    report = compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    assert REPORT.fullmatch(report).groups()[1:4] == ("3", "3", "9")
    models = models_of(snapshot_of(written))
    assert models["User"][1:] == ([values(user(3, name="three")), values(user(4))], 4, USER_KEYS, [8, 7])
    assert models["BlogPost"][1:] == ([values(post(1, author=3))], 1, POST_KEYS, [6])  # from the snapshot


def test_without_a_description_the_logs_models_and_fields_are_kept_in_the_order_met(written):
    report = compact_directory(written, None, retain_bytes=0)
    assert REPORT.fullmatch(report).groups()[1:4] == ("6", "3", "6")
    models = models_of(snapshot_of(written))
    # no snapshot: each model as the log first names it, its fields as its first record's,
    # and no key columns (a reader parses the rows)
    assert models == {
        "User": (USER_FIELDS, [values(user(1, name="renamed")), values(user(3))], 3, [], [4, 3]),
        "BlogPost": (POST_FIELDS, [values(post(1, author=3))], 1, [], [6]),
    }


def test_without_a_description_the_snapshots_models_come_first_then_the_logs(written):
    compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    s = open_store(written)
    try:
        run(
            s.insert(
                "Comment", {"id": 5, "post_id": 1, "author_id": 3, "body": "hi", "created": "2026-01-02T00:00:00Z"}
            )
        )
        run(s.delete("User", 1))  # 8
    finally:
        s.close()
    report = compact_directory(written, None, retain_bytes=0)
    assert REPORT.fullmatch(report).groups()[1:4] == ("2", "3", "8")
    models = models_of(snapshot_of(written))
    assert list(models) == ["User", "BlogPost", "Comment"]
    assert models["User"] == (USER_FIELDS, [values(user(3))], 3, USER_KEYS, [3])
    assert models["Comment"][1:3] == ([[5, 1, 3, "hi", "2026-01-02T00:00:00Z"]], 5)
    assert models["Comment"][4] == [7]


def test_a_torn_tail_is_dropped_and_said_and_the_retained_bytes_are_said(written):
    log = os.path.join(written, "log")
    size = os.path.getsize(log)
    with open(log, "ab") as f:
        f.write(b"\x01\x02\x03\x04\x05")
    report = compact_directory(written, BLOG.DESCRIPTION, retain_bytes=1 << 20)
    groups = REPORT.fullmatch(report).groups()
    assert groups[1:4] == ("6", "3", "6")
    retained = os.path.getsize(os.path.join(written, "log.retained"))
    assert groups[5] == f", dropped a torn tail of 5 bytes, retained {retained} bytes for replicas (offsets after 0)"
    assert retained == size  # the six frames and the segment's own header: the whole old log


def test_an_interrupted_compaction_is_discarded_first_and_said(written, caplog):
    # a crash before the commit point of an earlier compaction left its .new files behind
    for name in ("snapshot.new", "log.new"):
        with open(os.path.join(written, name), "wb") as f:
            f.write(b"half written")
    with caplog.at_level("WARNING", logger="dbsvc.storage"):
        report = compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"{written}: discarding an interrupted compaction (before its commit point)")
    ]
    assert REPORT.fullmatch(report).groups()[1:4] == ("6", "3", "6")
    assert not any(name.endswith(".new") for name in os.listdir(written))
    s = open_store(written)
    try:
        assert s.get_versioned("User", 1)[2] == 4
    finally:
        s.close()


def test_a_damaged_snapshot_is_refused_naming_its_file_and_nothing_is_replaced(written):
    compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    path = os.path.join(written, "snapshot")
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"X")
    before = {name: open(os.path.join(written, name), "rb").read() for name in ("snapshot", "log")}
    with pytest.raises(CorruptLog) as info:
        compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    assert info.value.path == path and str(info.value).startswith(f"{path}: corrupt at byte 0: ")
    assert {name: open(os.path.join(written, name), "rb").read() for name in ("snapshot", "log")} == before


def test_damage_before_the_logs_tail_is_refused_naming_the_log(written):
    path = os.path.join(written, "log")
    with open(path, "r+b") as f:
        f.seek(40 + 16)  # the first frame's payload: its CRC fails, good frames follow
        f.write(b"X")
    with pytest.raises(CorruptLog) as info:
        compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    second = 40 + 16 + int.from_bytes(open(path, "rb").read()[40 + 12 : 40 + 16], "big")
    assert info.value.path == path and info.value.offset == 40
    assert info.value.reason == (
        f"payload checksum mismatch; a good frame follows at byte {second}, so this is not a torn tail"
    )
    assert not os.path.exists(os.path.join(written, "snapshot"))


def test_a_log_that_does_not_continue_the_snapshot_is_refused_naming_the_log(written, tmp_path):
    compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    other = create_tenant(str(tmp_path / "elsewhere"), "other")
    open_store(other).close()  # a log of another epoch, base 0
    path = os.path.join(written, "log")
    with open(os.path.join(other, "log"), "rb") as f:
        header = f.read(40)
    with open(path, "wb") as f:
        f.write(header)
    with pytest.raises(CorruptLog) as info:
        compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    assert info.value.path == path and info.value.offset == 0
    assert (
        info.value.reason.startswith("log (epoch ") and " does not continue the snapshot (epoch " in info.value.reason
    )


TAGS = compile_schema(parse_schema("model Tag {\n  label str @unique\n  id int @id\n}\n"))


def test_a_model_whose_id_is_not_its_first_field_keeps_its_rows_in_id_order(tmp_path):
    tenant = create_tenant(str(tmp_path / "data"), "tags")
    s = Store.open(tenant, TAGS.MODELS, TAGS.DESCRIPTION)
    try:
        run(s.insert("Tag", {"label": "b", "id": 1}))
        run(s.insert("Tag", {"label": "a", "id": 2}))
    finally:
        s.close()
    for _ in range(2):  # from the log, then from the snapshot the first one wrote
        compact_directory(tenant, TAGS.DESCRIPTION, retain_bytes=0)
        assert models_of(snapshot_of(tenant))["Tag"] == (
            ["label", "id"],
            [["b", 1], ["a", 2]],
            2,
            ["label", "id"],
            [1, 2],
        )
    s = Store.open(tenant, TAGS.MODELS, TAGS.DESCRIPTION)
    try:
        assert s.get_versioned("Tag", 2)[2] == 2
    finally:
        s.close()


def test_a_described_field_the_snapshot_lacks_is_null_in_every_row(written):
    compact_directory(written, BLOG.DESCRIPTION, retain_bytes=0)
    grown = copy.deepcopy(BLOG.DESCRIPTION)
    described = grown["models"][0]
    described["fields"].append({**described["fields"][-1], "name": "nick"})
    compact_directory(written, grown, retain_bytes=0)
    fields, rows, max_id, _keys, versions = models_of(snapshot_of(written))["User"]
    assert fields == [*USER_FIELDS, "nick"]
    assert rows == [[*values(user(1, name="renamed")), None], [*values(user(3)), None]]
    assert (max_id, versions) == (3, [4, 3])


def test_a_second_compaction_retains_the_older_segment_before_the_new_frames(written):
    first_log = os.path.getsize(os.path.join(written, "log"))  # header + offsets 1-6
    compact_directory(written, BLOG.DESCRIPTION, retain_bytes=1 << 20)
    s = open_store(written, retain_bytes=1 << 20)
    try:
        run(s.insert("User", user(4)))  # offset 7
    finally:
        s.close()
    second_log = os.path.getsize(os.path.join(written, "log"))  # header + offset 7
    report = compact_directory(written, BLOG.DESCRIPTION, retain_bytes=1 << 20)
    retained = os.path.getsize(os.path.join(written, "log.retained"))
    assert retained == first_log + second_log - 40  # one header, offsets 1-7
    assert report.endswith(f", retained {retained} bytes for replicas (offsets after 0)")


def test_an_id_of_zero_leaves_the_largest_id_at_zero(tenant):
    s = open_store(tenant)
    try:
        run(s.insert("User", user(0)))
    finally:
        s.close()
    compact_directory(tenant, BLOG.DESCRIPTION, retain_bytes=0)
    assert models_of(snapshot_of(tenant))["User"][2] == 0
