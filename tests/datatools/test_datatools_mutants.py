"""The data tools' mutation survivors (docs/mutation.md, "dbsvc/datatools/*"), each killed at
the unit where its decision is made, with a literal expectation.
"""

from __future__ import annotations

import pytest

from dbsvc.datatools import load
from dbsvc.datatools.load import ImportReport, import_file
from dbsvc.errors import ImportRejected
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG


def test_every_violation_of_one_record_is_named_on_its_line(data, tmp_path):
    """`_violations`: the validator's messages for one record, joined by "; "."""
    tenant = create_tenant(str(data), "t")
    path = tmp_path / "f.jsonl"
    path.write_text('{"model": "User", "record": {"id": 1, "email": "a@x", "name": "", "age": 200}}\n')
    with pytest.raises(ImportRejected) as caught:
        import_file(tenant, BLOG, str(path), quiet=True)
    assert caught.value.problems == [
        f"{path}:1: User: 'name' must be at least 1 character long, got 0 characters: \"\"; "
        "'age' must be at most 150, got 200"
    ]


def test_the_import_rate_is_counted_for_a_run_under_a_second():
    report = ImportReport({"User": 3}, 3, 0.25, 0.125, 0.125)
    assert report.summary() == (
        "imported 3 records in 0.5 s (6/s; read and validate 0.2 s, check 0.1 s, write 0.1 s): User 3"
    )


def test_problems_past_the_twentieth_are_counted_not_shown():
    problems = load.Problems("f")
    for line in range(1, 22):
        problems.add(line, "bad")
    assert (problems.count, len(problems.shown), problems.shown[-1]) == (21, 20, "f:20: bad")


# Explicit ids: mutmut runs a test by its node id, and ids made of raw bytes did not match.
@pytest.mark.parametrize(
    "head, why",
    [
        (b'{"a": 1}\xc3', "its first line has the byte 0xc3 at byte 9, which UTF-8 does not allow there; "),
        (b'{"a": 1}\xc3\n', "its first line has the byte 0xc3 at byte 9, which UTF-8 does not allow there; "),
    ],
    ids=["cut-character-at-the-end-of-the-file", "cut-character-before-the-newline"],
)
def test_a_character_cut_by_the_end_of_a_short_first_line_is_not_utf8(tmp_path, head, why):
    from dbsvc.errors import ConfigError

    path = tmp_path / "f.jsonl"
    path.write_bytes(head)
    with pytest.raises(ConfigError) as caught:
        load.open_source(str(path))
    assert str(caught.value).startswith(f"cannot import {str(path)!r}: it is not UTF-8: {why}")


def test_an_import_into_a_tenant_of_one_row_forks_its_history(data, tmp_path):
    from support.storage import open_store

    tenant = create_tenant(str(data), "t")
    path = tmp_path / "f.jsonl"
    path.write_text('{"model": "User", "record": {"id": 1, "email": "a@x", "name": "A"}}\n')
    import_file(tenant, BLOG, str(path), quiet=True)
    store = open_store(tenant, readonly=True)
    first = store.history
    store.close()
    path.write_text('{"model": "User", "record": {"id": 2, "email": "b@x", "name": "B"}}\n')
    report = import_file(tenant, BLOG, str(path), quiet=True)
    store = open_store(tenant, readonly=True)
    try:
        assert [(f.id, f.at) for f in store.history.forks] == [(first.id, 1)]
    finally:
        store.close()
    assert 0 <= report.check_seconds < 60 and 0 <= report.read_seconds < 60 and 0 <= report.write_seconds < 60


def test_every_bad_line_of_one_chunk_is_reported(data, tmp_path):
    tenant = create_tenant(str(data), "t")
    path = tmp_path / "f.jsonl"
    path.write_text(
        '{"model": "Nope", "record": {}}\n'
        '{"model": "User", "record": 7}\n'
        '{"model": "User", "record": {"id": 1, "email": "a@x", "name": "A"}}\n'
        '{"model": "Nope", "record": {}}\n'
    )
    with pytest.raises(ImportRejected) as caught:
        import_file(tenant, BLOG, str(path), quiet=True)
    assert caught.value.problems == [
        f"{path}:1: unknown model 'Nope': expected one of User, BlogPost, Comment",
        f'{path}:2: User: "record" must be an object of its fields',
        f"{path}:4: unknown model 'Nope': expected one of User, BlogPost, Comment",
    ]


def test_only_the_first_chunk_of_a_long_first_line_decides_the_encoding(tmp_path):
    """A bad byte past the first 1 MiB of the first line is a bad line later, not a file
    that is not UTF-8 (open_source reads at most CHUNK_BYTES of it)."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a" * ((1 << 20) + 10) + b"\xff\n")
    source, size = load.open_source(str(path))
    source.close()
    assert size == (1 << 20) + 12


def test_the_record_limit_bound_of_a_schema_without_models():
    """No model: no field slack (0 fields), the bound is the line's growth and the defaults."""
    from types import SimpleNamespace

    from dbsvc.storage.events import HEAD_RESERVE

    empty = SimpleNamespace(MODELS=[])
    limit = 8 * (5 * 100 + 4096) + HEAD_RESERVE
    assert not load.may_be_near_the_record_limit(100, empty, max_payload=limit)
    assert load.may_be_near_the_record_limit(100, empty, max_payload=limit - 1)


