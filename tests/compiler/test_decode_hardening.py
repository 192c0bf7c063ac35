"""Issue 14, in process: what the body decoder refuses (non-finite numbers, a member named
twice, excess nesting, lone surrogates), NFC normalization of str values, `.`/`..` as str ids, and the cap on
filter values. The same cases through a real server: tests/app/test_app_hostile_bodies.py."""

from __future__ import annotations

import json
import unicodedata

import pytest

from dbsvc.bodies import MAX_DEPTH, decode_body
from dbsvc.errors import BadQuery, BadRequest, ConstraintViolation
from dbsvc.runtime import MAX_FILTER_VALUES, compact_json, filter_sets, nfc, show
from support.mutation import shared

NFD_CAFE = "cafe\u0301"
NFC_CAFE = "caf\u00e9"

SCHEMA = """
model Account {
  id       str    @id @min(1) @max(8)
  email    str    @unique @filter @max(10)
  tag      str?   @filter
  score    float  @filter
  doc      json?
}
"""


@pytest.fixture(scope=shared("module"))
def account(compile_text):
    return compile_text(SCHEMA).BY_NAME["Account"]


def nested(depth: int) -> str:
    """A body nesting `depth` levels: the object, then arrays inside its `doc` field."""
    return '{"doc":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def refused(text: str) -> str:
    with pytest.raises(BadRequest) as info:
        decode_body(text)
    return info.value.detail


# --- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,shown",
    [
        ('{"doc":[1e400]}', "the number 1e400 is out of range"),
        ('{"doc":{"x":-1e400}}', "the number -1e400 is out of range"),
        ('{"score":1e309}', "the number 1e309 is out of range"),
        ('{"score":' + "9" * 400 + '.0}', "the number 999"),
    ],
)
def test_numbers_out_of_a_doubles_range_are_refused(text, shown):
    detail = refused(text)
    assert detail.startswith("request body is not acceptable JSON: ")
    assert shown in detail and "expected a finite number" in detail


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literals_are_refused(literal):
    assert refused('{"doc":[%s]}' % literal) == (
        f"request body is not valid JSON: {literal} is not valid JSON (RFC 8259 §6: numbers are finite)"
    )


def test_finite_extremes_and_huge_integers_pass_and_encode_again():
    value = decode_body('{"doc":[1.7976931348623157e308,5e-324,1e-400,-0.0,%s]}' % ("9" * 400))
    assert value["doc"][:4] == [1.7976931348623157e308, 5e-324, 0.0, -0.0]
    assert json.loads(compact_json(value)) == value


# --- member names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,name",
    [
        ('{"email":"a@x","email":"b@x"}', '"email"'),
        ('{"doc":{"k":1,"j":2,"k":3}}', '"k"'),  # inside a json field's value
        ('{"doc":[{},{"a":[{"b":1,"b":1}]}]}', '"b"'),  # deep, and equal values too
        ('{"email":"a@x","\\u0065mail":"b@x"}', '"email"'),  # one name, spelled two ways
    ],
)
def test_an_object_naming_a_member_twice_is_refused(text, name):
    # json keeps the last value without a word; which one was meant is not ours to guess.
    assert refused(text) == (
        f"request body is not acceptable JSON: an object names the member {name} "
        "twice: expected each name once (RFC 8259 §4)"
    )


def test_one_name_in_different_objects_or_cases_is_fine():
    value = decode_body('{"doc":[{"a":1},{"a":2},{"A":3,"a":4}],"email":"x"}')
    assert value == {"doc": [{"a": 1}, {"a": 2}, {"A": 3, "a": 4}], "email": "x"}
    assert list(value["doc"][2]) == ["A", "a"]  # member order kept


# --- nesting -------------------------------------------------------------------------------


def test_nesting_up_to_the_limit_is_accepted():
    value = decode_body(nested(MAX_DEPTH))
    assert json.loads(compact_json(value)) == value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 971, 972, 973, 100_000])
def test_nesting_past_the_limit_is_refused(depth):
    assert refused(nested(depth)) == (
        f"request body nests arrays and objects deeper than {MAX_DEPTH} levels: "
        f"at most {MAX_DEPTH} are allowed, the body itself counted"
    )


