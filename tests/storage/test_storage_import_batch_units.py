"""An import's batch (storage/batch.py): `plan`'s five checks, each problem as one insert would
give it and listed in row order (automatic ids up to the largest int64, references to later
rows, each unique field on its own, the record limit measured as the log will hold it), and
`frames`, which gives the rows consecutive offsets, watermarks and checkpoints in chunks."""

from __future__ import annotations

import json

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import (
    BatchRejected,
    ConstraintViolation,
    ForeignKeyViolation,
    NotFound,
    PayloadTooLarge,
    UniqueViolation,
)
from dbsvc.schema import load_schema, parse_schema
from dbsvc.storage import Store, batch
from dbsvc.storage.events import record_limit
from dbsvc.storage.logfile import encode_frame
from dbsvc.storage.tenants import create_tenant
from support.storage import ROOT, open_store, post, run, text, user

# -- batch.py: an import's batch -------------------------------------------------------------


@pytest.fixture
def store(tenant):
    """A blog store holding users 1 and 2 and post 1."""
    s = open_store(tenant)

    async def fill():
        await s.insert("User", user(1, email="one@x"))
        await s.insert("User", user(2, email="two@x"))
        await s.insert("BlogPost", post(1, author=1))

    run(fill())
    yield s
    s.close()


def problems(store, rows, *args) -> list[tuple[int, type, str, int | None]]:
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, rows, *args)
    return [(index, type(error), error.detail, other) for index, error, other in info.value.problems]


def fields(store, rows) -> list[str | None]:
    """The field each problem names (a 409's `field`, as one insert's would)."""
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, rows)
    return [error.extra.get("field") for _index, error, _other in info.value.problems]


def test_a_batch_takes_the_next_automatic_ids_after_the_store_and_its_own_rows(store):
    rows = [
        ("User", user(None, email="a@x")),
        ("User", user(7)),
        ("User", user(None, email="b@x")),
        ("BlogPost", post(None, author=7)),
    ]
    planned = batch.plan(store.tables, rows)
    assert [(t.name, r["id"]) for t, r in planned] == [("User", 3), ("User", 7), ("User", 8), ("BlogPost", 2)]
    assert rows[0][1]["id"] is None  # the caller's record is left as it was


def test_every_bad_row_is_listed_in_row_order_with_the_row_it_clashes_with(store):
    comment = {"id": 1, "post_id": 8, "author_id": 9, "body": "b", "created": "2026-01-01T00:00:00Z"}
    rows = [
        ("Nope", {"id": 1}),
        ("User", user(1)),  # an id the store holds
        ("User", user(5, email="five@x")),
        ("User", user(5, email="again@x")),  # the id of an earlier row
        ("User", user(6, email="one@x")),  # a @unique value the store holds
        ("User", user(7, email="five@x")),  # a @unique value of an earlier row
        ("BlogPost", post(4, author=9)),  # no such parent
        ("Comment", comment),  # two missing parents: one problem a row
        ("Comment", dict(comment, id=2, post_id=1)),  # its first parent there, its second not
    ]
    assert problems(store, rows) == [
        (0, NotFound, "unknown model 'Nope': expected one of User, BlogPost, Comment", None),
        (1, UniqueViolation, "id 1 is already used by user 1", None),
        (3, UniqueViolation, "id 5 is already used by user 5", 2),
        (4, UniqueViolation, "email 'one@x' is already used by user 1", None),
        (5, UniqueViolation, "email 'five@x' is already used by user 5", 2),
        (6, ForeignKeyViolation, "author_id 9 does not match any user", None),
        (7, ForeignKeyViolation, "post_id 8 does not match any blog-post", None),
        (8, ForeignKeyViolation, "author_id 9 does not match any user", None),
    ]
    assert fields(store, rows) == [None, "id", "id", "email", "email", "author_id", "post_id", "author_id"]


def test_a_reference_may_name_a_later_row(store):
    rows = [("BlogPost", post(5, author=9)), ("User", user(9, email="nine@x"))]
    assert [r["id"] for _t, r in batch.plan(store.tables, rows)] == [5, 9]


def test_the_message_names_how_many_rows_were_refused_and_the_first(store):
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, [("User", user(3, email="t@x")), ("User", user(1)), ("User", user(2))])
    assert str(info.value) == "2 of 3 rows refused, nothing written; first: row 1: id 1 is already used by user 1"


