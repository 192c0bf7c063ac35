"""`dbsvc export` / `dbsvc import` through the real command line, and the store's batch path.

Tenants are seeded through the Store API, the commands run as subprocesses, and results are
read back through a read-only Store open: no layer of ours is mocked.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path

import pytest

from dbsvc.datatools.progress import Progress
from dbsvc.errors import BatchRejected
from dbsvc.runtime import Query
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import LogScan
from dbsvc.storage.tenants import create_tenant
from support.cli import run_on_tenant as cli
from support.server import start_server
from support.storage import BLOG, open_store, post, user
from support.tree import dir_image as _dir_image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCHEMA = str(ROOT / "schemas" / "blog.dbs")


def dir_image(path: str) -> dict[str, bytes]:
    """Every file's bytes but LOCK's: a tool that locks the tenant as a server would writes
    its pid there (storage/lock.py rule 3); everything else must stay as it was."""
    return {name: data for name, data in _dir_image(path).items() if name != "LOCK"}


def comment(i: int, post_id: int, author: int, **over) -> dict:
    rec = {
        "id": i,
        "post_id": post_id,
        "author_id": author,
        "body": f"comment {i}",
        "created": "2026-02-03T04:05:06.500000Z",
    }
    rec.update(over)
    return rec


def seed(directory: str) -> None:
    """Users, posts and comments with history: updates, deletes, unicode, json, nulls."""
    store = open_store(directory)

    async def go() -> None:
        for i in range(1, 31):
            await store.insert(
                "User",
                user(
                    i,
                    name=f"Ünïcode “{i}” 🙂",
                    age=i if i % 2 else None,
                    profile={"n": i, "tags": ["a", {"b": None}]} if i % 3 else None,
                ),
            )
        for i in range(1, 61):
            await store.insert(
                "BlogPost", post(i, author=1 + i % 30, score=i / 7, published=i % 2 == 0, tags=["x"] if i % 4 else None)
            )
        for i in range(1, 41):
            await store.insert("Comment", comment(i, post_id=1 + i % 60, author=1 + i % 30))
        await store.replace("User", 4, user(4, email="renamed@example.com", name="renamed"))
        await store.delete("Comment", 5)
        await store.delete("BlogPost", 6)  # its one comment (5) is gone

    asyncio.run(go())
    store.close()


def records(directory: str) -> dict[str, list[dict]]:
    store = open_store(directory, readonly=True)
    try:
        return {m.name: store.list_records(m.name, Query(limit=1 << 40))[0] for m in BLOG.MODELS}
    finally:
        store.close()


@pytest.fixture
def seeded(data) -> str:
    directory = create_tenant(str(data), "t")
    seed(directory)
    return directory


def test_export_drop_import_gives_identical_records(data, seeded, tmp_path):
    before = records(seeded)
    out = tmp_path / "out.jsonl"
    done = cli(data, "export", SCHEMA, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "exported 128 records" in done.stderr
    assert cli(data, "tenant", "drop", "t", "--yes").returncode == 0
    assert cli(data, "tenant", "create", "t").returncode == 0
    done = cli(data, "import", SCHEMA, str(out))
    assert done.returncode == 0, done.stderr
    assert "imported 128 records" in done.stderr
    assert records(seeded) == before
    again = tmp_path / "again.jsonl"
    assert cli(data, "export", SCHEMA, "-o", str(again)).returncode == 0
    assert again.read_bytes() == out.read_bytes()


def test_export_writes_one_model_record_pair_per_line_in_declaration_and_id_order(data, seeded):
    done = cli(data, "export", SCHEMA, "-q")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    decoded = [json.loads(line) for line in lines]
    assert all(list(d) == ["model", "record"] for d in decoded)
    order = [d["model"] for d in decoded]
    assert order == ["User"] * 30 + ["BlogPost"] * 59 + ["Comment"] * 39
    assert [d["record"]["id"] for d in decoded if d["model"] == "User"] == list(range(1, 31))
    first = decoded[0]["record"]
    assert list(first) == list(BLOG.BY_NAME["User"].fields)
    assert lines[0] == '{"model":"User","record":' + json.dumps(first, ensure_ascii=False, separators=(",", ":")) + "}"


def test_import_accepts_children_before_parents_and_self_consistent_files(data, tmp_path):
    create_tenant(str(data), "t")
    rows = [("Comment", comment(1, post_id=2, author=3)), ("BlogPost", post(2, author=3)), ("User", user(3))]
    path = tmp_path / "reversed.jsonl"
    path.write_text("".join(json.dumps({"model": m, "record": r}) + "\n" for m, r in rows))
    done = cli(data, "import", SCHEMA, str(path))
    assert done.returncode == 0, done.stderr
    got = records(str(data / "t"))
    assert [r["id"] for r in got["User"]] == [3]
    assert got["Comment"][0]["post_id"] == 2


def test_import_fills_defaults_and_automatic_ids_like_a_create(data, tmp_path):
    directory = create_tenant(str(data), "t")
    path = tmp_path / "new.jsonl"
    path.write_text(
        '{"model": "User", "record": {"id": 10, "email": "a@x", "name": "A"}}\n'
        "\n"
        '{"record": {"email": "b@x", "name": "B"}, "model": "User"}\n'
    )
    done = cli(data, "import", SCHEMA, str(path))
    assert done.returncode == 0, done.stderr
    users = records(directory)["User"]
    assert [u["id"] for u in users] == [10, 11]
    assert users[0]["role"] == "reader" and users[0]["joined"].endswith("Z")


BAD_LINES = [
    ("{not json", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('["User", {}]', 'expected an object {"model": ..., "record": {...}}, got ["User", {}]'),
    (
        '{"model": "User", "record": {}, "extra": 1}',
        "expected exactly the keys \"model\" and \"record\", got 'model', 'record', 'extra'",
    ),
    ('{"model": "Nope", "record": {}}', "unknown model 'Nope': expected one of User, BlogPost, Comment"),
    ('{"model": "User", "record": 7}', 'User: "record" must be an object of its fields'),
    (
        '{"model": "User", "record": {"id": 900, "email": "z@x", "name": ""}}',
        "User: 'name' must be at least 1 character",
    ),
    (
        '{"model": "User", "record": {"id": 900, "email": "z@x", "name": "Z", "age": 200}}',
        "User: 'age' must be at most 150, got 200",
    ),
    (
        '{"model": "User", "record": {"id": 900, "email": "z@x", "name": "Z", "colour": 1}}',
        "User: unknown field 'colour'",
    ),
    (
        '{"model": "User", "record": {"id": 3, "email": "z@x", "name": "Z"}}',
        "User: id 3 is already used by user 3 in the tenant",
    ),
    (
        '{"model": "User", "record": {"id": 900, "email": "u7@example.com", "name": "Z"}}',
        "User: email 'u7@example.com' is already used by user 7 in the tenant",
    ),
    (
        '{"model": "User", "record": {"id": 901, "email": "first@x", "name": "Z"}}',
        "User: id 901 is already used by user 901 (line 1)",
    ),
    (
        '{"model": "User", "record": {"id": 902, "email": "first@x", "name": "Z"}}',
        "User: email 'first@x' is already used by user 901 (line 1)",
    ),
    (
        '{"model": "BlogPost", "record": {"id": 900, "author_id": 999, "title": "T", "body": "", "score": 1}}',
        "BlogPost: author_id 999 does not match any user",
    ),
    (b'{"model": "User", "record": {"id": 903, "email": "\xff", "name": "Z"}}', "not JSON: 'utf-8' codec"),
    # what a request body could not hold, a file cannot either (bodies.refuse_unstorable)
    (
        '{"model": "User", "record": {"id": 904, "email": "n@x", "name": "Z", "profile": [1e400]}}',
        "not JSON: the number 1e400 is out of range: expected a finite number",
    ),
    (
        '{"model": "User", "record": {"id": 904, "email": "n@x", "name": "Z", "name": "Y"}}',
        'not JSON: an object names the member "name" twice: expected each name once',
    ),
    (
        '{"model": "User", "model": "BlogPost", "record": {"id": 904, "email": "n@x", "name": "Z"}}',
        'not JSON: an object names the member "model" twice',
    ),
    (
        '{"model": "User", "record": {"id": 904, "email": "n@x", "name": "Z", "profile": NaN}}',
        "not JSON: NaN is not valid JSON",
    ),
    (
        '{"model": "User", "record": {"id": 904, "email": "n@x", "name": "\\ud800"}}',
        "'name' holds a lone surrogate in the string",
    ),
    (
        '{"model": "User", "record": {"id": 904, "email": "n@x", "name": "Z", "profile": ' + "[" * 64 + "]" * 64 + "}}",
        "record nests arrays and objects deeper than 64 levels",
    ),
    # past the decoder's recursion limit on 3.11 and 3.12, decoded on 3.13: one refusal either way
    (
        '{"model": "User", "record": ' + "[" * 5000 + "]" * 5000 + "}",
        "record nests arrays and objects deeper than 64 levels: at most 64 are allowed, the body itself counted",
    ),
]


@pytest.mark.parametrize("bad, message", BAD_LINES, ids=[str(i) for i in range(len(BAD_LINES))])
def test_import_with_one_bad_line_in_the_middle_changes_nothing(data, seeded, tmp_path, bad, message, cli_in_process):
    good_before = ['{"model": "User", "record": {"id": 901, "email": "first@x", "name": "first"}}']
    good_after = [json.dumps({"model": "User", "record": user(950 + i)}) for i in range(5)]
    path = tmp_path / "bad.jsonl"
    with open(path, "wb") as f:
        for line in good_before:
            f.write(line.encode() + b"\n")
        f.write((bad if isinstance(bad, bytes) else bad.encode()) + b"\n")
        for line in good_after:
            f.write(line.encode() + b"\n")
    image = dir_image(seeded)
    before = records(seeded)
    done = cli_in_process(data, "import", SCHEMA, str(path))  # in process: 21 cases
    assert done.returncode == 1, done.stderr
    assert f"{path}:2: {message}" in done.stderr
    assert "nothing was imported" in done.stderr
    assert dir_image(seeded) == image
    assert records(seeded) == before


def test_import_reports_every_bad_line_up_to_a_limit(data, tmp_path):
    directory = create_tenant(str(data), "t")
    path = tmp_path / "many.jsonl"
    path.write_text("".join(f'{{"model": "User", "record": {{"id": {i}, "name": "x"}}}}\n' for i in range(1, 31)))
    done = cli(data, "import", SCHEMA, str(path))
    assert done.returncode == 1
    shown = [line for line in done.stderr.splitlines() if line.startswith(f"{path}:")]
    assert len(shown) == 20
    assert shown[0].startswith(f"{path}:1: User: missing required field 'email'")
    assert "30 bad line(s) (10 more not shown)" in done.stderr
    assert os.listdir(directory) == ["LOCK"]  # locked for the run, nothing else written


def test_import_is_refused_and_export_takes_a_copy_while_a_server_holds_the_tenant(data, seeded, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"model": "User", "record": user(500)}) + "\n")
    server = start_server(SCHEMA, data, env={"SERVICE_TENANT": "t"})
    try:
        image = dir_image(seeded)
        done = cli(data, "import", SCHEMA, str(path))
        assert done.returncode == 2, done.stderr
        assert f"locked by process {server.proc.pid}" in done.stderr
        # Export takes a consistent copy beside the server (the backup path) and exports it
        # in one command (issue 32 item 10); the tenant is left as it was.
        live = cli(data, "export", SCHEMA, "-q")
        assert live.returncode == 0, live.stderr
        assert f"from a consistent copy taken beside the running server, process {server.proc.pid}" in live.stderr
        assert dir_image(seeded) == image
        # The two steps it replaces still work.
        backups = tmp_path / "backups"
        assert cli(data, "backup", str(backups / "t-now")).returncode == 0
        from_backup = cli(backups, "export", SCHEMA, "-q", tenant="t-now")
        assert from_backup.returncode == 0, from_backup.stderr
    finally:
        server.stop()
    direct = cli(data, "export", SCHEMA, "-q")
    assert direct.returncode == 0, direct.stderr
    assert live.stdout == from_backup.stdout == direct.stdout and len(direct.stdout.splitlines()) == 128


def test_export_as_of_reads_a_model_at_a_past_watermark(data, seeded, cli_in_process):
    done = cli_in_process(data, "export", SCHEMA, "user", "--as-of", "3", "-q")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["record"]["id"] for line in done.stdout.splitlines()] == [1, 2, 3]
    # watermark 31 is the replace of user 4 (row 31 of User): before it, the old email
    done = cli_in_process(
        data, "export", SCHEMA, "User", "BlogPost", "--as-of", "User=30", "--as-of", "BlogPost=1", "-q"
    )
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    assert [g["record"]["email"] for g in got if g["record"]["id"] == 4 and g["model"] == "User"] == ["u4@example.com"]
    assert [g["record"]["id"] for g in got if g["model"] == "BlogPost"] == [1]


@pytest.mark.parametrize(
    "args, message",
    [
        (("Nope",), "unknown model 'Nope': expected one of User, BlogPost, Comment"),
        (("--as-of", "3"), "a bare watermark needs exactly one MODEL"),
        (("User", "--as-of", "x"), "'x' is not a watermark: expected an integer >= 0"),
        (("User", "--as-of", "Comment=1"), "'Comment' is not one of the exported models (User)"),
        (("User", "--as-of", "99"), "--as-of User=99 is ahead of User's current watermark 31"),
    ],
)
def test_export_refuses_bad_models_and_watermarks(data, seeded, tmp_path, args, message, cli_in_process):
    out = tmp_path / "x.jsonl"
    done = cli_in_process(data, "export", SCHEMA, *args, "-o", str(out))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not out.exists() and not Path(f"{out}.tmp").exists()


def test_commands_refuse_a_missing_tenant_and_a_bad_name(data, tmp_path, cli_in_process):
    # the commands' own refusals, in process: the launcher's exit statuses are run as a
    # subprocess by the lock test above and by test_datatools_backup.py's refusals
    done = cli_in_process(data, "export", SCHEMA, tenant="ghost")
    assert done.returncode == 1 and "dbsvc tenant create ghost" in done.stderr
    done = cli_in_process(data, "export", SCHEMA, tenant="../etc")
    assert done.returncode == 2 and "invalid tenant name" in done.stderr
    done = cli_in_process(data, "import", SCHEMA, str(tmp_path / "missing.jsonl"))
    assert done.returncode == 2 and f"cannot import {str(tmp_path / 'missing.jsonl')!r}: no such file" in done.stderr


def test_progress_is_plain_lines_off_a_terminal_and_a_bar_on_one():
    plain = io.StringIO()
    p = Progress("import: reading", 100, "lines", stream=plain, tty=False)
    p.advance(50, 5)
    p.finish()
    assert plain.getvalue().startswith("import: reading: done, 5 lines in ")
    bar = io.StringIO()
    p = Progress("export", 10, "records", stream=bar, tty=True)
    p.advance(10, 10)
    p.finish()
    assert bar.getvalue().startswith("\rexport  [##########################] 100%  10 records  ")
    assert bar.getvalue().endswith("\n")


# -- the store's batch path -----------------------------------------------------------------


def test_insert_batch_writes_the_frames_single_inserts_would(tmp_path):
    directory = create_tenant(str(tmp_path / "data"), "t")
    store = open_store(directory, replication=True)
    seen: list[tuple[ChangeEvent, bytes]] = []
    store.subscribe(lambda event, frame: seen.append((event, frame)))
    asyncio.run(store.insert("User", user(1)))
    stored = store.insert_batch([("BlogPost", post(None, author=2)), ("User", user(2)), ("User", user(None))])
    assert [r["id"] for r in stored] == [1, 2, 3]
    assert store.head_offset == 4 and store.watermarks() == {"User": 3, "BlogPost": 1, "Comment": 0}
    assert store.stats()["fsyncs"] == 2
    assert [e.offset for e, _f in seen] == [1, 2, 3, 4]
    assert [e.offset for e in store.events_after(1)] == [2, 3, 4]
    store.close()
    with open(os.path.join(directory, "log"), "rb") as f:
        scan = LogScan("log", f.read())
    for (offset, payload), (_event, frame) in zip(scan.records(), seen):
        again = ChangeEvent.from_dict(json.loads(payload))
        assert again.kind is EventKind.INSERT and again.offset == offset
        assert again.payload() == bytes(payload) == frame[16:]
    reopened = open_store(directory)
    assert reopened.get("User", 3)[0] == stored[2]
    assert reopened.watermarks() == {"User": 3, "BlogPost": 1, "Comment": 0}
    reopened.close()


def test_insert_batch_refuses_the_whole_batch_and_lists_every_bad_row(tmp_path):
    directory = create_tenant(str(tmp_path / "data"), "t")
    store = open_store(directory)
    asyncio.run(store.insert("User", user(1)))
    image = dir_image(directory)
    with pytest.raises(BatchRejected) as caught:
        store.insert_batch(
            [
                ("User", user(2)),
                ("User", user(2, email="other@x")),
                ("BlogPost", post(1, author=7)),
                ("User", user(3, email="u1@example.com")),
            ]
        )
    assert [(i, type(e).__name__, other) for i, e, other in caught.value.problems] == [
        (1, "UniqueViolation", 0),
        (2, "ForeignKeyViolation", None),
        (3, "UniqueViolation", None),
    ]
    assert dir_image(directory) == image
    assert store.live_counts() == {"User": 1, "BlogPost": 0, "Comment": 0}
    store.close()


def test_batch_indexes_match_those_of_single_inserts(tmp_path):
    one = open_store(create_tenant(str(tmp_path / "data"), "one"))
    many = open_store(create_tenant(str(tmp_path / "data"), "many"))
    users = [user(i, name=f"n{(i * 7) % 13}", age=None if i % 5 == 0 else i % 40) for i in range(1, 200)]

    async def singly() -> None:
        for u in users[:50]:
            await one.insert("User", u)
            await many.insert("User", u)
        for u in users[50:]:
            await one.insert("User", u)

    asyncio.run(singly())
    many.insert_batch([("User", u) for u in users[50:]])
    for query in (
        Query(limit=1000),
        Query(sort=(("name", False),), limit=1000),
        Query(sort=(("age", True),), limit=1000),
        Query(filters={"name": frozenset({"n3"})}, limit=1000),
        Query(as_of=120, limit=1000),
    ):
        assert one.list_records("User", query) == many.list_records("User", query)
    one.close()
    many.close()


# -- the line reader's fast path agrees with the one-line decoder ----------------------------

TRICKY = [
    b'{"model":"User","record":{"id":1}}\n',
    b'\n',
    b'   \n',
    b'  {"model":"User","record":{"id":2}}\n',
    b'{"record":{"id":3},"model":"User"}\r\n',
    b'{"model":"User","record":{"x":[\n',  # a value spread over two lines
    b'1]}}\n',
    b'{"model":"User","record":{}} {"model":"User","record":{}}\n',
    b'{"model":"User","record":{}}x\n',
    b'{"model":"User","record":{},"model2":1}\n',
    b'{"model":1,"record":{}}\n',
    b'"just a string"\n',
    b'{"model":"User","record":{"name":"caf\xc3\xa9"}}\n',
    b'{"model":"User","record":{}}garbage',  # the last line, no newline
]


@pytest.mark.parametrize("with_bad_utf8", [False, True])
def test_decode_lines_accepts_and_refuses_exactly_what_decode_line_does(with_bad_utf8):
    from dbsvc.datatools.lines import BadLine, decode_line, decode_lines

    lines = list(TRICKY)
    if with_bad_utf8:
        lines.insert(3, b'{"model":"User","record":{"name":"\xff"}}\n')
    expected_good, expected_bad = [], []
    for number, raw in enumerate(lines, 7):
        try:
            decoded = decode_line(raw)
        except BadLine as exc:
            expected_bad.append((number, str(exc)))
            continue
        if decoded is not None:
            expected_good.append((number, *decoded))
    good, bad = decode_lines(lines, 7)
    assert good == expected_good
    assert sorted(bad) == expected_bad
    assert [n for n, _m, _r in good] == ([7, 10, 11, 19] if not with_bad_utf8 else [7, 11, 12, 20])


@pytest.mark.parametrize(
    "spec, state",
    [
        ("write:2:ENOSPC", "REFUSING"),  # the second 1 MiB chunk finds no room: cut back, refusing
        ("write:1:EIO", "FAILED"),
        ("fsync:1:EIO", "FAILED"),  # everything written, the one fsync fails: fail-stop
    ],
)
def test_insert_batch_that_fails_on_disk_leaves_log_and_memory_as_they_were(tmp_path, monkeypatch, spec, state):
    from dbsvc.errors import Unavailable
    from dbsvc.storage.logwriter import WriteState

    directory = create_tenant(str(tmp_path / "data"), "t")
    store = open_store(directory)
    asyncio.run(store.insert("User", user(1)))
    store.close()
    log_before = Path(directory, "log").read_bytes()
    monkeypatch.setenv("DBSVC_FAULT", spec)
    store = open_store(directory)
    batch = [("User", user(i, profile={"pad": "x" * 200})) for i in range(2, 6002)]  # about 2.5 MiB of frames
    with pytest.raises(Unavailable):
        store.insert_batch(batch)
    assert store.health().state is getattr(WriteState, state)
    assert store.live_counts()["User"] == 1 and store.head_offset == 1
    store.close()
    monkeypatch.delenv("DBSVC_FAULT")
    assert Path(directory, "log").read_bytes() == log_before
    reopened = open_store(directory)
    assert reopened.live_counts()["User"] == 1
    reopened.close()
