"""The word index an open builds from a snapshot's stored records (storage/words.py
`build_stored`): the same index as one built from each record's parsed values, and a tenant
with `@search` fields and datetimes answers the same searches, records and pages from its
log, from its snapshot in format 4, and from the same snapshot rewritten in formats 1 and 2;
the golden format-3 tenant's searches answer as its records say. A snapshot row whose text
is not a record (a file made by hand, its checksums made again) is refused with a
CorruptLog naming the model, and the tenant's files are left as they were.
Real stores on real files; the reference is textsearch.py's `matches` over the records.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib
from pathlib import Path

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.runtime import Query, compact_json
from dbsvc.storage.rows import pack, unpack
from dbsvc.storage.tenants import compact_tenant
from dbsvc.storage.words import BLOCK, WordIndex
from dbsvc.textsearch import matches, query_words
from support.storage import open_store, run, snapshot_in_format_1, snapshot_in_format_2, user

GOLDEN = Path(__file__).resolve().parent / "golden"
FIELDS = ["id", "title", "n", "body", "tags"]
ODD = ["a, b", 'q"uote\\back', "tab\tnl\n\x1f", "Été déjà", "漢字 かな", "한국어", "", None, "x-y_z 42"]


def _index_of(build: str, ids: list, stored: list[bytes]) -> WordIndex:
    index = WordIndex([3, 1])
    if build == "values":
        index.build(zip(ids, map(unpack, stored)))
    else:
        index.build_stored(ids, stored, FIELDS)
    return index


def _same(a: WordIndex, b: WordIndex) -> None:
    assert a.postings == b.postings
    assert {w: type(ids) for w, ids in a.postings.items()} == {w: type(ids) for w, ids in b.postings.items()}
    assert a.sets == b.sets and all(b.sets[w] is b.postings[w] for w in b.sets)
    assert list(a.ordered) == list(b.ordered)


def test_a_word_index_from_stored_records_is_the_one_from_their_values() -> None:
    # Three blocks: plain ASCII only; ASCII with escapes, nulls, empty strings and a json
    # field holding an object before a search field; and non-ASCII text.
    rows = [[i, f"plain title {i % 50}", i, f"body words {i % 7} and more", None] for i in range(1, BLOCK + 1)]
    for i in range(BLOCK + 1, 2 * BLOCK + 1):
        rows.append([i, ODD[i % 3] if i % 4 else ODD[6 + i % 3], i, "body", [i, {"k": "v"}] if i % 9 else None])
    for i in range(2 * BLOCK + 1, 2 * BLOCK + 300):
        rows.append([i, ODD[i % len(ODD)], -i, ODD[(i + 1) % len(ODD)], None])
    stored = [pack(FIELDS, r) for r in rows]
    ids = [r[0] for r in rows]
    _same(_index_of("values", ids, stored), _index_of("stored", ids, stored))


def test_a_word_index_of_no_records_is_empty() -> None:
    index = _index_of("stored", [], [])
    assert len(index) == 0 and index.postings == {} and index.sets == {}


QUERIES = ["plain", "title 1", "body", "ete", "deja", "漢字", "한국", "q", "uote", "back", "x", "42", "nl", "a b"]


def _answers(tenant: str) -> str:
    """A digest of what the tenant answers: every search of QUERIES (its total and first
    page), every record by id, and a page sorted by `-joined` (a datetime)."""
    s = open_store(tenant, readonly=True)
    try:
        digest = hashlib.sha256()
        table = s.table("BlogPost")
        records = {i: table.records[i] for i in table.live}
        for q in QUERIES:
            words = query_words(q)
            page, total, _watermark, _more = s.list_page("BlogPost", Query(limit=50, search=words))
            expected = sorted(i for i, r in records.items() if matches((r["title"], r["body"]), words))
            assert total == len(expected), q
            assert [r["id"] for r in page] == expected[:50], q
            digest.update(compact_json([q, total, page]).encode("utf-8", "surrogatepass"))
        for t in s.tables.values():
            for i in sorted(t.live):
                digest.update(t.live[i])
        page, _total, _w, _more = s.list_page("User", Query(limit=30, sort=(("joined", True),)))
        digest.update(compact_json(page).encode())
        return digest.hexdigest()
    finally:
        s.close()


def _fill(tenant: str, posts: int) -> None:
    s = open_store(tenant, sync="off")

    async def go() -> None:
        for i in range(1, 41):
            await s.insert("User", user(i, joined=f"2026-0{1 + i % 9}-{10 + i % 18}T0{i % 10}:30:00.{i:06d}Z"))
        for i in range(1, posts + 1):
            odd = i % 3 == 0
            body = {
                "id": i,
                "author_id": 1 + i % 40,
                "title": ODD[i % 6] if odd else f"plain title {i % 97}",
                "body": ODD[(i + 2) % len(ODD)] if odd else f"body words {i % 13}",
                "published": i % 2 == 0,
                "score": i / 7,
                "tags": {"k": [i]} if i % 5 == 0 else None,
            }
            if body["body"] is None:
                body["body"] = "none"
            await s.insert("BlogPost", body)

    try:
        run(go())
    finally:
        s.close()


def test_a_tenant_with_words_and_datetimes_answers_the_same_from_its_log_and_each_snapshot_format(tmp_path) -> None:
    tenant = str(tmp_path / "data" / "default")
    os.makedirs(tenant)
    _fill(tenant, BLOCK + 700)  # two blocks of posts: the block path and a short block
    from_log = _answers(tenant)
    compact_tenant(str(tmp_path / "data"), "default")
    snapshot = os.path.join(tenant, "snapshot")
    assert open(snapshot, "rb").read(30).find(b'"format":4') > 0
    assert _answers(tenant) == from_log
    kept = open(snapshot, "rb").read()
    snapshot_in_format_2(snapshot)
    assert _answers(tenant) == from_log
    with open(snapshot, "wb") as f:
        f.write(kept)
    snapshot_in_format_1(snapshot)
    assert _answers(tenant) == from_log


def test_the_golden_format_3_tenant_searches_as_its_records_say(tmp_path) -> None:
    tenant = str(tmp_path / "format3")
    shutil.copytree(GOLDEN / "format3", tenant)
    _answers(tenant)  # each search's total and page held to the records'


def _forge_row(snapshot: str, model: str, make) -> None:  # noqa: ANN001 (text -> text)
    """Replace the second row of `model`'s first block (one the reader's sample skips) with
    `make(text)`, every line's checksum made again: a file made by hand."""
    lines = open(snapshot, "rb").read().split(b"\n")[:-1]
    bodies = [line[9:] for line in lines]
    meta = json.loads(bodies[0])
    at = 1
    for m in meta["models"]:
        if m["name"] == model:
            rows = bodies[at + 1][1:-1].split(b",\t")
            rows[1] = make(rows[1])
            bodies[at + 1] = b"[" + b",\t".join(rows) + b"]"
            break
        at += 3 * -(-m["count"] // meta["block_rows"])
    with open(snapshot, "wb") as f:
        f.write(b"".join(b"%08x " % zlib.crc32(b) + b + b"\n" for b in bodies))


@pytest.mark.parametrize(
    "make",
    [
        lambda text: text[:-1],  # an object never closed
        lambda text: b"[" + text[1:-1] + b"]",  # an array of its members' texts
        lambda text: text.replace(b'"title":', b'"title":[', 1),  # a bracket left open
    ],
    ids=["unclosed", "array", "open-bracket"],
)
def test_a_format_4_row_that_is_not_a_record_is_refused_and_the_files_are_kept(tmp_path, make) -> None:
    tenant = str(tmp_path / "data" / "default")
    os.makedirs(tenant)
    _fill(tenant, 300)
    compact_tenant(str(tmp_path / "data"), "default")
    snapshot = os.path.join(tenant, "snapshot")
    _forge_row(snapshot, "BlogPost", make)
    before = _files(tenant)
    for readonly in (True, False):
        with pytest.raises(CorruptLog) as caught:
            open_store(tenant, readonly=readonly).close()
        assert "snapshot rows of BlogPost" in str(caught.value) and "not" in str(caught.value)
    assert _files(tenant) == before


def _files(tenant: str) -> dict[str, bytes]:
    """Every file of the tenant but LOCK (a writer's open writes its pid there)."""
    return {n: open(os.path.join(tenant, n), "rb").read() for n in sorted(os.listdir(tenant)) if n != "LOCK"}
