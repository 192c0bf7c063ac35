"""dbsvc/datatools/load.py in-process (issue 33): every decision of `dbsvc import` at the unit
where it is made, over real files and real tenants in tmp_path.

The file is read in chunks of whole lines (`read_records`, CHUNK_BYTES = 1 MiB); the seam
`chunk_bytes` lets a test use chunks of a few lines, and one test imports a real file larger
than the real chunk. Expectations are literals: line numbers, messages, counts.
"""

from __future__ import annotations

import gc
import io
import json
import os
from pathlib import Path

import pytest

from dbsvc.datatools import load
from dbsvc.datatools.load import ImportReport, import_file, may_be_near_the_record_limit, open_source, read_records
from dbsvc.datatools.progress import Progress
from dbsvc.errors import (
    BatchRejected,
    ConfigError,
    ForeignKeyViolation,
    ImportRejected,
    PayloadTooLarge,
    UniqueViolation,
)
from dbsvc.runtime import Query
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, open_store, post, user
from support.tree import dir_image


def users_line(i: int, **over) -> bytes:
    return json.dumps({"model": "User", "record": user(i, **over)}).encode()


def stored(directory: str, model: str = "User") -> list[dict]:
    store = open_store(directory, readonly=True)
    try:
        return store.list_records(model, Query(limit=1 << 30))[0]
    finally:
        store.close()


def quiet() -> Progress:
    return Progress("t", 0, "lines", stream=io.StringIO(), quiet=True)


@pytest.fixture
def tenant(data) -> str:
    return create_tenant(str(data), "t")


def rejected(directory: str, path, **kw) -> ImportRejected:
    with pytest.raises(ImportRejected) as caught:
        import_file(directory, BLOG, str(path), quiet=True, **kw)
    return caught.value


# -- reading in chunks ------------------------------------------------------------------------


def test_lines_across_many_small_chunks_are_read_whole_numbered_and_in_order(tmp_path):
    """Chunks of 100 bytes: every line (CRLF ones, blank ones, one longer than a chunk, the
    last without a newline) is read whole, and each row keeps its own line number."""
    lines = [users_line(i) + (b"\r\n" if i % 3 == 0 else b"\n") for i in range(1, 13)]
    lines.insert(4, b"\n")  # line 5 blank
    lines.insert(8, b"   \r\n")  # line 9 blank, CRLF
    lines.append(users_line(13, profile={"long": "x" * 350}))  # 13th record, no final newline
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"".join(lines))
    problems = load.Problems(str(path))
    with open(path, "rb") as f:
        rows, numbers, count, longest = read_records(f, BLOG, quiet(), problems, chunk_bytes=100)
    assert problems.count == 0
    assert [r["id"] for _m, r in rows] == list(range(1, 14))
    assert numbers == [1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 15]
    assert count == 15
    assert longest == len(lines[-1])
    assert rows[-1][1]["profile"] == {"long": "x" * 350}


def test_the_longest_line_is_the_longest_of_every_chunk_not_of_the_last(tmp_path):
    path = tmp_path / "f.jsonl"
    long_line = users_line(1, name="n" * 90) + b"\n"
    path.write_bytes(long_line + b"".join(users_line(i) + b"\n" for i in range(2, 20)))
    with open(path, "rb") as f:
        _rows, _numbers, count, longest = read_records(f, BLOG, quiet(), load.Problems("f"), chunk_bytes=50)
    assert (count, longest) == (19, len(long_line))


def test_bad_lines_in_later_chunks_are_named_by_their_own_line_numbers(tenant, tmp_path):
    lines = [users_line(i) + b"\n" for i in range(1, 41)]
    lines[2] = b"{not json\n"  # line 3
    lines[16] = b'{"model": "Nope", "record": {}}\r\n'  # line 17, CRLF
    lines[39] = b'{"model": "User", "record": 7}'  # line 40, no final newline
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"".join(lines))
    before = dir_image(tenant)
    exc = rejected(tenant, path, chunk_bytes=120)
    assert exc.problems == [
        f"{path}:3: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        f"{path}:17: unknown model 'Nope': expected one of User, BlogPost, Comment",
        f'{path}:40: User: "record" must be an object of its fields',
    ]
    assert exc.count == 3
    assert {k: v for k, v in dir_image(tenant).items() if k != "LOCK"} == {
        k: v for k, v in before.items() if k != "LOCK"
    }