def test_the_largest_int64_is_the_last_automatic_id(store):
    rows = [("User", user(2**63 - 2, email="max@x")), ("User", user(None, email="next@x"))]
    assert [r["id"] for _t, r in batch.plan(store.tables, rows)] == [2**63 - 2, 2**63 - 1]


def test_no_automatic_id_is_left_past_the_largest_int64(store):
    rows = [("User", user(2**63 - 1, email="max@x")), ("User", user(None, email="next@x")), ("User", user(1))]
    with pytest.raises(BatchRejected) as info:
        batch.plan(store.tables, rows)
    [(index, error, other), later] = info.value.problems
    assert (index, type(error), other) == (1, ConstraintViolation, None)
    assert later[0] == 2  # the rows after it are still checked
    assert error.errors == [
        {
            "field": "id",
            "message": "no automatic id is left: the largest id used is 9223372036854775807; give an unused id",
        }
    ]


def test_a_model_whose_id_is_not_an_int_needs_its_id(tmp_path):
    module = compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))
    s = Store.open(create_tenant(str(tmp_path / "inv"), "t"), module.MODELS, module.DESCRIPTION)
    try:
        row = {"code": None, "city": "Oslo", "opened": "2026-01-01", "manager": None}
        with pytest.raises(BatchRejected) as info:
            batch.plan(s.tables, [("Warehouse", row), ("Warehouse", dict(row, code="OS"))])
        [(index, error, _other)] = info.value.problems
        assert index == 0 and error.errors == [{"field": "code", "message": "is required"}]
    finally:
        s.close()


def test_a_record_over_the_limit_is_refused_by_plan_when_measured_and_by_frames_otherwise(store):
    room = 4096
    big = user(3, email="big@x", name="n" * record_limit(room))
    fits = user(4, email="fits@x")
    [(index, kind, detail, _other)] = problems(store, [("User", fits), ("User", big)], room)
    assert (index, kind) == (1, PayloadTooLarge) and detail.startswith("record too large: the User record is ")
    assert [(i, k) for i, k, _d, _o in problems(store, [("User", big), ("User", user(1))], room)] == [
        (0, PayloadTooLarge),
        (1, UniqueViolation),  # the rows after a record too large are still checked
    ]
    planned = batch.plan(store.tables, [("User", fits), ("User", big)], room, False)
    with pytest.raises(BatchRejected) as info:
        list(batch.frames(planned, 10, 0, 1024, [], room))
    assert [(i, type(e)) for i, e, _o in info.value.problems] == [(1, PayloadTooLarge)]
    assert str(info.value).startswith("1 of 2 rows refused, nothing written; first: row 1: record too large")


def test_frames_take_consecutive_offsets_watermarks_and_checkpoints_in_chunks(store, monkeypatch):
    rows = [("User", user(i, email=f"{i}@x")) for i in (3, 4, 5)] + [("BlogPost", post(2, author=3))]
    planned = batch.plan(store.tables, rows)
    monkeypatch.setattr(batch, "CHUNK_BYTES", 1)  # every frame a chunk of its own
    checkpoints: list[tuple[int, int]] = []
    chunks = list(batch.frames(planned, 4, 1000, 2, checkpoints))
    heads = [json.loads(chunk[16:]) for chunk in chunks]
    assert [(h["offset"], h["model"], h["watermark"], h["id"]) for h in heads] == [
        (4, "User", 3, 3),
        (5, "User", 4, 4),
        (6, "User", 5, 5),
        (7, "BlogPost", 2, 2),
    ]
    assert all("batch" not in h for h in heads)  # an import's rows are rows of one
    assert chunks[0] == encode_frame(4, chunks[0][16:])
    starts = [1000]
    for chunk in chunks:
        starts.append(starts[-1] + len(chunk))
    assert checkpoints == [(4, starts[0]), (6, starts[2])]


def test_a_chunk_ends_with_the_frame_that_fills_it(store, monkeypatch):
    """Six frames of one length L in chunks of 2L + 1 bytes: a chunk ends at the first frame
    that brings it to the size or past it, so three frames a chunk, twice."""
    planned = batch.plan(store.tables, [("User", user(i, email=f"{i}@x")) for i in range(3, 9)])
    monkeypatch.setattr(batch, "CHUNK_BYTES", 1)  # every frame a chunk of its own
    frames = list(batch.frames(planned, 4, 0, 1024, []))
    size = len(frames[0])
    assert {len(f) for f in frames} == {size}
    monkeypatch.setattr(batch, "CHUNK_BYTES", 2 * size + 1)
    assert [len(c) for c in batch.frames(planned, 4, 0, 1024, [])] == [3 * size, 3 * size]
    monkeypatch.setattr(batch, "CHUNK_BYTES", 2 * size)
    assert [len(c) for c in batch.frames(planned, 4, 0, 1024, [])] == [2 * size, 2 * size, 2 * size]


