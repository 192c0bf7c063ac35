"""Format-2 snapshots (snapshot.py): the writer's blocks, each a keys line and a rows line,
and the open that builds the indexes from the keys instead of parsing the rows ("From the
keys"): what it reads, what it checks, what it refuses with the file left as it was, and
when it falls back to parsing the rows."""

from __future__ import annotations

import json
import os
import tempfile
import zlib
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.compiler import compile_schema
from dbsvc.errors import CorruptLog
from dbsvc.schema import load_schema
from dbsvc.storage import compact, snapshot, snapshotreader
from dbsvc.storage.rows import unpack
from dbsvc.storage.table import Table
from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.storage import BLOG, ROOT, open_store, opened_users, run, snapshot_in_format_1, user

N_USERS = 10
USER_KEYS = ["id", "email", "name", "age", "role", "joined"]  # the User table's key fields


def _user(i: int) -> dict:
    """Values of every kind a key column carries: text with a TAB and non-ASCII, null
    and large ages, the three enum members, json profiles holding TABs."""
    return user(
        i,
        name=f"user\t{i} é",
        age=None if i % 4 == 0 else 2**40 + i if i % 4 == 1 else 20 + i,
        role=("admin", "editor", "reader")[i % 3],
        joined=f"2026-01-{i:02d}T00:00:00.{i:06d}Z",
        profile={"tabs": "a\tb", "n": [i, [i]]} if i % 2 else None,
    )


@pytest.fixture
def compacted(tenant, monkeypatch):
    """Nine users compacted offline in blocks of 4 rows, user 7 deleted so that the second
    block's ids are not a run: User's lines are the keys and rows of blocks [1-4],
    [5, 6, 8, 9] and [10]."""
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 4)
    s = open_store(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            await s.insert("User", _user(i))
        await s.delete("User", 7)

    run(go())
    want = dict(s.tables["User"].records)
    stored = dict(s.tables["User"].live)
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    return tenant, want, stored


def _path(tenant: str) -> str:
    return os.path.join(tenant, "snapshot")


def _bodies(tenant: str) -> list[bytes]:
    """Every line's JSON, without its CRC."""
    return [line[9:] for line in open(_path(tenant), "rb").read().split(b"\n")[:-1]]


def _write(tenant: str, bodies: list[bytes]) -> bytes:
    data = b"".join(b"%08x " % zlib.crc32(b) + b + b"\n" for b in bodies)
    with open(_path(tenant), "wb") as f:
        f.write(data)
    return data


def _users(tenant: str, **kw) -> dict:
    return opened_users(tenant, **kw)[0]


def test_the_writer_puts_each_block_of_rows_after_its_keys(compacted):
    tenant, _want, stored = compacted
    bodies = _bodies(tenant)
    header = json.loads(bodies[0])
    assert header["format"] == 4 and header["block_rows"] == 4
    models = {m["name"]: m for m in header["models"]}
    assert models["User"]["keys"] == USER_KEYS == Table(BLOG.BY_NAME["User"]).key_fields
    assert models["User"]["count"] == N_USERS - 1 and models["BlogPost"]["count"] == 0
    assert len(bodies) == 1 + 3 * 3  # User's three blocks; no lines for models without rows
    ids = sorted(stored)
    blocks = [ids[0:4], ids[4:8], ids[8:]]
    assert blocks == [[1, 2, 3, 4], [5, 6, 8, 9], [10]]
    fields = list(BLOG.BY_NAME["User"].fields)
    for n, block in enumerate(blocks):
        keys, rows = json.loads(bodies[1 + 3 * n]), bodies[2 + 3 * n]
        versions = json.loads(bodies[3 + 3 * n])  # each record's last write: offsets 1-10
        assert versions == ({"first": block[0], "count": len(block)} if n != 1 else block)
        assert rows[1:-1].split(b",\t") == [stored[i] for i in block]  # the rows are the records
        objects = json.loads(rows)  # and one JSON array of the records' objects
        assert all(list(o) == fields for o in objects)
        values = [list(o.values()) for o in objects]
        assert values == [unpack(stored[i]) for i in block]
        assert keys[0] == ({"first": block[0], "count": len(block)} if n != 1 else block)
        for name, column in zip(USER_KEYS, keys):
            if type(column) is dict:  # consecutive integers are written as a run
                column = list(range(column["first"], column["first"] + column["count"]))
            assert column == [row[fields.index(name)] for row in values]


def test_an_open_reads_the_keys_and_only_a_sample_of_the_rows(compacted, monkeypatch):
    """Each block's first and last rows are scanned (SAMPLE_EVERY is past the block), no
    other: the records are the texts as written and the indexes agree with them, for a
    writer's open (the file mapped) and a read-only one (read) alike."""
    tenant, want, stored = compacted
    scanned: list[str] = []
    scan = snapshotreader.SCAN

    def counting(text, at):
        scanned.append(text)
        return scan(text, at)

    monkeypatch.setattr(snapshotreader, "SCAN", counting)
    for readonly in (False, True):
        scanned.clear()
        assert opened_users(tenant, readonly=readonly) == (want, stored)
        firsts_and_lasts = [stored[i] for i in (1, 4, 5, 9, 10, 10)]
        assert [t.encode() for t in scanned] == firsts_and_lasts


def test_a_sample_is_every_64th_row_and_each_blocks_last(tenant, monkeypatch, stores):
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 150)
    s = stores(tenant)

    async def go():
        for i in range(1, 201):
            await s.insert("User", user(i))

    run(go())
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    scanned: list[int] = []
    scan = snapshotreader.SCAN

    def counting(text, at):
        value = scan(text, at)
        scanned.append(value[0]["id"])
        return value

    monkeypatch.setattr(snapshotreader, "SCAN", counting)
    _users(tenant)
    assert scanned == [1, 65, 129, 150, 151, 200]