def test_many_brackets_that_do_not_nest_deep_are_accepted():
    wide = '{"doc":[' + ",".join(["[{}]"] * 5000) + '],"text":"' + "[" * 500 + '"}'
    assert len(decode_body(wide)["doc"]) == 5000


def test_depth_counts_objects_and_arrays_alike():
    deep_objects = '{"doc":' + '{"a":' * (MAX_DEPTH - 1) + "1" + "}" * (MAX_DEPTH - 1) + "}"
    assert decode_body(deep_objects)["doc"]["a"]
    assert "deeper than" in refused('{"doc":' + '{"a":' * MAX_DEPTH + "1" + "}" * MAX_DEPTH + "}")


# --- lone surrogates -----------------------------------------------------------------------


def violations_of(text: str) -> list[dict]:
    with pytest.raises(ConstraintViolation) as info:
        decode_body(text)
    return info.value.errors


def test_lone_surrogate_in_a_value_is_422_naming_the_field():
    errors = violations_of('{"email":"s@x.io","name":"x","age":"\\ud800"}')
    assert errors == [
        {
            "field": "age",
            "message": (
                "'age' holds a lone surrogate in the string \"\\ud800\": expected Unicode text "
                "(a lone surrogate has no UTF-8 form, RFC 8259 §8.2)"
            ),
        }
    ]


def test_every_field_holding_a_lone_surrogate_is_listed():
    errors = violations_of('{"id":"a\\udc00","email":"ok","doc":{"k":["x","\\uDBFF"]},"tag":"\\ud800z"}')
    assert [e["field"] for e in errors] == ["id", "doc", "tag"]
    assert '"\\udbff"' in errors[1]["message"] and '"\\ud800z"' in errors[2]["message"]
    for error in errors:  # every message encodes as UTF-8
        error["message"].encode("utf-8")


def test_lone_surrogate_in_a_nested_key_is_422_for_its_field():
    assert [e["field"] for e in violations_of('{"doc":{"\\ud800":1}}')] == ["doc"]


@pytest.mark.parametrize(
    "text,where",
    [
        ('{"\\ud800":1}', 'in the key "\\ud800"'),
        ('{"a":1,"x\\udfffy":2}', 'in the key "x\\udfffy"'),
        ('"\\ud800"', 'in the string "\\ud800"'),
        ('["ok","\\udc00"]', 'in the string "\\udc00"'),
    ],
)
def test_lone_surrogate_in_a_key_or_outside_an_object_is_400(text, where):
    detail = refused(text)
    assert (
        detail == f"request body holds a lone surrogate {where}: expected Unicode text "
        "(a lone surrogate has no UTF-8 form, RFC 8259 §8.2)"
    )
    detail.encode("utf-8")


@pytest.mark.parametrize(
    "text,expected",
    [
        ('{"doc":"\\ud83d\\ude00"}', "\U0001f600"),  # a valid pair is one character
        ('{"doc":"\\\\ud800"}', "\\ud800"),  # an escaped backslash, then text
        ('{"doc":"\\u00e9\\u4e2d"}', "\u00e9\u4e2d"),
    ],
)
def test_valid_escapes_pass(text, expected):
    assert decode_body(text)["doc"] == expected


def test_show_escapes_lone_surrogates():
    assert show("a\ud800b") == '"a\\ud800b"'
    assert show({"k": "\udfff"}) == '{"k": "\\udfff"}'


# --- NFC -----------------------------------------------------------------------------------


def test_nfc_leaves_ascii_and_normalized_text_as_they_are():
    text = "plain ascii"
    assert nfc(text) is text
    composed = "d\u00e9j\u00e0 vu"
    assert nfc(composed) is composed
    assert nfc(NFD_CAFE) == NFC_CAFE


