"""dbsvc/datatools/lines.py (issue 33): the JSON Lines format, line by line and a chunk at a
time, with the exact record or message each line gives.
"""

from __future__ import annotations

import pytest

from dbsvc.datatools.lines import BadLine, decode_line, decode_lines, encode_line, line_head

DEEP = "record nests arrays and objects deeper than 64 levels: at most 64 are allowed, the body itself counted"
KEYS = 'expected exactly the keys "model" and "record", got '


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# (line, what decode_line gives: a (model, record) pair, None for a blank line, or a BadLine's text)
CASES = [
    (b'{"model":"User","record":{"id":1}}\n', ("User", {"id": 1})),
    (b'{"record": {"id": 2} , "model" : "User"}\r\n', ("User", {"id": 2})),
    (b'  {"model":"User","record":{"id":3}}\n', ("User", {"id": 3})),
    (b'{"model":"U","record":7}\n', ("U", 7)),  # the model's validator refuses it, not the format
    (b"\n", None),
    (b"  \r\n", None),
    (
        b'\xef\xbb\xbf{"model":"User","record":{}}\n',
        "a UTF-8 byte order mark (EF BB BF) starts the line: only the file may start with one",
    ),
    (b'{"model":"User","record":{}}x\n', "not JSON: Extra data: line 1 column 29 (char 28)"),
    (
        b'{"model":"User","record":{}} {"model":"User","record":{}}\n',
        "not JSON: Extra data: line 1 column 30 (char 29)",
    ),
    (b"[1]\n", 'expected an object {"model": ..., "record": {...}}, got [1]'),
    (b'"s"\n', 'expected an object {"model": ..., "record": {...}}, got "s"'),
    (b"null\n", 'expected an object {"model": ..., "record": {...}}, got null'),
    (b"{}\n", KEYS + "none"),
    (b'{"model":"User"}\n', KEYS + "'model'"),
    (b'{"record":{}}\n', KEYS + "'record'"),
    (b'{"model":"User","record":{},"x":1}\n', KEYS + "'model', 'record', 'x'"),
    (b'{"model":1,"record":{}}\n', '"model" must be a model name, got 1'),
    (b'{"model":null,"record":1}\n', '"model" must be a model name, got null'),
    (b'{"model":"User","record":{"a":NaN}}\n', "not JSON: NaN is not valid JSON (RFC 8259 §6: numbers are finite)"),
    (
        b'{"model":"U","record":{"a":"\\ud800"}}\n',
        "'a' holds a lone surrogate in the string \"\\ud800\": expected Unicode text (a lone surrogate has no UTF-8 "
        "form, RFC 8259 §8.2)",
    ),
    (b'{"model":"U","record":{"a":' + b"[" * 64 + b"]" * 64 + b"}}\n", DEEP),
    (b'{"model":"U","record":{"a":' + b"[" * 63 + b"]" * 63 + b"}}\n", ("U", {"a": nested(63)})),
    (b"[" * 5000 + b"]" * 5000 + b"\n", DEEP),  # past the decoder's own recursion limit
    (b'{"model":"User","record":' + b"[" * 5000 + b"]" * 5000 + b"}\n", DEEP),
    (b'{"model":"User","record":{}}', ("User", {})),  # the last line, without a newline
]


@pytest.mark.parametrize("raw, expected", CASES, ids=[str(i) for i in range(len(CASES))])
def test_decode_line_gives_the_record_or_says_what_the_line_is(raw, expected):
    if isinstance(expected, str):
        with pytest.raises(BadLine) as caught:
            decode_line(raw)
        assert str(caught.value) == expected
    else:
        assert decode_line(raw) == expected


def numbered(cases: list, first: int) -> tuple[list, list]:
    good = [(first + i, *want) for i, (_raw, want) in enumerate(cases) if isinstance(want, tuple)]
    bad = [(first + i, want) for i, (_raw, want) in enumerate(cases) if isinstance(want, str)]
    return good, bad


def test_decode_lines_gives_each_line_what_decode_line_gives_numbered_from_the_first():
    good, bad = decode_lines([raw for raw, _want in CASES], 41)
    assert (good, sorted(bad)) == numbered(CASES, 41)


def test_a_chunk_that_is_not_utf8_as_a_whole_is_decoded_line_by_line():
    cases = [*CASES[:5], (b'{"model":"U","record":{"a":"\xff"}}\n', None), *CASES[5:]]
    good, bad = decode_lines([raw for raw, _want in cases], 1)
    assert [n for n, _m, _r in good] == [1, 2, 3, 4, 23, 26]
    assert [(m, r) for _n, m, r in good] == [w for _raw, w in cases if isinstance(w, tuple)]
    messages = dict(bad)
    assert messages.pop(6).startswith("not JSON: 'utf-8' codec can't decode byte 0xff in position 28")
    assert messages == {n: want for n, (_raw, want) in enumerate(cases, 1) if isinstance(want, str)}


def test_a_line_the_fast_path_reads_stops_at_its_own_newline():
    """Two records on consecutive lines: each ends at its own newline (the scan's end is
    compared with the line's end, not the chunk's)."""
    lines = [b'{"model":"A","record":{"n":1}}\n', b'{"model":"B","record":{"n":2}}\n', b"\n"]
    assert decode_lines(lines, 1) == ([(1, "A", {"n": 1}), (2, "B", {"n": 2})], [])
    lines = [b'{"model":"A","record":{"n":[1,\n', b'2]}}\n']  # one value over two lines: both refused
    good, bad = decode_lines(lines, 1)
    assert good == []
    assert [n for n, _m in bad] == [1, 2]


def test_a_fast_path_record_a_body_could_not_hold_is_refused():
    lines = [b'{"model":"U","record":{"a":"\\ud800"}}\n', b'{"model":"U","record":{"b":1}}\n']
    good, bad = decode_lines(lines, 3)
    assert good == [(4, "U", {"b": 1})]
    assert [n for n, _m in bad] == [3]
    assert bad[0][1].startswith("'a' holds a lone surrogate")


def test_encode_line_writes_the_wrapper_compactly():
    head = line_head('Blog"Post')
    assert head == '{"model":"Blog\\"Post","record":'
    assert encode_line(head, {"a": "\u00e9", "b": 1.0, "c": None, "d": [1, {"e": 2}]}) == (
        '{"model":"Blog\\"Post","record":{"a":"\u00e9","b":1.0,"c":null,"d":[1,{"e":2}]}}\n'
    )