def test_the_same_file_in_format_1_reads_the_same(compacted):
    tenant, want, stored = compacted
    snapshot_in_format_1(_path(tenant))
    assert opened_users(tenant) == (want, stored)


def test_a_format_1_snapshot_is_compacted_into_format_4(compacted):
    tenant, want, _stored = compacted
    snapshot_in_format_1(_path(tenant))
    s = open_store(tenant)

    async def go():
        await s.compact_now()

    try:
        run(go())
    finally:
        s.close()
    assert json.loads(_bodies(tenant)[0])["format"] == 4
    assert _users(tenant) == want


def test_online_compaction_writes_blocks_whatever_chunks_it_reads(tenant, monkeypatch):
    from dbsvc.storage import online

    monkeypatch.setattr(online, "CHUNK", 3)
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 4)
    s = open_store(tenant)

    async def go():
        for i in range(1, N_USERS + 1):
            await s.insert("User", _user(i))
        await s.compact_now()

    try:
        run(go())
        want = dict(s.tables["User"].records)
        stored = dict(s.tables["User"].live)
    finally:
        s.close()
    bodies = _bodies(tenant)
    assert json.loads(bodies[0])["models"][0]["keys"] == USER_KEYS
    rows = [text for body in bodies[2::3] for text in body[1:-1].split(b",\t")]
    assert rows == [stored[i] for i in sorted(stored)] and [len(json.loads(b)) for b in bodies[2::3]] == [4, 4, 2]
    assert [json.loads(b)[0] for b in bodies[1::3]] == [
        {"first": 1, "count": 4},
        {"first": 5, "count": 4},
        {"first": 9, "count": 2},
    ]
    assert _users(tenant) == want