def test_str_fields_are_stored_in_nfc_and_measured_after(account):
    record = account.validate_create({"id": "a", "email": NFD_CAFE + "@x", "tag": "A\u030a", "score": 1})
    assert record["email"] == NFC_CAFE + "@x" and unicodedata.is_normalized("NFC", record["email"])
    assert record["tag"] == "\u00c5"
    # 10 characters once composed, 11 as sent: @max(10) measures what is stored.
    assert len(NFD_CAFE + "@x.io1") == 11
    record = account.validate_create({"id": "b", "email": NFD_CAFE + "@x.io1", "score": 1})
    assert record["email"] == NFC_CAFE + "@x.io1"


def test_json_fields_are_stored_as_sent(account):
    record = account.validate_create({"id": "a", "email": "e", "score": 1, "doc": {NFD_CAFE: NFD_CAFE}})
    assert record["doc"] == {NFD_CAFE: NFD_CAFE}


def test_patch_and_replace_normalize_too(account):
    current = account.validate_create({"id": "a", "email": "e", "score": 1})
    assert account.validate_patch({"tag": NFD_CAFE}, current)["tag"] == NFC_CAFE
    assert account.validate_replace({"email": NFD_CAFE, "score": 2}, "a")["email"] == NFC_CAFE


def test_str_filters_and_ids_are_normalized(account):
    assert account.parse_list_query([("email", NFD_CAFE)]).filters == {"email": frozenset({NFC_CAFE})}
    assert account.parse_feed_query([("tag", NFD_CAFE)]).filters == {"tag": frozenset({NFC_CAFE})}
    assert account.parse_id(NFD_CAFE) == NFC_CAFE
    assert account.validate_create({"id": NFD_CAFE, "email": "e", "score": 1})["id"] == NFC_CAFE


# --- . and .. as str ids ---------------------------------------------------------------------


@pytest.mark.parametrize("segment", [".", ".."])
def test_dot_segments_are_not_ids_in_the_path(account, segment):
    with pytest.raises(BadRequest) as info:
        account.parse_id(segment)
    assert info.value.detail == f"invalid id {segment!r}: '.' and '..' are path segments, not ids (RFC 3986 §3.3)"


@pytest.mark.parametrize("value", [".", ".."])
def test_dot_segments_are_not_ids_in_a_body(account, violations, value):
    assert violations(account.validate_create, {"id": value, "email": "e", "score": 1}) == [
        {
            "field": "id",
            "message": f"'id' must not be \"{value}\": '.' and '..' are path segments, not ids (RFC 3986 §3.3)",
        }
    ]


@pytest.mark.parametrize("value", ["...", ".a", "a.", "%2E"])
def test_other_dotted_ids_are_fine(account, value):
    assert account.validate_create({"id": value, "email": "e", "score": 1})["id"] == value
    assert account.parse_id(value) == value


# --- filter values ---------------------------------------------------------------------------


def test_repeated_filters_collect_every_value(account):
    pairs = [("email", f"e{i}") for i in range(MAX_FILTER_VALUES)]
    filters = account.parse_list_query(pairs).filters
    assert filters == {"email": frozenset(f"e{i}" for i in range(MAX_FILTER_VALUES))}
    assert type(filters["email"]) is frozenset


def test_filter_values_are_capped_across_fields(account):
    half = MAX_FILTER_VALUES // 2
    pairs = [("email", f"e{i}") for i in range(half)] + [("tag", f"t{i}") for i in range(half + 1)]
    for parse in (account.parse_list_query, account.parse_feed_query):
        with pytest.raises(BadQuery) as info:
            parse(pairs)
        assert info.value.detail == (
            f"{MAX_FILTER_VALUES + 1} filter values given: at most {MAX_FILTER_VALUES} are allowed in one query"
        )


def test_repeats_of_one_value_count_towards_the_cap(account):
    with pytest.raises(BadQuery, match="filter values given"):
        account.parse_list_query([("score", "1")] * (MAX_FILTER_VALUES + 1))
    assert account.parse_list_query([("score", "1")] * 3).filters == {"score": frozenset({1.0})}


def test_filter_sets_of_nothing_is_the_shared_empty_mapping():
    assert filter_sets({}) == {}
    assert filter_sets({"a": [1, 1, 2]}) == {"a": frozenset({1, 2})}
