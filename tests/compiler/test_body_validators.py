"""Generated body validators: every type, every attribute, every message, all at once."""

from __future__ import annotations

import pytest

from dbsvc.errors import BadRequest, ConstraintViolation
from support.mutation import shared

TYPES = """
model Thing {
  id    int       @id
  n     int       @min(-5) @max(5)
  big   int?
  f     float     @min(0) @max(10)
  s     str       @min(2) @max(4)
  one   str?      @max(1)
  b     bool
  e     enum(red, green)
  dt    datetime
  d     date
  u     uuid
  j     json
  jn    json?
  @projection(short, s, id)
}
"""

DEFAULTS = """
model Conf {
  key     str       @id
  level   int       @default(3)
  ratio   float     @default(1)
  label   str?      @default("x")
  nothing str?      @default(null)
  flag    bool      @default(true)
  color   enum(red, green) @default(green)
  at      datetime  @default("2024-01-01T01:00:00+01:00")
  stamp   datetime  @default(now)
  token   uuid      @default(uuid)
  note    str?
}

model Tag {
  id    uuid  @id @default(uuid)
  name  str
}

model Code {
  id    uuid  @id
  name  str
}
"""

VALID = {
    "n": 1,
    "f": 2.5,
    "s": "ab",
    "b": True,
    "e": "red",
    "dt": "2024-05-01T12:00:00Z",
    "d": "2024-02-29",
    "u": "123e4567-e89b-12d3-a456-426614174000",
    "j": [1, {"a": None}],
}


@pytest.fixture(scope=shared("module"))
def thing(compile_text):
    return compile_text(TYPES).BY_NAME["Thing"]


@pytest.fixture(scope=shared("module"))
def conf(compile_text):
    return compile_text(DEFAULTS)


def body(**changes):
    out = dict(VALID)
    for key, value in changes.items():
        if value is ...:
            del out[key]
        else:
            out[key] = value
    return out


def test_valid_body_becomes_record_in_declaration_order(thing):
    record = thing.validate_create(dict(reversed(list(VALID.items()))))
    assert list(record) == ["id", "n", "big", "f", "s", "one", "b", "e", "dt", "d", "u", "j", "jn"]
    assert record == {**VALID, "id": None, "big": None, "one": None, "jn": None}


@pytest.mark.parametrize("value", [[], "x", 1, None, True])
def test_body_that_is_not_an_object_is_bad_request(thing, value):
    with pytest.raises(BadRequest) as info:
        thing.validate_create(value)
    assert info.value.detail.startswith("request body must be a JSON object, got ")


def test_replace_and_patch_refuse_non_objects_too(thing):
    with pytest.raises(BadRequest):
        thing.validate_replace([], 1)
    with pytest.raises(BadRequest):
        thing.validate_patch("x", thing.validate_create(body(id=1)))


