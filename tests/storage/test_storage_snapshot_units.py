"""snapshot.py at the unit where each decision is made: the bytes the writer puts down, which
lines `snapshot_lines` accepts and the exact refusal of each that it does not, what
`read_snapshot` makes of a header, and what the two readers (`model_blocks` from the keys,
`model_windows` from the rows) answer for the edges of a rows line.

Files are built here byte by byte from the layout of the module docstring (every line
`CRC SP JSON LF`, CRC = 8 lower-case hex digits of crc32(JSON); a format-2 header, then a
keys line and a rows line per block; a format-1 header, then one rows line per model),
never with the writer's helpers, and every refusal is compared word for word with its
path, byte offset and reason: the operator's only clue is the log line that carries them.
Nothing here opens a file: `PATH` is only the name errors carry."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.storage import snapshot, snapshotreader
from dbsvc.storage.snapshot import ModelImage, ModelStream, SnapshotImage, encode_snapshot, write_snapshot_stream
from dbsvc.storage.snapshotreader import decode_snapshot, model_blocks, model_windows, read_snapshot, snapshot_lines

PATH = "/data/t/snapshot"
EPOCH = "0123456789abcdef0123456789abcdef"


def line(body: bytes) -> bytes:
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def js(value) -> bytes:
    """Compact JSON, characters as they are (lone surrogates kept, as a hand-made file may)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def header_1(*models: tuple[str, list[str], int, int]) -> bytes:
    return line(
        js(
            {
                "format": 1,
                "epoch": EPOCH,
                "head_offset": 9,
                "models": [{"name": n, "fields": f, "count": c, "max_id": m} for n, f, c, m in models],
            }
        )
    )


def header_2(*models: tuple[str, list[str], int, int, list[str]], block_rows: int | None = 2048) -> bytes:
    head: dict = {"format": 2, "epoch": EPOCH, "head_offset": 9}
    if block_rows is not None:
        head["block_rows"] = block_rows
    head["models"] = [{"name": n, "fields": f, "count": c, "max_id": m, "keys": k} for n, f, c, m, k in models]
    return line(js(head))


def refusal(call) -> CorruptLog:
    with pytest.raises(CorruptLog) as info:
        call()
    return info.value


# --- the writer -------------------------------------------------------------------------


USERS = [[1, "a@b.c", "Ann"], [2, "x@y.z", "Xi"], [3, "q@r.s", "Q"]]
FIELDS = ["id", "email", "name"]


def expected_file() -> bytes:
    """The documented bytes of a snapshot of three users (their versions 4, 7 and 9) and an
    empty Tag model: format 4, three lines a block, each row its record's object."""
    head = (
        b'{"format":4,"epoch":"0123456789abcdef0123456789abcdef","head_offset":9,"block_rows":2048,'
        b'"models":[{"name":"User","fields":["id","email","name"],"count":3,"max_id":3,"keys":["id","email"]},'
        b'{"name":"Tag","fields":["id","label"],"count":0,"max_id":0,"keys":["id"]}]}'
    )
    keys = b'[{"first":1,"count":3},["a@b.c","x@y.z","q@r.s"]]'
    rows = (
        b'[{"id":1,"email":"a@b.c","name":"Ann"},\t{"id":2,"email":"x@y.z","name":"Xi"},'
        b'\t{"id":3,"email":"q@r.s","name":"Q"}]'
    )
    versions = b"[4,7,9]"
    return line(head) + line(keys) + line(rows) + line(versions)


@pytest.mark.parametrize("stored", [False, True], ids=["values", "stored-records"])
def test_the_writer_puts_down_the_documented_bytes(stored):
    rows = [js(dict(zip(FIELDS, r))) for r in USERS] if stored else USERS
    image = SnapshotImage(
        EPOCH,
        9,
        [
            ModelImage("User", FIELDS, rows, 3, ["id", "email"], versions=[4, 7, 9]),
            ModelImage("Tag", ["id", "label"], [], 0, ["id"]),
        ],
    )
    data = b"".join(encode_snapshot(image))
    assert data == expected_file()
    # the checksums are lower-case hex, as the docstring's example shows
    assert all(c in b"0123456789abcdef" for body in data.split(b"\n")[:-1] for c in body[:8])