def test_bad_utf8_in_one_chunk_leaves_the_other_lines_of_that_chunk_good(tenant, tmp_path):
    """A chunk that is not UTF-8 as a whole goes line by line: only its bad line is named."""
    lines = [users_line(i) + b"\n" for i in range(1, 9)]
    lines[5] = b'{"model": "User", "record": {"id": 6, "email": "\xff", "name": "Z"}}\n'
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"".join(lines))
    exc = rejected(tenant, path, chunk_bytes=300)
    assert exc.count == 1
    (line,) = exc.problems
    assert line.startswith(f"{path}:6: not JSON: 'utf-8' codec can't decode byte 0xff")


def test_a_file_larger_than_the_real_read_chunk_imports_every_record(tenant, tmp_path):
    """The real CHUNK_BYTES (1 MiB): a 1.3 MB file, CRLF lines and no final newline, is read
    in two chunks; a bad line past the first chunk is named by its line number, and the
    fixed file imports every record."""
    assert load.CHUNK_BYTES == 1 << 20
    count = 6000
    pad = "p" * 150
    lines = [users_line(i, profile=f"{pad}{i}") + (b"\r\n" if i % 2 else b"\n") for i in range(1, count + 1)]
    lines[-1] = lines[-1].rstrip(b"\r\n")
    size = sum(map(len, lines))
    assert 1.2e6 < size < 2 << 20
    bad = list(lines)
    bad[5999] = b'{"model": "User", "record": {"id": 6000, "name": "x"}}'
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(bad))
    exc = rejected(tenant, path)
    assert exc.problems == [f"{path}:6000: User: missing required field 'email' (a string)"]
    path.write_bytes(b"".join(lines))
    report = import_file(tenant, BLOG, str(path), quiet=True)
    assert (report.lines, report.counts) == (6000, {"User": 6000})
    got = stored(tenant)
    assert [r["id"] for r in got] == list(range(1, count + 1))
    assert got[-1]["profile"] == f"{pad}6000"


# -- bad lines: how many are shown, where a set check points ------------------------------------


