"""A snapshot block's keys cut out of its stored records (storage/keycut.py), against what
they were before the cut: each record parsed and its values encoded again.

The cut must give the keys line byte for byte: every kind of flat value, escapes, lone
surrogates and non-ASCII text, records the cut does not take (a `json` field with an
array or an object before a key, a text not in the stored form), and the id column's
{"first","count"} rule. In process, real files, the reader reading back what was written.
"""

from __future__ import annotations

import json
import os

import pytest

from dbsvc.runtime import compact_json
from dbsvc.storage import snapshotreader
from dbsvc.storage.keycut import column_text, cutter, key_texts
from dbsvc.storage.rows import pack
from dbsvc.storage.snapshot import (
    BLOCK_ROWS,
    ModelImage,
    ModelStream,
    SnapshotImage,
    encode_snapshot,
    write_snapshot_stream,
)

FIELDS = ["id", "tags", "title", "body", "flag", "score", "when", "extra"]
KEYS = ["id", "title", "flag", "score", "when"]
POSITIONS = [FIELDS.index(k) for k in KEYS]

# Values of every kind a key field holds, and then some: the cut's texts must be the
# encoder's for each one.
VALUES = [
    0,
    -1,
    7,
    2**63 - 1,
    -(2**63),
    0.0,
    -0.0,
    1.5,
    -2.25,
    1e16,
    1.5e-07,
    123456789.123,
    True,
    False,
    None,
    "",
    "plain",
    'a "quoted" word',
    "back\\slash \\",
    "tab\there\nnew line\r\x08\x0c",
    "\x00\x01\x1f\x7f",
    "comma, and }{ ][ brackets",
    '","flag":true,"score":1',
    "Straße Été 漢字 😀 \u2028",
    "한국어 \ud7a3",  # Hangul: UTF-8 0xED, decoded as any text
    "lone \ud800 surrogate \udfff",  # only a hand-made file holds one
    "2026-12-01T07:49:58.123456Z",
]


def _record(i: int, value, tags=None) -> list:
    return [
        i,
        tags,
        value if type(value) is str else f"t{i}",
        "body, with \"quotes\" and ',' " * 3,
        value,
        value,
        value,
        {"x": [1, 2]},
    ]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: repr(v)[:30])
def test_the_cut_texts_are_the_encoded_values(value) -> None:
    values = _record(3, value)
    stored = pack(FIELDS, values)
    assert cutter(FIELDS, POSITIONS).match(stored) is not None  # the cut takes it, no parse
    got = key_texts(cutter(FIELDS, POSITIONS), POSITIONS, [stored])
    assert got == [tuple(compact_json(values[p]).encode("utf-8", "surrogatepass") for p in POSITIONS)]


@pytest.mark.parametrize(
    "tags",
    [[1, 2], {"id": 1, "title": "x"}, [{"flag": True}], '{"a":1}', "x"],
    ids=["list", "object", "nested", "str-like-object", "str"],
)
def test_a_json_field_before_a_key_is_cut_or_parsed_to_the_same_texts(tags) -> None:
    values = _record(5, "v", tags)
    stored = pack(FIELDS, values)
    flat = type(tags) is str
    assert (cutter(FIELDS, POSITIONS).match(stored) is not None) == flat  # a list or an object: parsed
    got = key_texts(cutter(FIELDS, POSITIONS), POSITIONS, [stored, pack(FIELDS, _record(6, 2.5))])
    assert got[0] == tuple(compact_json(values[p]).encode("utf-8") for p in POSITIONS)
    assert got[1] == (b"6", b'"t6"', b"2.5", b"2.5", b"2.5")