def test_the_stream_writer_puts_down_the_same_bytes(tmp_path):
    path = tmp_path / "snapshot.new"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_snapshot_stream(
            fd,
            EPOCH,
            9,
            [
                ModelStream("User", FIELDS, 3, 3, [(USERS[:2], [4, 7]), (USERS[2:], [9])], ["id", "email"]),
                ModelStream("Tag", ["id", "label"], 0, 0, [], ["id"]),
            ],
        )
    finally:
        os.close(fd)
    assert path.read_bytes() == expected_file()


def test_a_lone_surrogate_in_a_keyed_value_is_written_and_read_back_as_it_was():
    """A lone surrogate only a file made by hand can hold (rows.py `pack`): the keys line
    keeps it as `surrogatepass` encodes it, and both readers give it back."""
    image = SnapshotImage(EPOCH, 9, [ModelImage("User", ["id", "name"], [[1, "\ud800x"]], 1, ["id", "name"])])
    data = b"".join(encode_snapshot(image))
    assert data.split(b"\n")[1][9:] == b'[{"first":1,"count":1},["\xed\xa0\x80x"]]'
    assert data.split(b"\n")[2][9:] == b'[{"id":1,"name":"\xed\xa0\x80x"}]'
    _epoch, _head, parts = read_snapshot(PATH, data)
    [(texts, columns)] = list(model_blocks(PATH, parts[0]))
    assert texts == [b'{"id":1,"name":"\xed\xa0\x80x"}']
    assert columns == {"id": range(1, 2), "name": ["\ud800x"]}
    assert list(model_windows(PATH, parts[0])) == [([[1, "\ud800x"]], [b'{"id":1,"name":"\xed\xa0\x80x"}'])]
    assert decode_snapshot(PATH, data).models[0].rows == [[1, "\ud800x"]]


# --- snapshot_lines ---------------------------------------------------------------------

GOOD = line(b'{"a":1}')


@pytest.mark.parametrize(
    "data, offset, reason",
    [
        (GOOD + b'0000abcd {"b"', len(GOOD), "snapshot line without its newline (truncated file)"),
        (b"\n", 0, "snapshot line has no checksum"),
        (b"12345678\n", 0, "snapshot line has no checksum"),
        (b"12345678X{}\n", 0, "snapshot line has no checksum"),
        # a short line, and a space where its 9th byte would be, on the next line
        (GOOD + b"abc\n" + b"abcd efgh\n", len(GOOD), "snapshot line has no checksum"),
        (GOOD + b"1234567g {}\n", len(GOOD), "snapshot checksum is not hexadecimal"),
        (GOOD + b"00000000 {}\n", len(GOOD), "snapshot line checksum mismatch"),
    ],
    ids=["truncated", "newline-only", "crc-only", "no-space", "short-line", "not-hex", "mismatch"],
)
def test_each_bad_line_is_refused_with_its_path_offset_and_reason(data, offset, reason):
    exc = refusal(lambda: snapshot_lines(PATH, data))
    assert (exc.path, exc.offset, exc.reason) == (PATH, offset, reason)
    assert str(exc) == f"{PATH}: corrupt at byte {offset}: {reason}"


def test_a_line_of_a_checksum_and_an_empty_body_is_a_line():
    """crc32 of nothing is 0: "00000000 " is a whole line (its body parses as nothing, which
    the header's parse refuses, not the line reader)."""
    assert [(pos, bytes(body)) for pos, body in snapshot_lines(PATH, GOOD + b"00000000 \n")] == [
        (0, b'{"a":1}'),
        (len(GOOD), b""),
    ]
    assert snapshot_lines(PATH, b"") == []


def test_an_empty_snapshot_is_refused_at_byte_0():
    exc = refusal(lambda: read_snapshot(PATH, b""))
    assert (exc.path, exc.offset, exc.reason) == (PATH, 0, "empty snapshot")
    assert str(exc) == f"{PATH}: corrupt at byte 0: empty snapshot"


# --- read_snapshot ----------------------------------------------------------------------


def test_a_format_2_header_without_block_rows_is_refused():
    data = header_2(("User", ["id"], 0, 0, ["id"]), block_rows=None)
    exc = refusal(lambda: read_snapshot(PATH, data))
    assert (exc.path, exc.offset, exc.reason) == (PATH, 0, "snapshot header: block_rows 0 is not a positive integer")