def test_twenty_bad_lines_are_shown_and_all_are_counted(tenant, tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text("".join(f'{{"model": "User", "record": {{"id": {i}, "name": "x"}}}}\n' for i in range(1, 23)))
    exc = rejected(tenant, path, chunk_bytes=200)
    assert exc.count == 22
    assert len(exc.problems) == 20
    assert exc.problems[19] == f"{path}:20: User: missing required field 'email' (a string)"
    path.write_text("".join(f'{{"model": "User", "record": {{"id": {i}, "name": "x"}}}}\n' for i in range(1, 21)))
    exc = rejected(tenant, path)
    assert (exc.count, len(exc.problems)) == (20, 20)


def test_set_checks_name_the_other_line_or_the_tenant(tenant, tmp_path):
    seed = tmp_path / "seed.jsonl"
    seed.write_bytes(users_line(1) + b"\n")
    import_file(tenant, BLOG, str(seed), quiet=True)
    path = tmp_path / "f.jsonl"
    path.write_bytes(
        users_line(1, email="new@x")
        + b"\n"
        + users_line(2)
        + b"\n"
        + users_line(3, email="u2@example.com")
        + b"\n"
        + json.dumps({"model": "BlogPost", "record": post(1, author=99)}).encode()
        + b"\n"
    )
    exc = rejected(tenant, path)
    assert exc.problems == [
        f"{path}:1: User: id 1 is already used by user 1 in the tenant",
        f"{path}:3: User: email 'u2@example.com' is already used by user 2 (line 2)",
        f"{path}:4: BlogPost: author_id 99 does not match any user",
    ]


def test_problems_of_the_set_check_name_their_line_and_what_they_clash_with():
    """`add_batch_problems`: a clash with another row names its line, a @unique clash with
    none names the tenant, a record too large names its model itself (no `Model: `)."""
    problems = load.Problems("f.jsonl")
    rows = [("User", {}), ("User", {}), ("BlogPost", {}), ("Comment", {})]
    exc = BatchRejected(
        [
            (0, PayloadTooLarge("record too large: User ..."), None),
            (1, UniqueViolation("id 1 is already used"), 0),
            (2, UniqueViolation("id 2 is already used"), None),
            (3, ForeignKeyViolation("post_id 9 does not match any blog post"), None),
        ],
        4,
    )
    load.add_batch_problems(exc, rows, [3, 5, 9, 12], problems)
    assert problems.shown == [
        "f.jsonl:3: record too large: User ...",
        "f.jsonl:5: User: id 1 is already used (line 3)",
        "f.jsonl:9: BlogPost: id 2 is already used in the tenant",
        "f.jsonl:12: Comment: post_id 9 does not match any blog post",
    ]


# -- what an import writes ----------------------------------------------------------------------


def test_an_empty_file_imports_nothing_and_writes_nothing(tenant, tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"\n\n")
    before = dir_image(tenant)
    report = import_file(tenant, BLOG, str(path), quiet=True)
    assert (report.lines, report.counts, report.records) == (2, {}, 0)
    assert (before, sorted(dir_image(tenant))) == ({}, ["LOCK"])  # locked for the run only


def test_an_import_into_a_used_tenant_forks_its_history_and_into_an_empty_one_does_not(tenant, tmp_path):
    first = tmp_path / "a.jsonl"
    first.write_bytes(users_line(1) + b"\n" + json.dumps({"model": "BlogPost", "record": post(1)}).encode() + b"\n")
    report = import_file(tenant, BLOG, str(first), quiet=True)
    assert report.counts == {"User": 1, "BlogPost": 1}
    store = open_store(tenant, readonly=True)
    history = store.history
    store.close()
    assert history is not None and history.forks == ()
    second = tmp_path / "b.jsonl"
    second.write_bytes(users_line(2) + b"\n")
    import_file(tenant, BLOG, str(second), quiet=True)
    store = open_store(tenant, readonly=True)
    try:
        forked = store.history
        assert store.head_offset == 3
    finally:
        store.close()
    assert [(f.id, f.at) for f in forked.forks] == [(history.id, 2)]


def test_the_collector_is_paused_only_while_importing(tenant, tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(users_line(1) + b"\n")
    seen = []
    original = load.read_records

    def spy(*a, **kw):
        seen.append(gc.isenabled())
        return original(*a, **kw)

    load.read_records = spy
    try:
        import_file(tenant, BLOG, str(path), quiet=True)
        assert gc.isenabled() and seen == [False]
        gc.disable()
        path.write_bytes(users_line(2) + b"\n")
        import_file(tenant, BLOG, str(path), quiet=True)
        assert not gc.isenabled()
    finally:
        gc.enable()
        load.read_records = original


def test_import_reports_progress_of_both_phases_on_a_plain_stream(tenant, tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(users_line(1) + b"\n" + users_line(2) + b"\n")
    stream = io.StringIO()
    import_file(tenant, BLOG, str(path), progress_stream=stream)
    lines = stream.getvalue().splitlines()
    assert [line.split(" in ")[0] for line in lines] == [
        "import: reading: done, 2 lines",
        "import: writing: 0 records (0%)",
        "import: writing: done, 2 records",
    ]


def test_summary_names_each_phase_and_each_model_imported():
    report = ImportReport({"User": 3, "BlogPost": 0, "Comment": 1}, 5, 1.0, 0.5, 0.5)
    assert report.records == 4 and report.seconds == 2.0
    assert report.summary() == (
        "imported 4 records in 2.0 s (2/s; read and validate 1.0 s, check 0.5 s, write 0.5 s): User 3, Comment 1"
    )
    assert ImportReport().summary() == (
        "imported 0 records in 0.0 s (0/s; read and validate 0.0 s, check 0.0 s, write 0.0 s)"
    )


# -- the file as a whole (open_source) ----------------------------------------------------------


@pytest.mark.parametrize(
    "head, why",
    [
        (
            b"\x00\x00\xfe\xff{}",
            "it starts with a UTF-32 byte order mark; dbsvc import reads UTF-8 JSON Lines: "
            "convert the file first (iconv -f UTF-32 -t UTF-8)",
        ),
        (
            b"\xff\xfe\x00\x00{}",
            "it starts with a UTF-32 byte order mark; dbsvc import reads UTF-8 JSON Lines: "
            "convert the file first (iconv -f UTF-32 -t UTF-8)",
        ),
        (
            b"\xfe\xff\x00{",
            "it starts with a UTF-16 byte order mark; dbsvc import reads UTF-8 JSON Lines: "
            "convert the file first (iconv -f UTF-16 -t UTF-8)",
        ),
        (
            b"\xff\xfe{\x00",
            "it starts with a UTF-16 byte order mark; dbsvc import reads UTF-8 JSON Lines: "
            "convert the file first (iconv -f UTF-16 -t UTF-8)",
        ),
        (
            b"{\x00}\n",
            "its first line holds NUL bytes (UTF-16 or UTF-32?); dbsvc import reads UTF-8 JSON Lines: "
            "convert the file first (iconv -f UTF-16 -t UTF-8)",
        ),
        (
            b'{"a": "caf\xe9"}\n',
            "its first line has the byte 0xe9 at byte 11, which UTF-8 does not allow there; "
            "dbsvc import reads UTF-8 JSON Lines: convert the file first (iconv -f LATIN1 -t UTF-8)",
        ),
        (
            b'{"a": "\xc3"}',
            "its first line has the byte 0xc3 at byte 8, which UTF-8 does not allow there; "
            "dbsvc import reads UTF-8 JSON Lines: convert the file first (iconv -f LATIN1 -t UTF-8)",
        ),
    ],
)
def test_a_file_that_is_not_utf8_is_refused_naming_what_was_found(tmp_path, head, why):
    path = tmp_path / "f.jsonl"
    path.write_bytes(head)
    with pytest.raises(ConfigError) as caught:
        open_source(str(path))
    assert str(caught.value) == f"cannot import {str(path)!r}: it is not UTF-8: {why}"


def test_a_first_line_cut_inside_a_character_at_the_chunk_is_not_refused(tmp_path):
    """The first line is judged on its first CHUNK_BYTES only: a character cut there is the
    chunk's edge, not bad UTF-8 (a complete line ending in a cut character is)."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a" * ((1 << 20) - 1) + "é".encode() + b"\n")
    source, size = open_source(str(path))
    with source:
        assert (source.tell(), size) == (0, (1 << 20) + 2)


def test_a_utf8_bom_is_skipped_and_only_at_the_start(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + users_line(1) + b"\n")
    source, size = open_source(str(path))
    with source:
        assert source.tell() == 3 and size == len(users_line(1)) + 4
    path.write_bytes(users_line(1) + b"\n")
    source, _size = open_source(str(path))
    with source:
        assert source.tell() == 0


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "it is a directory, not a JSON Lines file"),
        (lambda p: os.mkfifo(p), "it is a FIFO, not a regular file: save the data to a file and import that"),
        ("/dev/zero", "it is a character device, not a regular file: save the data to a file and import that"),
        ("under-a-file", "not a directory"),
    ],
)
def test_what_is_not_a_readable_regular_file_is_refused(tmp_path, make, why):
    path = tmp_path / "f.jsonl"
    if make == "/dev/zero":
        path = Path("/dev/zero")
    elif make == "under-a-file":
        (tmp_path / "plain").write_text("")
        path = tmp_path / "plain" / "f.jsonl"
    else:
        make(path)
    with pytest.raises(ConfigError) as caught:
        open_source(str(path))
    assert str(caught.value) == f"cannot import {str(path)!r}: {why}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_refused(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"{}\n")
    path.chmod(0)
    with pytest.raises(ConfigError) as caught:
        open_source(str(path))
    assert str(caught.value) == f"cannot import {str(path)!r}: permission denied: this user may not read it"


def test_the_record_limit_bound_at_its_edge():
    """RECORD_GROWTH 5 a byte, RECORD_SLACK 64 a field (User has 7), DEFAULTS_SLACK 4096;
    measured when 8 * bound + HEAD_RESERVE passes the payload limit."""
    from dbsvc.storage.events import HEAD_RESERVE

    fields = max(len(m.fields) for m in BLOG.MODELS)
    assert fields == 7
    limit = 8 * (5 * 1000 + 64 * 7 + 4096) + HEAD_RESERVE
    assert not may_be_near_the_record_limit(1000, BLOG, max_payload=limit)
    assert may_be_near_the_record_limit(1000, BLOG, max_payload=limit - 1)
    assert may_be_near_the_record_limit(1001, BLOG, max_payload=limit)
