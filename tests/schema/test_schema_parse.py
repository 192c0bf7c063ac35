"""The parser accepts every form of docs/guide/schema.md and builds the IR it means."""

from __future__ import annotations

import pytest

from dbsvc.schema import parse_schema
from dbsvc.schema.ir import Default, DefaultKind, Field, FieldType, Schema


def one_model(body: str, header: str = "") -> Schema:
    return parse_schema(f"{header}model M {{\n  id int @id\n{body}\n}}\n", "dir/m.dbs")


def field_of(body: str, name: str = "f") -> Field:
    found = one_model(body).models[0].field(name)
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("int", FieldType.INT),
        ("float", FieldType.FLOAT),
        ("str", FieldType.STR),
        ("bool", FieldType.BOOL),
        ("json", FieldType.JSON),
        ("datetime", FieldType.DATETIME),
        ("date", FieldType.DATE),
        ("uuid", FieldType.UUID),
        ("enum(a, b)", FieldType.ENUM),
    ],
)
def test_parse_accepts_every_type(written: str, expected: FieldType) -> None:
    f = field_of(f"  f {written}")
    assert f.type is expected and not f.nullable


@pytest.mark.parametrize("written", ["int?", "int ?", "enum(a)?", "json?"])
def test_parse_reads_the_nullable_marker(written: str) -> None:
    assert field_of(f"  f {written}").nullable


def test_parse_keeps_enum_members_in_order() -> None:
    f = field_of("  f enum(zeta, alpha, mid_one)")
    assert f.enum_members == ("zeta", "alpha", "mid_one")


def test_parse_sets_flag_attributes() -> None:
    f = field_of("  f str @unique @filter @sort")
    assert (f.unique, f.filterable, f.sortable, f.is_id) == (True, True, True, False)


def test_parse_marks_the_id_field() -> None:
    model = one_model("  f str")
    assert model.models[0].id_field.name == "id"


@pytest.mark.parametrize("id_type", ["int", "str", "uuid"])
def test_parse_accepts_each_id_type(id_type: str) -> None:
    schema = parse_schema(f"model M {{\n  key {id_type} @id\n}}\n")
    assert schema.models[0].id_field.type.value == id_type


@pytest.mark.parametrize(
    ("body", "low", "high"),
    [
        ("  f int @min(-5) @max(5)", -5, 5),
        ("  f int @min(+3)", 3, None),
        ("  f float @min(0) @max(2.5)", 0.0, 2.5),
        ("  f float @min(-1.5e2)", -150.0, None),
        ("  f str @min(1) @max(10)", 1, 10),
        ("  f str @min(3) @max(3)", 3, 3),
    ],
)
def test_parse_reads_bounds(body: str, low: float | None, high: float | None) -> None:
    f = field_of(body)
    assert (f.min, f.max) == (low, high)
    if f.type is FieldType.FLOAT and f.min is not None:
        assert isinstance(f.min, float)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("  f int @default(-7)", Default(DefaultKind.VALUE, -7)),
        ("  f float @default(2)", Default(DefaultKind.VALUE, 2.0)),
        ("  f float @default(2.5e-1)", Default(DefaultKind.VALUE, 0.25)),
        ('  f str @default("a \\"q\\" \\\\ \\n \\u00e9")', Default(DefaultKind.VALUE, 'a "q" \\ \n é')),
        ('  f str @default("")', Default(DefaultKind.VALUE, "")),
        ("  f bool @default(true)", Default(DefaultKind.VALUE, True)),
        ("  f bool @default(false)", Default(DefaultKind.VALUE, False)),
        ("  f int? @default(null)", Default(DefaultKind.VALUE, None)),
        ("  f enum(a, b) @default(b)", Default(DefaultKind.VALUE, "b")),
        ('  f enum(a, b) @default("a")', Default(DefaultKind.VALUE, "a")),
        ("  f enum(now, later) @default(now)", Default(DefaultKind.VALUE, "now")),
        ("  f datetime @default(now)", Default(DefaultKind.NOW)),
        ('  f datetime @default("2024-01-31T12:00:00Z")', Default(DefaultKind.VALUE, "2024-01-31T12:00:00Z")),
        ('  f datetime @default("2024-01-01T01:30:00+02:00")', Default(DefaultKind.VALUE, "2023-12-31T23:30:00Z")),
        (
            '  f datetime @default("2024-01-31t12:00:00.250z")',
            Default(DefaultKind.VALUE, "2024-01-31T12:00:00.250000Z"),
        ),
        ('  f date @default("2024-02-29")', Default(DefaultKind.VALUE, "2024-02-29")),
        ("  f uuid @default(uuid)", Default(DefaultKind.UUID)),
        (
            '  f uuid @default("0F8FAD5B-D9CB-469F-A165-70867728950E")',
            Default(DefaultKind.VALUE, "0f8fad5b-d9cb-469f-a165-70867728950e"),
        ),
        ('  f json @default("x")', Default(DefaultKind.VALUE, "x")),
        ("  f json @default(3)", Default(DefaultKind.VALUE, 3)),
        ("  f int @min(0) @max(9) @default(9)", Default(DefaultKind.VALUE, 9)),
    ],
)
def test_parse_normalises_defaults(body: str, expected: Default) -> None:
    f = field_of(body)
    assert f.default == expected
    assert type(f.default.value) is type(expected.value)  # type: ignore[union-attr]