def test_keys_may_name_every_field_of_the_model():
    head = header_2(("User", ["id", "email"], 1, 1, ["email", "id"]))
    data = head + line(b'[["a@b.c"],[1]]') + line(b'[[1,"a@b.c"]]')
    _epoch, _head, [part] = read_snapshot(PATH, data)
    assert part.keys == ["email", "id"]
    assert list(model_blocks(PATH, part)) == [([b'[1,"a@b.c"]'], {"email": ["a@b.c"], "id": [1]})]


def test_each_model_part_starts_at_its_first_line_or_at_the_header_without_one():
    head = header_2(("Tag", ["id"], 0, 0, ["id"]), ("User", ["id"], 1, 1, ["id"]), ("Note", ["id"], 0, 0, ["id"]))
    keys = line(b'[{"first":5,"count":1}]')
    data = head + keys + line(b"[[5]]")
    _epoch, _head, parts = read_snapshot(PATH, data)
    assert [(p.name, p.position, len(p.lines)) for p in parts] == [
        ("Tag", 0, 0),
        ("User", len(head), 1),
        ("Note", 0, 0),
    ]
    assert (parts[1].lines[0].keys_position, parts[1].lines[0].position) == (len(head), len(head) + len(keys))


# --- model_blocks (format 2, from the keys) ---------------------------------------------


def test_an_empty_rows_line_in_a_block_of_one_is_refused_as_a_row_that_does_not_fit():
    """`[]` is a JSON array (so not "not a JSON array"), and its one text, empty, is not a row."""
    head = header_2(("User", ["id", "name"], 1, 1, ["id"]))
    keys = line(b"[[1]]")
    data = head + keys + line(b"[]")
    _epoch, _head, [part] = read_snapshot(PATH, data)
    exc = refusal(lambda: list(model_blocks(PATH, part)))
    assert (exc.path, exc.offset, exc.reason) == (
        PATH,
        len(head) + len(keys),
        "model 'User': row 1 of a block is not one row of 2 fields matching its keys line",
    )


# --- model_windows (from the rows) ------------------------------------------------------


def format_1(rows_lines: list[bytes], counts: list[int]) -> bytes:
    names = ["User", "Tag", "Note"]
    head = header_1(*((names[i], ["id", "name"], c, c) for i, c in enumerate(counts)))
    return head + b"".join(line(b) for b in rows_lines)


def windows(data: bytes, model: int = 0) -> list:
    _epoch, _head, parts = read_snapshot(PATH, data)
    return list(model_windows(PATH, parts[model]))


def test_an_empty_model_line_yields_no_window():
    assert windows(format_1([b"[]"], [0])) == []
    assert decode_snapshot(PATH, format_1([b"[]"], [0])).models[0].rows == []


def test_a_line_keeps_its_texts_when_the_next_line_also_holds_row_ends():
    """The search for a row end stops at the line's end: the next model's ",TAB" is not
    this window's."""
    data = format_1([b'[[1,"a"],\t[2,"b"]]', b'[[3,"c"],\t[4,"d"]]'], [2, 2])
    assert windows(data, 0) == [([[1, "a"], [2, "b"]], [b'[1,"a"]', b'[2,"b"]'])]
    assert windows(data, 1) == [([[3, "c"], [4, "d"]], [b'[3,"c"]', b'[4,"d"]'])]


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'[[1,"a"],\t[2,"b"],]', "model 'User': the line is not JSON (Expecting value: line 1 column 19 (char 18))"),
        (b'{"id":1}', "model 'User': the line is not a JSON array of rows"),
    ],
    ids=["not-json", "not-an-array"],
)
def test_a_rows_line_that_is_not_a_json_array_is_refused_naming_its_model(body, reason):
    head = header_1(("User", ["id", "name"], 2, 2))
    exc = refusal(lambda: decode_snapshot(PATH, head + line(body)))
    assert (exc.path, exc.offset, exc.reason) == (PATH, len(head), reason)


def test_a_row_count_other_than_the_headers_is_refused_at_the_models_line():
    head = header_1(("User", ["id", "name"], 3, 3))
    exc = refusal(lambda: decode_snapshot(PATH, head + line(b'[[1,"a"],\t[2,"b"]]')))
    assert (exc.path, exc.offset, exc.reason) == (PATH, len(head), "model 'User': 2 rows, header says 3")


