"""The object form's edges that rows.py's mutants found untested (session 28, wt-mpo20).

- A model of one field (`id` alone): an older snapshot's array row (format 2, rows.py
  `row_object`) cut at its commas gives one piece, which is that one value: the records
  read back from it are the ones written, stored as their JSON byte for byte, whatever
  the id holds (commas, quotes, brackets, `%`, non-ASCII). The two-field model beside it
  takes the same cut with two pieces. Under `row_object`'s mutant 6 (`row[1:+1]`: an empty
  piece) the one-field model's every record came back as `{"id":}`.
- `scan` reads back every text `pack` makes, as `unpack` does, a lone surrogate included
  (a file made by hand can hold one; both decode with "surrogatepass", as the snapshot
  reader does): the record, its fields in declaration order. shown.py asks `scan` only for
  a text without the byte 0xED today, so no table answer shows a strict decode; this
  holds the function to its promise for every caller (docs/mutation.md, session 28).

Real files in a temporary directory; no mocks.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.runtime import Query, compact_json
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.rows import pack, scan, unpack
from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.storage import snapshot_in_format_2

SCHEMA = compile_schema(
    parse_schema(
        """\
model Tag {
  id    str   @id
}

model Note {
  id    int   @id
  text  str   @sort
}
""",
        "edges.dbs",
    )
)
IDS = ["plain", "a,b", ",", '"q", r', "[x]", "{y}", "%s%%", "é 🙂", "tab\there", "back\\slash", "한국어"]


def _stored_as_json(store: Store) -> dict[str, list[tuple[object, bytes]]]:
    """Each model's (id, stored text) in id order, every text held to its record's JSON."""
    out: dict[str, list[tuple[object, bytes]]] = {}
    for name, table in store.tables.items():
        for id_, stored in sorted(table.live.items()):
            record, _watermark = store.get(name, id_)
            assert stored == compact_json(record).encode("utf-8"), (name, id_, stored)
            out.setdefault(name, []).append((id_, stored))
    return out


def _answers(tenant: str) -> tuple[dict, list]:
    store = Store.open(tenant, SCHEMA.MODELS, SCHEMA.DESCRIPTION, readonly=True)
    try:
        pages = [store.list_page(name, Query(limit=100))[:2] for name in ("Tag", "Note")]
        pages.append(store.list_page("Note", Query(sort=(("text", True),), limit=100))[:2])
        return _stored_as_json(store), pages
    finally:
        store.close()


def test_a_one_field_model_s_array_rows_read_back_as_the_records_written(tmp_path):
    tenant = create_tenant(str(tmp_path / "data"), "edges")

    async def fill() -> None:
        store = Store.open(tenant, SCHEMA.MODELS, SCHEMA.DESCRIPTION, sync="off")
        try:
            for id_ in IDS:
                await store.insert("Tag", {"id": id_})
            for n, id_ in enumerate(IDS, 1):
                await store.insert("Note", {"id": n, "text": id_})
        finally:
            await store.aclose()

    asyncio.run(fill())
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    want = _answers(tenant)  # format 4: the rows are the records' texts
    assert [i for i, _ in want[0]["Tag"]] == sorted(IDS)
    assert want[0]["Tag"][0][1] == compact_json({"id": sorted(IDS)[0]}).encode("utf-8")
    path = os.path.join(tenant, "snapshot")
    snapshot_in_format_2(path)
    assert json.loads(open(path, "rb").readline()[9:])["format"] == 2
    assert _answers(tenant) == want  # the array rows made objects: the same texts and pages


@pytest.mark.parametrize(
    "values",
    [
        (1, "lone \ud800 high"),
        (2, "lone \udfff low, then text"),
        (3, "\udc80"),
        (4, "한국어 and \ud800 beside it"),
        (5, "pair \U0001f600, no surrogate"),
    ],
    ids=["high", "low", "alone", "beside-hangul", "pair"],
)
def test_scan_and_unpack_read_back_every_text_pack_makes(values):
    fields = ("id", "text")
    stored = pack(fields, values)
    assert scan(stored) == dict(zip(fields, values)) and list(scan(stored)) == list(fields)
    assert unpack(stored) == list(values)