def test_parse_reads_refs_between_models() -> None:
    schema = parse_schema(
        "model Parent {\n  code str @id\n}\n"
        "model Child {\n  id uuid @id @default(uuid)\n  parent str? @ref(Parent) @filter\n  me uuid @ref(Child)\n}\n"
    )
    child = schema.models[1]
    assert child.field("parent").ref == "Parent"  # type: ignore[union-attr]
    assert child.field("me").ref == "Child"  # type: ignore[union-attr]


def test_parse_reads_projections_in_order() -> None:
    model = one_model("  a str\n  b int\n  @projection(short, b, id)\n  @projection(all, id, a, b)").models[0]
    assert [(p.name, p.fields) for p in model.projections] == [("short", ("b", "id")), ("all", ("id", "a", "b"))]
    assert (model.projections[0].line, model.projections[0].col) == (5, 3)


def test_parse_allows_comments_everywhere() -> None:
    schema = parse_schema(
        "# leading comment\n"
        "[runtime] # after a table header\n"
        "# between entries\n"
        "replication = true # after a value\n"
        "model M { # after the brace\n"
        "  # inside a model\n"
        "  id int @id # after a field\n"
        "  name str @max(3) # \"quotes\" and @attrs in a comment are ignored\n"
        "  @projection(p, id) # after a projection\n"
        "} # after the closing brace\n"
        "# trailing comment without newline"
    )
    assert schema.runtime.replication is True
    assert [f.name for f in schema.models[0].fields] == ["id", "name"]


def test_parse_accepts_a_one_line_model_and_crlf_line_ends() -> None:
    assert parse_schema("model M { id int @id }").models[0].id_field.name == "id"
    schema = parse_schema("model M {\r\n  id int @id\r\n  n str\r\n}\r\n")
    assert [f.name for f in schema.models[0].fields] == ["id", "n"]


def test_parse_records_source_positions() -> None:
    schema = parse_schema("\nmodel Shop {\n    id   int @id\n\tname str\n}\n")
    model = schema.models[0]
    assert (model.line, model.col) == (2, 7)
    assert [(f.line, f.col) for f in model.fields] == [(3, 5), (4, 2)]


def test_parse_keeps_the_source_and_path() -> None:
    text = "model M {\n  id int @id\n}\n"
    schema = parse_schema(text, "x/y.dbs")
    assert schema.source == text and schema.path == "x/y.dbs"


def test_parse_defaults_the_tables_when_absent() -> None:
    schema = one_model("")
    assert (schema.runtime.replication, schema.runtime.changefeed_capacity) == (False, 1024)
    assert schema.runtime.replication_retain_mb == 256
    assert schema.auth.issuer is None and schema.auth.pubkey is None


def test_parse_reads_the_runtime_table() -> None:
    schema = one_model("", "[runtime]\nreplication = false\nchangefeed_capacity = 7\n")
    assert (schema.runtime.replication, schema.runtime.changefeed_capacity) == (False, 7)


def test_parse_reads_replication_retain_mb_including_zero() -> None:
    schema = one_model("", "[runtime]\nreplication = true\nreplication_retain_mb = 0\n")
    assert (schema.runtime.replication, schema.runtime.replication_retain_mb) == (True, 0)
    assert one_model("", "[runtime]\nreplication_retain_mb = 4096\n").runtime.replication_retain_mb == 4096


def test_parse_reads_the_auth_table_and_resolves_pubkey_beside_the_schema() -> None:
    header = (
        '[auth]\nissuer = "https://id/"\naudience = "aud"\nalg = "ES256"\n'
        'tenant_claim = "org"\nleeway = 0\npubkey = "keys/idp.pem"\n'
    )
    auth = one_model("", header).auth
    assert (auth.issuer, auth.audience, auth.alg, auth.tenant_claim, auth.leeway) == (
        "https://id/",
        "aud",
        "ES256",
        "org",
        0,
    )
    assert auth.pubkey == "dir/keys/idp.pem"


def test_parse_keeps_an_absolute_pubkey_and_reads_jwks_url() -> None:
    assert one_model("", '[auth]\npubkey = "/etc/k.pem"\n').auth.pubkey == "/etc/k.pem"
    assert one_model("", '[auth]\njwks_url = "https://id/jwks"\n').auth.jwks_url == "https://id/jwks"


def test_parse_accepts_tables_after_models() -> None:
    schema = parse_schema("model M {\n  id int @id\n}\n[runtime]\nchangefeed_capacity = 3\n")
    assert schema.runtime.changefeed_capacity == 3


def test_parse_accepts_a_field_named_like_a_keyword() -> None:
    schema = parse_schema("model M {\n  id int @id\n  model str\n  enum str\n}\n")
    assert [f.name for f in schema.models[0].fields] == ["id", "model", "enum"]