CASES = [
    # (field, value, message)
    ("n", "1", "'n' must be an integer, got the string \"1\""),
    ("n", True, "'n' must be an integer, got the boolean true (a JSON boolean is not a number)"),
    ("n", 1.5, "'n' must be an integer, got the number 1.5"),
    ("big", 2.0**63, "'big' must be a signed 64-bit integer, got 9.223372036854776e+18"),
    ("n", -6, "'n' must be at least -5, got -6"),
    ("n", 6, "'n' must be at most 5, got 6"),
    ("n", None, "'n' must not be null; expected an integer"),
    ("big", 2**63, "'big' must be a signed 64-bit integer, got 9223372036854775808"),
    ("big", -(2**63) - 1, "'big' must be a signed 64-bit integer, got -9223372036854775809"),
    ("f", False, "'f' must be a number, got the boolean false (a JSON boolean is not a number)"),
    ("f", "2", "'f' must be a number, got the string \"2\""),
    ("f", float("nan"), "'f' must be a finite number, got NaN"),
    ("f", float("inf"), "'f' must be a finite number, got Infinity"),
    ("f", 10**400, "'f' must be a finite number, got " + str(10**400)[:59] + "…"),
    ("f", -0.5, "'f' must be at least 0, got -0.5"),
    ("f", 11, "'f' must be at most 10, got 11"),
    ("s", "a", "'s' must be at least 2 characters long, got 1 characters: \"a\""),
    ("s", "abcde", "'s' must be at most 4 characters long, got 5 characters: \"abcde\""),
    ("s", 12, "'s' must be a string, got the number 12"),
    ("one", "ab", "'one' must be at most 1 character long, got 2 characters: \"ab\""),
    ("b", 1, "'b' must be a boolean, got the number 1"),
    ("b", "true", "'b' must be a boolean, got the string \"true\""),
    ("e", "blue", "'e' must be one of red, green, got the string \"blue\""),
    ("e", ["red"], "'e' must be one of red, green, got an array [\"red\"]"),
    (
        "dt",
        "2024-05-01",
        "'dt' must be an RFC 3339 date-time such as \"2024-05-01T12:00:00Z\", got the string \"2024-05-01\"",
    ),
    ("dt", 0, "'dt' must be an RFC 3339 date-time such as \"2024-05-01T12:00:00Z\", got the number 0"),
    ("d", "2023-02-29", "'d' must be a date such as \"2024-05-01\" (YYYY-MM-DD), got the string \"2023-02-29\""),
    ("d", "2024-1-01", "'d' must be a date such as \"2024-05-01\" (YYYY-MM-DD), got the string \"2024-1-01\""),
    (
        "u",
        "123e4567e89b12d3a456426614174000",
        "'u' must be a UUID such as \"123e4567-e89b-12d3-a456-426614174000\", got the string \"123e4567e89b12d3a456426614174000\"",
    ),
    ("u", {"a": 1}, "'u' must be a UUID such as \"123e4567-e89b-12d3-a456-426614174000\", got an object {\"a\": 1}"),
    ("j", None, "'j' must not be null; expected a JSON value"),
]


@pytest.mark.parametrize(("field", "value", "message"), CASES, ids=[f"{c[0]}={c[1]!r}"[:40] for c in CASES])
def test_each_violation_names_field_value_and_expectation(thing, violations, field, value, message):
    assert violations(thing.validate_create, body(**{field: value})) == [{"field": field, "message": message}]


def test_unknown_field_is_a_violation(thing, violations):
    assert violations(thing.validate_create, body(colour="red")) == [
        {
            "field": "colour",
            "message": "unknown field 'colour'; Thing fields are id, n, big, f, s, one, b, e, dt, d, u, j, jn",
        }
    ]


@pytest.mark.parametrize("field", ["n", "f", "s", "b", "e", "dt", "d", "u", "j"])
def test_missing_required_field_is_a_violation(thing, violations, field):
    errors = violations(thing.validate_create, body(**{field: ...}))
    assert len(errors) == 1 and errors[0]["field"] == field
    assert errors[0]["message"].startswith(f"missing required field {field!r} (")


def test_every_violation_is_reported_at_once(thing, violations):
    bad = {"zzz": 1, "n": True, "f": "x", "s": "", "b": None, "e": "blue", "dt": "now", "d": "x", "u": 3}
    errors = violations(thing.validate_create, bad)
    assert [e["field"] for e in errors] == ["zzz", "n", "f", "s", "b", "e", "dt", "d", "u", "j"]
    assert str(ConstraintViolation(errors)).endswith("(and 9 more errors)")


def test_int_accepted_for_float_and_stored_as_float(thing):
    record = thing.validate_create(body(f=3))
    assert record["f"] == 3.0 and type(record["f"]) is float


