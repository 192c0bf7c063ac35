"""The value helpers in dbsvc.runtime that generated code calls."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from dbsvc import runtime


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"),
        ("2024-05-01T12:00:00.000001Z", "2024-05-01T12:00:00.000001Z"),
        ("2024-05-01T12:00:00.9999999Z", "2024-05-01T12:00:00.999999Z"),  # truncated, never rounded up
        ("2024-05-01T00:30:00+01:00", "2024-04-30T23:30:00Z"),
        ("2024-02-29T23:00:00-01:00", "2024-03-01T00:00:00Z"),
        ("0999-01-01T00:00:00Z", "0999-01-01T00:00:00Z"),
        ("9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999999Z"),
    ],
)
def test_parse_datetime_canonicalises(text, canonical):
    assert runtime.parse_datetime(text) == canonical
    assert runtime.datetime_key(canonical) == runtime.parse_datetime_key(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2024-05-01",
        "2024-05-01T12:00:00",
        "2024-05-01T12:00Z",
        "2024-05-01T12:00:00+01",
        "2024-05-01T12:00:00+01:60",
        "2024-05-01T12:00:00Z ",
        "2024-05-01T12:00:00ZZ",
        "9999-12-31T23:59:59-00:01",
        "2024-13-01T00:00:00Z",
        "2024-05-01T12:00:00,5Z",
        "2024-05-01_12:00:00Z",
    ],
)
def test_parse_datetime_refuses(text):
    assert runtime.parse_datetime(text) is None and runtime.parse_datetime_key(text) is None


def test_datetime_key_of_none_is_none():
    assert runtime.datetime_key(None) is None


@pytest.mark.parametrize(
    ("text", "result"),
    [
        ("3", 3),
        ("-3", -3),
        ("+3", 3),
        ("3.0", 3),
        ("3e2", 300),
        ("3.5", None),
        ("x", None),
        ("", None),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("1" * 30, None),
        ("nan", None),
    ],
)
def test_parse_int_text(text, result):
    assert runtime.parse_int_text(text) == result


@pytest.mark.parametrize(
    ("text", "result"),
    [
        ("3", 3.0),
        ("-.5", -0.5),
        ("1e3", 1000.0),
        ("nan", None),
        ("inf", None),
        ("1e999", None),
        ("1_0", None),
        ("", None),
    ],
)
def test_parse_float_text(text, result):
    assert runtime.parse_float_text(text) == result


@pytest.mark.parametrize(
    ("text", "result"), [("0", 0), ("12", 12), ("-1", None), ("+1", None), ("1.0", None), ("٣", None)]
)
def test_parse_count(text, result):
    assert runtime.parse_count(text) == result


def test_finite_float():
    assert runtime.finite_float(3) == 3.0 and runtime.finite_float(10**400) is None
    assert runtime.finite_float(float("nan")) is None


def test_now_and_new_uuid_shapes():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", runtime.now())
    assert uuid.UUID(runtime.new_uuid()).version == 4


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "null"),
        (True, "the boolean true"),
        (False, "the boolean false"),
        ("a", 'the string "a"'),
        (1.5, "the number 1.5"),
        ([1], "an array [1]"),
        ({"a": 1}, 'an object {"a": 1}'),
    ],
)
def test_got_describes_json_values(value, shown):
    assert runtime.got(value) == shown


def test_show_cuts_long_values():
    assert runtime.show("x" * 100) == '"' + "x" * 58 + "…"


JSON_VALUES = [
    {
        "id": 7,
        "title": "héllo \u2603 \"quoted\" \\ \n",
        "score": 1.5,
        "big": 2**63 - 1,
        "neg": -0.0,
        "none": None,
        "flags": [True, False],
        "nested": {"a": [1, 2.25e-7, {"b": "c"}]},
    },
    [],
    {},
    "plain",
    3,
    1e300,
    "\ud800",
]


@pytest.mark.parametrize("value", JSON_VALUES)
def test_compact_json_writes_what_the_stdlib_encoder_writes(value):
    reference = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert runtime.compact_json(value) == reference
    assert runtime.compact_json_in_python(value) == reference  # where json has no C encoder


@pytest.mark.parametrize("c_encoder", [True, False], ids=["c", "python"])
@pytest.mark.parametrize(
    "value, error", [({"x": float("nan")}, ValueError), ([float("inf")], ValueError), ({"x": object()}, TypeError)]
)
def test_compact_json_refuses_what_is_not_json(value, error, c_encoder):
    with pytest.raises(error):
        (runtime.compact_json if c_encoder else runtime.compact_json_in_python)(value)


# Values whose text a separator could be confused with: NUL and commas inside strings, `%`,
# non-ASCII, a lone surrogate, nesting, a tuple (a record's values), ints past 64 bits.
AWKWARD_VALUES = [
    *JSON_VALUES,
    "nul \x00 and \x1f, a comma, a \"quote\" and \\",
    "%s %d %% {}",
    "é ü 漢字 \U0001f600",
    [1, [2, {"a": None}], "x\x00y"],
    {"z": 1, "a": [True, 1.5], "\x00": ","},
    (1, "lone \ud800", 0.1, None, True),
    [2**64, -(2**63), 0.0, -1.5e-300],
]


@pytest.mark.parametrize("separator", [",", "\0"], ids=["comma", "nul"])
@pytest.mark.parametrize("value", AWKWARD_VALUES)
def test_c_encoder_writes_the_stdlib_encoder_s_text_with_its_item_separator(value, separator):
    """One builder for compact_json's encoder (",") and storage's `pack_parts` encoder (NUL,
    cut there into a record's values' texts): each writes what the stdlib writes with that
    separator, so the stored bytes and the record's JSON stay what they were."""
    encoder = runtime.c_encoder(separator)
    assert encoder is not None  # CPython's json has its C encoder
    reference = json.dumps(value, ensure_ascii=False, separators=(separator, ":"), allow_nan=False)
    assert "".join(encoder(value, 0)) == reference


@pytest.mark.parametrize("separator", [",", "\0"], ids=["comma", "nul"])
@pytest.mark.parametrize(
    "value, error, message",
    [
        ([1, float("nan")], ValueError, "Out of range float values are not JSON compliant"),
        ({"x": float("-inf")}, ValueError, "Out of range float values are not JSON compliant"),
        ([1, object()], TypeError, "Object of type object is not JSON serializable"),  # runtime's own refusal
        ({(1, 2): 1}, TypeError, "keys must be str, int, float, bool or None, not tuple"),  # never skipped
    ],
)
def test_c_encoder_refuses_what_is_not_json(value, error, message, separator):
    """Refused as the stdlib's encoder refuses, with its message: a value of another type by
    runtime's `_not_json`, a key of another type never skipped (docs/mutation.md, session 22)."""
    encoder = runtime.c_encoder(separator)
    assert encoder is not None
    with pytest.raises(error, match=re.escape(message)):
        "".join(encoder(value, 0))