def test_a_window_that_does_not_parse_after_good_ones_hands_over_the_rest_of_the_line(monkeypatch):
    """Windows of about 40 bytes: the first rows are one text each and read a window at a
    time; the last ones carry a TAB inside a row, so a window is cut inside a row and does
    not parse: the line parsed whole gives the rows not yet handed out, once each."""
    monkeypatch.setattr(snapshotreader, "WINDOW", 40)
    canonical = [js([i, "v%02d" % i]) for i in range(1, 11)]  # 10 bytes each, 12 with ",TAB"
    tabbed = [b'[%d,\t"t%02d"]' % (i, i) for i in range(11, 21)]  # a TAB inside, joined by ","
    body = b"[" + b",\t".join(canonical) + b",\t" + b",".join(tabbed) + b"]"
    data = format_1([body], [20])
    got = windows(data)
    kept = [texts is not None for _rows, texts in got]
    assert kept[:2] == [True, True] and kept[-1] is False
    assert [row for rows, _texts in got for row in rows] == json.loads(body)
    assert decode_snapshot(PATH, data).models[0].rows == json.loads(body)


def test_a_window_that_holds_no_row_is_refused_as_not_json(monkeypatch):
    """A window of only spaces between two row ends parses as `[]`: an empty element,
    which the whole line's parse refuses."""
    monkeypatch.setattr(snapshotreader, "WINDOW", 40)
    body = b'[[1,"' + b"a" * 50 + b'"],\t' + b" " * 50 + b',\t[2,"b"]]'
    head = header_1(("User", ["id", "name"], 2, 2))
    exc = refusal(lambda: decode_snapshot(PATH, head + line(body)))
    assert (exc.path, exc.offset) == (PATH, len(head))
    assert exc.reason.startswith("model 'User': the line is not JSON (Expecting value")


def test_decode_snapshot_keeps_each_models_keys():
    two = header_2(("User", ["id", "email"], 1, 1, ["id", "email"])) + line(b'[[1],["a@b.c"]]') + line(b'[[1,"a@b.c"]]')
    assert [(m.name, m.keys, m.rows) for m in decode_snapshot(PATH, two).models] == [
        ("User", ["id", "email"], [[1, "a@b.c"]])
    ]
    one = format_1([b'[[1,"a"]]'], [1])
    assert [(m.name, m.keys, m.rows) for m in decode_snapshot(PATH, one).models] == [("User", [], [[1, "a"]])]


def test_decode_snapshot_names_the_file_in_a_refusal():
    exc = refusal(lambda: decode_snapshot(PATH, GOOD + b"\n"))
    assert (exc.path, exc.offset, exc.reason) == (PATH, len(GOOD), "snapshot line has no checksum")


def test_a_row_end_before_the_closing_bracket_is_refused_as_not_json_in_a_line_of_many_windows(monkeypatch):
    """`[row,TAB]` is not JSON, whether the line fits one window or is cut into several: the
    window cut at that last ",TAB" must not end the line early and hide it."""
    monkeypatch.setattr(snapshotreader, "WINDOW", 40)
    head = header_1(("User", ["id", "name"], 1, 1))
    for body in (b'[[1,"a"],\t]', b'[[1,"' + b"a" * 50 + b'"],\t]'):
        exc = refusal(lambda: decode_snapshot(PATH, head + line(body)))
        assert (exc.path, exc.offset) == (PATH, len(head))
        assert exc.reason.startswith("model 'User': the line is not JSON (Expecting value"), body


def test_blocks_of_one_row_are_read():
    """block_rows 1, the smallest the header may name: one keys line and one rows line a row."""
    head = header_2(("User", ["id", "name"], 2, 3, ["id"]), block_rows=1)
    data = head + line(b'[{"first":1,"count":1}]') + line(b'[[1,"a"]]') + line(b"[[3]]") + line(b'[[3,"c"]]')
    _epoch, _head, [part] = read_snapshot(PATH, data)
    assert part.block_rows == 1
    assert list(model_blocks(PATH, part)) == [([b'[1,"a"]'], {"id": range(1, 2)}), ([b'[3,"c"]'], {"id": [3]})]
    exc = refusal(lambda: read_snapshot(PATH, header_2(("User", ["id"], 0, 0, ["id"]), block_rows=0)))
    assert exc.reason == "snapshot header: block_rows 0 is not a positive integer"


# --- format 3: the versions lines -------------------------------------------------------


def header_3(*models: tuple[str, list[str], int, int, list[str]], block_rows: int = 2048, format: int = 3) -> bytes:
    head = {"format": format, "epoch": EPOCH, "head_offset": 9, "block_rows": block_rows}
    head["models"] = [{"name": n, "fields": f, "count": c, "max_id": m, "keys": k} for n, f, c, m, k in models]
    return line(js(head))