def test_keys_that_do_not_cover_the_table_are_read_from_the_rows(compacted, monkeypatch):
    """A file whose keys lack a field the table indexes (written under a schema that did
    not index it): every row is parsed, and the indexes still agree."""
    tenant, want, _stored = compacted
    bodies = _bodies(tenant)
    header = json.loads(bodies[0])
    at = header["models"][0]["keys"].index("email")
    del header["models"][0]["keys"][at]
    bodies[0] = json.dumps(header).encode()
    for n in (1, 4, 7):
        keys = json.loads(bodies[n])
        del keys[at]
        bodies[n] = json.dumps(keys).encode()
    _write(tenant, bodies)
    scanned: list[str] = []
    scan = snapshotreader.SCAN
    monkeypatch.setattr(snapshotreader, "SCAN", lambda text, i: scanned.append(text) or scan(text, i))
    assert _users(tenant) == want
    assert len(scanned) == N_USERS - 1  # each row once, by the rows reader


def _edit_keys(n: int, column: int, change):
    """Change column `column` of keys line `n` (1, 4, 7: User's blocks)."""

    def edit(bodies: list[bytes]) -> None:
        keys = json.loads(bodies[n])
        keys[column] = change(keys[column])
        bodies[n] = json.dumps(keys, separators=(",", ":"), ensure_ascii=False).encode()

    return edit


def _edit_rows(n: int, change):
    """Change the row texts of rows line `n` (2, 5, 8: User's blocks)."""

    def edit(bodies: list[bytes]) -> None:
        texts = bodies[n][1:-1].split(b",\t")
        bodies[n] = change(texts)

    return edit


def _edit_header(change):
    def edit(bodies: list[bytes]) -> None:
        header = json.loads(bodies[0])
        change(header)
        bodies[0] = json.dumps(header).encode()

    return edit


def _other_email(texts: list[bytes]) -> bytes:
    row = json.loads(texts[0])
    row["email"] = "someone@else.example"
    return b"[" + b",\t".join([json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode(), *texts[1:]]) + b"]"


def _last_id_is_3(bodies: list[bytes]) -> None:
    """Block 3's one row takes id 3, in its keys and its row alike: the sample agrees,
    the order across blocks does not."""
    keys = json.loads(bodies[7])
    keys[0] = {"first": 3, "count": 1}
    bodies[7] = json.dumps(keys, ensure_ascii=False).encode()
    row = json.loads(bodies[8])[0]
    row["id"] = 3
    bodies[8] = b"[" + json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode() + b"]"


def _block_2_starts_at_id_2(bodies: list[bytes]) -> None:
    """Block 2's first row takes id 2, in its keys and its row alike: inside the run of
    block 1 (ids 1-4), which only that run's last id tells."""
    keys = json.loads(bodies[4])
    keys[0][0] = 2
    bodies[4] = json.dumps(keys, ensure_ascii=False).encode()
    texts = bodies[5][1:-1].split(b",\t")
    row = json.loads(texts[0])
    row["id"] = 2
    texts[0] = json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()
    bodies[5] = b"[" + b",\t".join(texts) + b"]"


def _no_last_block(bodies: list[bytes]) -> None:
    del bodies[7:10]


def _line_at(bodies: list[bytes], n: int) -> int:
    return sum(9 + len(b) + 1 for b in bodies[:n])