def test_integral_number_accepted_for_int_and_stored_as_int(thing):
    record = thing.validate_create(body(n=-5.0, big=-(2.0**63)))
    assert record["n"] == -5 and type(record["n"]) is int
    assert record["big"] == -(2**63) and type(record["big"]) is int


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"),
        ("2024-05-01T14:30:00+02:30", "2024-05-01T12:00:00Z"),
        ("2024-05-01t07:00:00.5-05:00", "2024-05-01T12:00:00.500000Z"),
        ("2024-05-01 12:00:00.000z", "2024-05-01T12:00:00Z"),
        ("2024-05-01T12:00:00.1234567+00:00", "2024-05-01T12:00:00.123456Z"),
        ("2024-12-31T23:30:00-01:00", "2025-01-01T00:30:00Z"),
        ("2024-05-01T12:00:00-00:00", "2024-05-01T12:00:00Z"),
    ],
)
def test_datetime_is_stored_in_canonical_utc(thing, given, stored):
    assert thing.validate_create(body(dt=given))["dt"] == stored


@pytest.mark.parametrize(
    "given",
    [
        "2024-05-01T12:00:00",
        "2024-05-01T12:00Z",
        "2024-05-01T12:00:00+0100",
        "2024-05-01T12:00:00+1:00",
        "2024-W18-3T12:00:00Z",
        "20240501T120000Z",
        "2024-05-01T24:00:00Z",
        "2024-05-01T12:00:60Z",
        "2024-02-30T12:00:00Z",
        "2024-05-01T12:00:00+24:00",
        "2024-05-01T12:00:00.Z",
        " 2024-05-01T12:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "２０２４-05-01T12:00:00Z",
    ],
)
def test_datetime_outside_rfc3339_is_refused(thing, violations, given):
    assert [e["field"] for e in violations(thing.validate_create, body(dt=given))] == ["dt"]


def test_uuid_accepted_in_any_case_stored_lower(thing):
    record = thing.validate_create(body(u="123E4567-E89B-12D3-A456-426614174ABC"))
    assert record["u"] == "123e4567-e89b-12d3-a456-426614174abc"


@pytest.mark.parametrize(
    "given",
    [
        "{123e4567-e89b-12d3-a456-426614174000}",
        "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
        "123e4567-e89b-12d3-a456-42661417400g",
        "123e4567-e89b-12d3-a456-4266141740000",
    ],
)
def test_uuid_in_other_shapes_is_refused(thing, violations, given):
    assert [e["field"] for e in violations(thing.validate_create, body(u=given))] == ["u"]


def test_json_takes_any_value_and_nullable_json_takes_null(thing):
    for value in [0, "x", [], {}, {"deep": [1, 2.5, None, True]}, False]:
        assert thing.validate_create(body(j=value, jn=None))["j"] == value


def test_defaults_fill_omitted_fields(conf):
    record = conf.BY_NAME["Conf"].validate_create({"key": "k"})
    stamp, token = record.pop("stamp"), record.pop("token")
    assert record == {
        "key": "k",
        "level": 3,
        "ratio": 1.0,
        "label": "x",
        "nothing": None,
        "flag": True,
        "color": "green",
        "at": "2024-01-01T00:00:00Z",
        "note": None,
    }
    assert type(record["ratio"]) is float
    assert stamp.endswith("Z") and len(stamp) in (20, 27)
    assert len(token) == 36 and token == token.lower()


def test_explicit_null_is_refused_even_with_a_default(conf, violations):
    errors = violations(conf.BY_NAME["Conf"].validate_create, {"key": "k", "level": None, "stamp": None})
    assert errors == [
        {"field": "level", "message": "'level' must not be null; expected an integer"},
        {
            "field": "stamp",
            "message": "'stamp' must not be null; expected an RFC 3339 date-time such as \"2024-05-01T12:00:00Z\"",
        },
    ]


def test_explicit_null_on_nullable_with_default_is_kept(conf):
    assert conf.BY_NAME["Conf"].validate_create({"key": "k", "label": None})["label"] is None