@pytest.mark.parametrize(
    "error, why",
    [
        (PermissionError(13, "Permission denied"), "permission denied: this user may not read it"),
        (OSError(24, "Too many open files"), "too many open files"),
        (OSError("no strerror"), "no strerror"),
    ],
    ids=["permission", "strerror-lowercased", "no-strerror"],
)
def test_a_file_that_stats_but_does_not_open_is_refused_saying_why(tmp_path, monkeypatch, error, why):
    """As root every file opens, so the open is made to fail the way it fails for a user
    (a module-level `open` in load.py shadows the builtin for this test only)."""
    from dbsvc.errors import ConfigError

    path = tmp_path / "f.jsonl"
    path.write_text("{}\n")

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(load, "open", refuse, raising=False)
    with pytest.raises(ConfigError) as caught:
        load.open_source(str(path))
    assert str(caught.value) == f"cannot import {str(path)!r}: {why}"


@pytest.mark.parametrize(
    "raw, keys",
    [(b'{"model":"User","x":1}\n', "'model', 'x'"), (b'{"x":1,"record":{}}\n', "'x', 'record'")],
    ids=["model-without-record", "record-without-model"],
)
def test_two_keys_of_which_one_is_not_ours_are_refused_by_name(raw, keys):
    from dbsvc.datatools.lines import BadLine, decode_line, decode_lines

    with pytest.raises(BadLine) as caught:
        decode_line(raw)
    message = f'expected exactly the keys "model" and "record", got {keys}'
    assert str(caught.value) == message
    assert decode_lines([raw], 5) == ([], [(5, message)])


def test_every_lone_surrogate_of_a_record_is_named_joined_by_semicolons():
    from dbsvc.datatools.lines import BadLine, decode_line, decode_lines

    raw = b'{"model":"U","record":{"a":"\\ud800","b":"\\udc00"}}\n'
    why = "expected Unicode text (a lone surrogate has no UTF-8 form, RFC 8259 \u00a78.2)"
    message = f"'a' holds a lone surrogate in the string \"\\ud800\": {why}; 'b' holds a lone surrogate in the string \"\\udc00\": {why}"
    with pytest.raises(BadLine) as caught:
        decode_line(raw)
    assert str(caught.value) == message
    assert decode_lines([raw], 1) == ([], [(1, message)])


def test_import_frames_into_an_existing_empty_default_tenant(data, tmp_path, monkeypatch, capsys):
    """SERVICE_TENANT unset and `default` already there (empty): it is used, not created again."""
    import asyncio
    import os

    from dbsvc.cli import main
    from support.storage import open_store, user

    source = create_tenant(str(tmp_path / "src"), "s")
    store = open_store(source)
    asyncio.run(store.insert("User", user(1)))
    store.close()
    frames = tmp_path / "events.log"
    with open(os.path.join(source, "log"), "rb") as log:
        frames.write_bytes(log.read()[40:])  # a `replicate --out` file: the log without its header
    create_tenant(str(data), "default")
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SERVICE_DATA", str(data))
    schema = str(os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "blog.dbs"))
    assert main(["import", schema, "--frames", str(frames)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().err.startswith("imported 1 frames in ")


def test_export_to_standard_output_with_q_draws_no_bar_on_a_terminal(data, monkeypatch, capsys):
    import asyncio
    import io
    import os
    import sys

    from dbsvc.cli import main
    from support.storage import open_store, user

    tenant = create_tenant(str(data), "t")
    store = open_store(tenant)
    asyncio.run(store.insert("User", user(1)))
    store.close()
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SERVICE_DATA", str(data))
    monkeypatch.setenv("SERVICE_TENANT", "t")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    schema = os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "blog.dbs")
    assert main(["export", schema, "-q"]) == 0
    assert err.getvalue().startswith("exported 1 records in ")
    assert capsys.readouterr().out.count("\n") == 1


def test_import_creates_the_default_tenant_beside_other_tenants(data, tmp_path, monkeypatch, capsys):
    """SERVICE_DATA exists (it holds another tenant) and SERVICE_TENANT is unset: `default`
    is created, as `serve` does."""
    import json
    import os

    from dbsvc.cli import main
    from support.storage import user

    create_tenant(str(data), "other")
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SERVICE_DATA", str(data))
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"model": "User", "record": user(1)}) + "\n")
    schema = os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "blog.dbs")
    assert main(["import", schema, str(path), "-q"]) == 0, capsys.readouterr().err
    assert sorted(os.listdir(data)) == ["default", "other"]


def test_progress_times_from_its_own_start_not_from_zero(monkeypatch):
    """A clock that does not start at 0: the rate and the duration count from the start."""
    import io

    from dbsvc.datatools import progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    p = progress.Progress("export", 4, "records", stream=out)
    now[0] = 1002.0
    p.advance(4, 4)
    assert p.finish(line=False) == 2.0
    assert out.getvalue() == "\rexport  [##########################] 100%  4 records  2/s " * 2 + "\n"


def test_a_frames_refusal_counts_one_problem(tmp_path):
    from dbsvc.datatools.frames import import_frames

    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    tenant = create_tenant(str(tmp_path / "data"), "t")
    with pytest.raises(ImportRejected) as caught:
        import_frames(tenant, BLOG, str(empty), "t")
    assert (caught.value.count, str(caught.value)) == (1, f"{empty}: holds no frame (an empty file)")


def test_a_frames_import_times_its_run(tmp_path):
    import asyncio
    import os

    from dbsvc.datatools.frames import import_frames
    from support.storage import open_store, user

    source = create_tenant(str(tmp_path / "src"), "s")
    store = open_store(source)
    asyncio.run(store.insert("User", user(1)))
    store.close()
    frames = tmp_path / "events.log"
    with open(os.path.join(source, "log"), "rb") as log:
        frames.write_bytes(log.read()[40:])
    report = import_frames(create_tenant(str(tmp_path / "data"), "t"), BLOG, str(frames), "t")
    assert 0 < report.seconds < 60