@pytest.mark.parametrize(
    "text",
    [
        b'{"id": 1,"tags":null,"title":"a","body":"b","flag":true,"score":1.0,"when":"w","extra":null}',
        b'{"id":1,"tags":null,"title":"a\\/b","body":"b","flag":true,"score":1.0,"when":"w","extra":null}',
        b'{"id":1,"tags":null,"title":"\\u0041","body":"b","flag":true,"score":1.0,"when":"w","extra":null}',
        b'{"id":1,"tags":null,"title":"lone \\ud800","body":"b","flag":true,"score":1.0,"when":"w","extra":null}',
        b'{"id":1,"tags":null,"title":"a","body":"b","flag":true,"score":1E2,"when":"w","extra":null}',
        b'{"id":1,"tags":null,"title":"a","body":"b","flag":true,"score":1.50,"when":"w","extra":null}',
        b'{"tags":null,"id":1,"title":"a","body":"b","flag":true,"score":1.0,"when":"w","extra":null}',
    ],
    ids=[
        "space",
        "escaped-slash",
        "escaped-letter",
        "escaped-surrogate",
        "upper-exponent",
        "zero-after",
        "field-order",
    ],
)
def test_a_text_not_in_the_stored_form_is_parsed_and_encoded(text: bytes) -> None:
    # Only a hand-made file holds one: the keys are what a parse of it gives, as before the cut.
    values = list(json.loads(text.decode("utf-8", "surrogatepass")).values())
    pattern = cutter(FIELDS, POSITIONS)
    got = key_texts(pattern, POSITIONS, [text])
    if pattern.match(text) is None:
        assert got == [tuple(compact_json(values[p]).encode("utf-8", "surrogatepass") for p in POSITIONS)]
    else:  # "1.50": a number's text the encoder does not write is kept as it is, the same number
        assert [json.loads(t) for t in got[0]] == [values[p] for p in POSITIONS]


@pytest.mark.parametrize(
    "values",
    [
        [1, 2, 3],
        [5],
        [-2, -1, 0, 1],
        [1, 3, 4],
        [3, 2, 1],
        [1, 2.0, 3],
        [1.0, 2.0, 3.0],
        [True, False],
        [1, 2, "3"],
        ["1", "2"],
        [None, 1],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    ],
)
def test_a_column_text_is_the_encoded_column(values) -> None:
    texts = [compact_json(v).encode("utf-8") for v in values]
    first = values[0]
    ranged = (
        type(first) is int
        and type(values[-1]) is int
        and values[-1] - first == len(values) - 1
        and list(values) == list(range(first, first + len(values)))
    )
    expected = {"first": first, "count": len(values)} if ranged else values
    assert column_text(texts) == compact_json(expected).encode("utf-8")


def _rows(count: int) -> list[list]:
    rows = []
    for i in range(1, count + 1):
        value = VALUES[i % len(VALUES)]
        tags = [i, {"k": "v"}] if i % 97 == 0 else None  # now and then a record the cut does not take
        rows.append(_record(i * 3 if i % 5 else i, value, tags))
    rows.sort(key=lambda r: r[0])
    return [r for n, r in enumerate(rows) if n == 0 or r[0] != rows[n - 1][0]]


def test_a_streamed_snapshot_of_stored_records_has_the_keys_of_its_values(tmp_path) -> None:
    # The reference is the image of the rows as values (their keys taken from the values,
    # never cut); the stream writes the same rows as stored records, their keys cut.
    rows = _rows(2 * BLOCK_ROWS + 300)
    stored = [pack(FIELDS, r) for r in rows]
    chunks = [(stored[i : i + 700], [9] * len(stored[i : i + 700])) for i in range(0, len(stored), 700)]
    path = tmp_path / "snapshot.new"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_snapshot_stream(fd, "e" * 32, 9, [ModelStream("M", FIELDS, len(rows), rows[-1][0], chunks, KEYS)])
    finally:
        os.close(fd)
    image = SnapshotImage("e" * 32, 9, [ModelImage("M", FIELDS, rows, rows[-1][0], KEYS, [9] * len(rows))])
    data = path.read_bytes()
    assert data == b"".join(encode_snapshot(image))
    # and the reader takes its keys back as the values
    _epoch, _head, parts = snapshotreader.read_snapshot(str(path), data)
    columns: dict[str, list] = {k: [] for k in KEYS}
    texts: list[bytes] = []
    for block, keyed in snapshotreader.model_blocks(str(path), parts[0]):
        texts += block
        for k in KEYS:
            columns[k] += list(keyed[k])
    assert texts == stored
    for k in KEYS:
        assert columns[k] == [r[FIELDS.index(k)] for r in rows], k


def test_the_id_column_of_a_block_without_gaps_is_its_range(tmp_path) -> None:
    rows = [_record(i, 1.5) for i in range(10, 10 + BLOCK_ROWS + 5)]
    stored = [pack(FIELDS, r) for r in rows]
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_snapshot_stream(
            fd, "e" * 32, 9, [ModelStream("M", FIELDS, len(rows), 0, [(stored, [9] * len(rows))], KEYS)]
        )
    finally:
        os.close(fd)
    lines = (tmp_path / "s").read_bytes().split(b"\n")
    assert json.loads(lines[1][9:])[0] == {"first": 10, "count": BLOCK_ROWS}
    assert json.loads(lines[4][9:])[0] == {"first": 10 + BLOCK_ROWS, "count": 5}