def test_each_create_gets_a_fresh_default_uuid(conf):
    tag = conf.BY_NAME["Tag"]
    assert tag.validate_create({"name": "a"})["id"] != tag.validate_create({"name": "a"})["id"]


def test_uuid_id_without_default_is_required(conf, violations):
    assert violations(conf.BY_NAME["Code"].validate_create, {"name": "a"}) == [
        {
            "field": "id",
            "message": "missing required field 'id' (a UUID such as \"123e4567-e89b-12d3-a456-426614174000\")",
        }
    ]


def test_int_id_omitted_is_none_and_given_is_used(thing):
    assert thing.validate_create(body())["id"] is None
    assert thing.validate_create(body(id=42))["id"] == 42


def test_str_id_is_required(conf, violations):
    assert violations(conf.BY_NAME["Conf"].validate_create, {}) == [
        {"field": "key", "message": "missing required field 'key' (a string)"}
    ]


# --- PUT ----------------------------------------------------------------------------------


def test_replace_uses_path_id_and_resets_omitted_fields(conf):
    model = conf.BY_NAME["Conf"]
    record = model.validate_replace({"level": 9}, "k")
    assert record["key"] == "k" and record["level"] == 9
    assert record["label"] == "x" and record["note"] is None and record["ratio"] == 1.0


def test_replace_with_matching_body_id_is_fine(thing):
    assert thing.validate_replace(body(id=7), 7)["id"] == 7


def test_replace_with_different_body_id_is_a_violation(thing, violations):
    assert violations(thing.validate_replace, body(id=8), 7) == [
        {"field": "id", "message": "'id' 8 differs from the id in the path 7"}
    ]


def test_replace_compares_uuid_ids_case_insensitively(conf):
    tag = conf.BY_NAME["Tag"]
    lower = "123e4567-e89b-12d3-a456-426614174abc"
    assert tag.validate_replace({"id": lower.upper(), "name": "a"}, lower)["id"] == lower


def test_replace_requires_required_fields(thing, violations):
    errors = violations(thing.validate_replace, {"n": 1}, 7)
    assert [e["field"] for e in errors] == ["f", "s", "b", "e", "dt", "d", "u", "j"]


def test_replace_with_invalid_body_id_reports_only_the_type(thing, violations):
    assert violations(thing.validate_replace, body(id="7"), 7) == [
        {"field": "id", "message": "'id' must be an integer, got the string \"7\""}
    ]


# --- PATCH --------------------------------------------------------------------------------


def test_patch_merges_given_fields_and_keeps_order(thing):
    current = thing.validate_create(body(id=3, jn={"a": 1, "b": 2}))
    patched = thing.validate_patch({"jn": {"c": 3}, "s": "xyz"}, current)
    assert list(patched) == list(current)
    assert patched == {**current, "jn": {"c": 3}, "s": "xyz"}
    assert current["s"] == "ab"  # the current record is not touched


def test_patch_validates_only_given_fields(thing, violations):
    current = thing.validate_create(body(id=3))
    assert violations(thing.validate_patch, {"n": 99, "e": None}, current) == [
        {"field": "n", "message": "'n' must be at most 5, got 99"},
        {"field": "e", "message": "'e' must not be null; expected one of red, green"},
    ]


def test_patch_may_not_change_the_id(thing, violations):
    current = thing.validate_create(body(id=3))
    assert thing.validate_patch({"id": 3}, current)["id"] == 3
    assert violations(thing.validate_patch, {"id": 4}, current) == [
        {"field": "id", "message": "'id' 4 differs from the record's id 3"}
    ]


def test_patch_refuses_unknown_fields(thing, violations):
    current = thing.validate_create(body(id=3))
    assert [e["field"] for e in violations(thing.validate_patch, {"x": 1}, current)] == ["x"]


def test_empty_patch_returns_an_equal_new_record(thing):
    current = thing.validate_create(body(id=3))
    patched = thing.validate_patch({}, current)
    assert patched == current and patched is not current