def versions_of(data: bytes, head: int = 9) -> list[int]:
    _epoch, _head, [part] = read_snapshot(PATH, data)
    return list(snapshotreader.model_versions(PATH, part, head))


@pytest.mark.parametrize(
    ("versions", "written"),
    [([5, 6, 7], b'{"first":5,"count":3}'), ([7, 6, 5], b"[7,6,5]"), (None, b"[9,9,9]")],
    ids=["a-run", "a-list", "the-head"],
)
def test_the_versions_line_is_a_run_or_a_list_and_without_versions_the_head(versions, written):
    image = SnapshotImage(EPOCH, 9, [ModelImage("User", FIELDS, USERS, 3, ["id", "email"], versions=versions)])
    data = b"".join(encode_snapshot(image))
    assert data.split(b"\n")[3] == line(written)[:-1]
    assert versions_of(data) == ([9, 9, 9] if versions is None else versions)


def test_each_block_has_its_own_versions_line(monkeypatch, tmp_path):
    """Blocks of two rows: three rows make two blocks, each of three lines, in both writers
    (a block of one row has a run of one id and one version)."""
    monkeypatch.setattr(snapshot, "BLOCK_ROWS", 2)
    expected = (
        header_3(("User", FIELDS, 3, 3, ["id"]), block_rows=2, format=4)
        + line(b'[{"first":1,"count":2}]')
        + line(b'[{"id":1,"email":"a@b.c","name":"Ann"},\t{"id":2,"email":"x@y.z","name":"Xi"}]')
        + line(b"[8,4]")
        + line(b'[{"first":3,"count":1}]')
        + line(b'[{"id":3,"email":"q@r.s","name":"Q"}]')
        + line(b'{"first":9,"count":1}')
    )
    image = SnapshotImage(EPOCH, 9, [ModelImage("User", FIELDS, USERS, 3, ["id"], versions=[8, 4, 9])])
    assert b"".join(encode_snapshot(image)) == expected
    path = tmp_path / "snapshot.new"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_snapshot_stream(
            fd, EPOCH, 9, [ModelStream("User", FIELDS, 3, 3, [([USERS[0]], [8]), (USERS[1:], [4, 9])], ["id"])]
        )
    finally:
        os.close(fd)
    assert path.read_bytes() == expected
    assert versions_of(expected) == [8, 4, 9]
    _epoch, _head, [part] = read_snapshot(PATH, expected)
    first, second = part.lines
    assert first.versions_position == expected.index(line(b"[8,4]"))
    last = line(b'{"first":9,"count":1}')
    assert bytes(second.versions) == last[9:-1] and second.versions_position == expected.index(last)


def test_a_format_3_file_is_read_with_its_versions_by_both_readers_and_decode():
    head = header_3(("User", ["id", "name"], 2, 5, ["id"]))
    data = head + line(b"[[2,5]]") + line(b'[[2,"b"],\t[5,"e"]]') + line(b'{"first":8,"count":2}')
    _epoch, _head, [part] = read_snapshot(PATH, data)
    assert list(model_blocks(PATH, part)) == [([b'[2,"b"]', b'[5,"e"]'], {"id": [2, 5]})]
    assert list(model_windows(PATH, part)) == [([[2, "b"], [5, "e"]], [b'[2,"b"]', b'[5,"e"]'])]
    (model,) = decode_snapshot(PATH, data).models
    assert (model.rows, list(model.versions)) == ([[2, "b"], [5, "e"]], [8, 9])


@pytest.mark.parametrize("form", [1, 2])
def test_a_format_1_or_2_file_gives_every_row_the_head_it_is_given(form):
    if form == 1:
        data = header_1(("User", ["id", "name"], 3, 3)) + line(b'[[1,"a"],\t[2,"b"],\t[3,"c"]]')
    else:
        data = (
            header_2(("User", ["id", "name"], 3, 3, ["id"]), block_rows=2)
            + line(b'[{"first":1,"count":2}]')
            + line(b'[[1,"a"],\t[2,"b"]]')
            + line(b"[[3]]")
            + line(b'[[3,"c"]]')
        )
    assert versions_of(data, head=12) == [12, 12, 12]
    assert list(decode_snapshot(PATH, data).models[0].versions) == [9, 9, 9]