def test_an_import_batch_stamps_each_record_with_its_rows_offset(store):
    stored = store.insert_batch([("User", user(None, email="a@x")), ("BlogPost", post(None, author=3))])
    assert [r["id"] for r in stored] == [3, 2]
    assert store.head_offset == 5
    assert (store.version("User", 3), store.version("BlogPost", 2), store.version("User", 1)) == (4, 5, 1)


TWO_UNIQUES = """
model Badge {
  id    int   @id
  code  str?  @unique
  label str?  @unique
}
"""


@pytest.fixture
def badges(tmp_path):
    module = compile_schema(parse_schema(TWO_UNIQUES))
    s = Store.open(create_tenant(str(tmp_path / "badges"), "t"), module.MODELS, module.DESCRIPTION)
    yield s
    s.close()


def test_each_unique_field_is_judged_on_its_own(badges):
    """A null in one @unique field skips only that field; the same value in two @unique fields
    is no clash."""
    rows = [
        ("Badge", {"id": 1, "code": "v", "label": "w"}),
        ("Badge", {"id": 2, "code": "w", "label": "v"}),  # each value used, but in the other field
        ("Badge", {"id": 3, "code": None, "label": "v"}),  # its code is null, its label clashes
    ]
    with pytest.raises(BatchRejected) as info:
        batch.plan(badges.tables, rows)
    [(index, error, other)] = info.value.problems
    assert (index, error.detail, error.extra, other) == (
        2,
        "label 'v' is already used by badge 2",
        {"field": "label"},
        1,
    )


def test_an_id_longer_than_the_head_reserve_lowers_its_records_limit_in_plan_and_frames(tmp_path):
    """events.py "Sizes": the head is reckoned with the record's own id, at the widest offset
    and watermark; here a 1,500-character id."""
    module = compile_schema(load_schema(str(ROOT / "schemas" / "inventory.dbs")))
    s = Store.open(create_tenant(str(tmp_path / "inv"), "t"), module.MODELS, module.DESCRIPTION)
    try:
        code = "c" * 1500
        head = (
            '{"kind":"update","model":"Warehouse","offset":18446744073709551615,'
            f'"watermark":18446744073709551615,"id":"{code}","record":,"previous":}}'
        )
        room = 8192
        limit = (room - len(head)) // 2
        bare = {"code": code, "city": "", "opened": "2026-01-01", "manager": None}
        row = dict(bare, city="x" * (limit + 1 - len(text(bare))))
        with pytest.raises(BatchRejected) as info:
            batch.plan(s.tables, [("Warehouse", row)], room)
        assert info.value.problems[0][1].detail.startswith(
            f"record too large: the Warehouse record is {limit + 1} bytes of JSON, the limit is {limit} "
        )
        planned = batch.plan(s.tables, [("Warehouse", row)], room, False)
        with pytest.raises(BatchRejected) as info:
            list(batch.frames(planned, 1, 0, 1024, [], room))
        assert info.value.problems[0][1].detail.startswith(
            f"record too large: the Warehouse record is {limit + 1} bytes of JSON, the limit is {limit} "
        )
    finally:
        s.close()


def test_a_record_of_four_byte_characters_just_over_the_limit_is_measured(store):
    """Rule 5's cheap test before measuring must let through every record that may be over:
    a character is at most 4 bytes, so 8 bytes a character (and the head) are reckoned."""
    room = 4096
    limit = record_limit(room)
    bare = text(user(3, email="e@x", name=""))
    name = "\U0001f600" * ((limit + 4 - len(bare)) // 4)  # 4 bytes each
    record = user(3, email="e@x", name=name)
    size = len(text(record).encode("utf-8"))
    assert limit < size <= limit + 4
    [(index, kind, detail, _other)] = problems(store, [("User", record)], room)
    assert (index, kind) == (0, PayloadTooLarge)
    assert detail.startswith(f"record too large: the User record is {size} bytes of JSON, the limit is {limit} ")