BLOCK_SHAPE = "model 'User': a block's rows and keys are not 4 rows of its 6 keys each"
REFUSALS = {
    # case: (edit, line the refusal names (None: the end of the file), reason)
    "keys line not JSON": (lambda b: b.__setitem__(4, b[4][:-1]), 4, "model 'User': a keys line is not JSON"),
    "a column short": (_edit_keys(4, 1, lambda c: c[:-1]), 4, BLOCK_SHAPE),
    "a column missing": (lambda b: b.__setitem__(4, json.dumps(json.loads(b[4])[:-1]).encode()), 4, BLOCK_SHAPE),
    "a column not a list": (_edit_keys(4, 5, lambda c: None), 4, BLOCK_SHAPE),
    "a run too short": (_edit_keys(1, 0, lambda c: {"first": 1, "count": 3}), 1, BLOCK_SHAPE),
    "a run of another shape": (_edit_keys(1, 0, lambda c: {"first": 1, "count": 4, "step": 1}), 1, BLOCK_SHAPE),
    "a run of text": (_edit_keys(1, 0, lambda c: {"first": "1", "count": 4}), 1, BLOCK_SHAPE),
    "two rows in one text": (
        _edit_rows(5, lambda t: b"[" + b",".join(t[:2]) + b",\t" + b",\t".join(t[2:]) + b"]"),
        4,
        BLOCK_SHAPE,
    ),
    "rows line not an array": (
        _edit_rows(5, lambda t: b"{" + b",\t".join(t) + b"]"),
        5,
        "model 'User': a rows line is not a JSON array",
    ),
    "a sampled row unlike its keys": (
        _edit_rows(5, _other_email),
        5,
        "model 'User': row 1 of a block is not one row of 7 fields matching its keys line",
    ),
    "a sampled row short": (
        _edit_rows(8, lambda t: b"[" + t[0][: t[0].rindex(b",")] + b"]]"),
        8,
        "model 'User': row 1 of a block is not one row of 7 fields matching its keys line",
    ),
    "a sampled row not JSON": (
        _edit_rows(2, lambda t: b"[" + b",\t".join([*t[:3], t[3][:-1] + b"]"]) + b"]"),
        2,
        "model 'User': row 4 of a block is not one row of 7 fields matching its keys line",
    ),
    "a sampled row not UTF-8": (
        _edit_rows(2, lambda t: b"[" + b",\t".join([t[0][:-2] + b'"\xff"]', *t[1:]]) + b"]"),
        2,
        "model 'User': row 1 of a block is not one row of 7 fields matching its keys line",
    ),
    "ids out of order across blocks": (
        _last_id_is_3,
        1,
        "snapshot rows of User are not in strictly ascending id order",
    ),
    "a block starting inside a run": (
        _block_2_starts_at_id_2,
        1,
        "snapshot rows of User are not in strictly ascending id order",
    ),
    "a sampled row with more after it": (
        _edit_rows(8, lambda t: b"[" + t[0] + b"[10]]"),
        8,
        "model 'User': row 1 of a block is not one row of 7 fields matching its keys line",
    ),
    "a key no index can take": (
        _edit_keys(1, 4, lambda c: [c[0], ["not", "hashable"], *c[2:]]),
        1,
        "snapshot rows of User hold a value its indexes cannot take (unhashable type: 'list')",
    ),
    "a block missing": (_no_last_block, None, "snapshot has 6 lines after its header, its header's models need 9"),
    "keys naming no field": (
        _edit_header(lambda h: h["models"][0]["keys"].append("nope")),
        0,
        "snapshot header: the keys of model 'User' are not distinct names of its fields: "
        "['id', 'email', 'name', 'age', 'role', 'joined', 'nope']",
    ),
    "keys named twice": (
        _edit_header(lambda h: h["models"][0]["keys"].append("id")),
        0,
        "snapshot header: the keys of model 'User' are not distinct names of its fields: "
        "['id', 'email', 'name', 'age', 'role', 'joined', 'id']",
    ),
    "blocks of no rows": (
        _edit_header(lambda h: h.update(block_rows=0)),
        0,
        "snapshot header: block_rows 0 is not a positive integer",
    ),
    "a format to come": (
        _edit_header(lambda h: h.update(format=5)),
        0,
        "snapshot format 5, expected one of [1, 2, 3, 4]",
    ),
    "versions line short": (
        lambda b: b.__setitem__(3, b"[1,2,3]"),
        3,
        "model 'User': a versions line is not its block",
    ),
    "a version past the head": (
        lambda b: b.__setitem__(6, b"[5,6,8,99]"),
        6,
        "model 'User': a versions line is not its",
    ),
    "a version of text": (lambda b: b.__setitem__(9, b'["10"]'), 9, "model 'User': a versions line is not its block"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_block_that_does_not_fit_refuses_and_keeps_the_file(compacted, case):
    """Each with good CRCs (a writer's bug, or a hand edit): a writer's and a read-only
    open both refuse with CorruptLog naming the line, and the file is left as it was;
    with the original bytes back the tenant opens whole."""
    tenant, want, _stored = compacted
    original = open(_path(tenant), "rb").read()
    bodies = _bodies(tenant)
    edit, line, reason = REFUSALS[case]
    edit(bodies)
    data = _write(tenant, bodies)
    for readonly in (False, True):
        with pytest.raises(CorruptLog) as info:
            open_store(tenant, readonly=readonly)
        where = len(data) if line is None else _line_at(bodies, line)
        assert (info.value.path, info.value.offset) == (_path(tenant), where)
        assert info.value.reason.startswith(reason), info.value.reason
        assert open(_path(tenant), "rb").read() == data
    with open(_path(tenant), "wb") as f:
        f.write(original)
    assert _users(tenant) == want


def test_a_keys_line_failing_its_checksum_is_refused_at_that_line(compacted):
    tenant, want, _stored = compacted
    data = open(_path(tenant), "rb").read()
    keys_line = data.index(b"\n") + 1
    broken = bytearray(data)
    broken[keys_line + 12] ^= 0x01
    with open(_path(tenant), "wb") as f:
        f.write(bytes(broken))
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert (info.value.offset, info.value.reason) == (keys_line, "snapshot line checksum mismatch")
    with open(_path(tenant), "wb") as f:
        f.write(data)
    assert _users(tenant) == want


@pytest.mark.parametrize("schema", sorted(p.name for p in (ROOT / "schemas").glob("*.dbs")))
def test_offline_compaction_writes_the_keys_the_tables_index(schema):
    """`dbsvc compact` has only the schema description: its key fields are the tables'
    (else an open after it would parse every row)."""
    compiled = compile_schema(load_schema(str(ROOT / "schemas" / schema)))
    for model, described in zip(compiled.MODELS, compiled.DESCRIPTION["models"]):
        assert described["name"] == model.name
        assert compact.key_fields(described) == Table(model).key_fields


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _text | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_user_fields = st.lists(
    st.fixed_dictionaries(
        {
            "name": _text.map(lambda t: "n" + t),
            "age": st.none() | st.integers(-(2**63), 2**63 - 1),
            "role": st.sampled_from(["admin", "editor", "reader"]),
            "joined": st.datetimes(datetime(1000, 1, 1), datetime(9999, 1, 1)).map(
                lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            ),
            "profile": _json,
        }
    ),
    min_size=1,
    max_size=24,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(users=_user_fields, deleted=st.sets(st.integers(1, 24), max_size=6), block=st.integers(1, 7))
def test_any_records_read_from_the_keys_as_from_the_rows(users, deleted, block, monkeypatch, stores):
    """Records of any values the key columns carry (any text, ints past 64 bits in a
    json field, nulls where a sort key goes, TABs and quotes, blocks with and without
    gaps): opened from the keys they are the records written, with the indexes agreeing;
    the same file in format 1, read from its rows, gives the same."""
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", block)
    with tempfile.TemporaryDirectory() as base:
        tenant = create_tenant(base, "t")
        s = stores(tenant, sync="off")

        async def go():
            for i, fields in enumerate(users, 1):
                await s.insert("User", user(i, email=f"u{i}\t\"@x", **fields))
            for i in sorted(deleted):
                if i <= len(users):
                    await s.delete("User", i)

        run(go())
        want, stored = dict(s.tables["User"].records), dict(s.tables["User"].live)
        s.close()
        compact_tenant(base, "t")
        assert json.loads(_bodies(tenant)[0])["format"] == 4
        assert opened_users(tenant) == (want, stored)
        snapshot_in_format_1(_path(tenant))
        assert _users(tenant) == want