def test_a_model_without_rows_has_no_versions():
    assert versions_of(header_3(("User", ["id"], 0, 0, ["id"]))) == []


@pytest.mark.parametrize(
    ("versions", "why"),
    [
        (b"[4]", "not 2 versions"),
        (b"[4,7,9]", "not 2 versions"),
        (b'{"first":4,"count":3}', "not 2 versions"),
        (b'{"first":4}', "not 2 versions"),
        (b"4", "not 2 versions"),
        (b'"47"', "not 2 versions"),
        (b"[0,7]", "a version outside 1..9"),
        (b"[4,10]", "a version outside 1..9"),
        (b'{"first":9,"count":2}', "a version outside 1..9"),
        (b'[4,"7"]', "'str' object cannot be interpreted as an integer"),
        (b"[4,7.0]", "'float' object cannot be interpreted as an integer"),
        (b"[4,9223372036854775808]", "int too big to convert"),
        (b"[4,null]", "'NoneType' object cannot be interpreted as an integer"),
    ],
)
def test_a_versions_line_that_is_not_its_blocks_versions_is_refused_at_that_line(versions, why):
    head = header_3(("User", ["id"], 2, 2, ["id"]))
    body = head + line(b'[{"first":1,"count":2}]') + line(b"[[1],\t[2]]")
    exc = refusal(lambda: versions_of(body + line(versions)))
    assert (exc.path, exc.offset) == (PATH, len(body))
    assert exc.reason == f"model 'User': a versions line is not its block's versions ({why})"


def test_a_version_equal_to_the_head_or_to_1_is_a_version():
    head = header_3(("User", ["id"], 2, 2, ["id"]))
    assert versions_of(head + line(b"[[1,2]]") + line(b"[[1],\t[2]]") + line(b"[1,9]")) == [1, 9]


def test_a_format_3_file_needs_three_lines_a_block():
    head = header_3(("User", ["id"], 3, 3, ["id"]), block_rows=2)
    data = (
        head
        + line(b'[{"first":1,"count":2}]')
        + line(b"[[1],\t[2]]")
        + line(b"[3,4]")
        + line(b"[[3]]")
        + line(b"[[3]]")
    )
    exc = refusal(lambda: read_snapshot(PATH, data))
    assert (exc.offset, exc.reason) == (len(data), "snapshot has 5 lines after its header, its header's models need 6")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"format": 5}, "snapshot format 5, expected one of [1, 2, 3, 4]"),
        ({"block_rows": 0}, "snapshot header: block_rows 0 is not a positive integer"),
        ({"block_rows": None}, "snapshot header: block_rows None is not a positive integer"),
    ],
)
def test_a_format_3_header_is_checked_as_a_format_2_header(change, reason):
    head = json.loads(header_3(("User", ["id"], 0, 0, ["id"]))[9:])
    head.update(change)
    exc = refusal(lambda: read_snapshot(PATH, line(js(head))))
    assert (exc.offset, exc.reason) == (0, reason)


def test_a_format_3_header_whose_keys_are_not_its_fields_is_refused():
    exc = refusal(lambda: read_snapshot(PATH, header_3(("User", ["id"], 0, 0, ["id", "id"]))))
    assert exc.reason == "snapshot header: the keys of model 'User' are not distinct names of its fields: ['id', 'id']"


def test_decode_snapshot_names_the_file_of_a_bad_versions_line():
    head = header_3(("User", ["id"], 1, 1, ["id"]))
    body = head + line(b"[[1]]") + line(b"[[1]]")
    exc = refusal(lambda: decode_snapshot(PATH, body + line(b"[10]")))
    assert (exc.path, exc.offset) == (PATH, len(body))
    assert exc.reason == "model 'User': a versions line is not its block's versions (a version outside 1..9)"


def test_a_format_1_header_is_read_without_blocks_whatever_else_it_holds():
    """Format 1 has no blocks: a "block_rows" in its header (no writer put one there) is not
    read, so its one line per model still gives every row its version."""
    head = {"format": 1, "epoch": EPOCH, "head_offset": 9, "block_rows": 2}
    head["models"] = [{"name": "User", "fields": ["id", "name"], "count": 3, "max_id": 3}]
    data = line(js(head)) + line(b'[[1,"a"],\t[2,"b"],\t[3,"c"]]')
    _epoch, _head, [part] = read_snapshot(PATH, data)
    assert (part.block_rows, part.keys) == (0, None)
    assert versions_of(data) == [9, 9, 9]
