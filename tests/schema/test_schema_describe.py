"""`describe_schema` output and `schema_changes` decisions (docs/guide/schema.md#changing-a-schema)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dbsvc.schema import describe_schema, parse_schema, schema_changes

BASE = """
model User {
  id     int   @id
  email  str   @unique @filter @max(254)
  age    int?  @sort @min(0)
  role   enum(admin, reader) @default(reader)
  @projection(card, id, email)
}
model Post {
  id        int  @id
  author_id int  @ref(User)
}
"""


def describe(text: str) -> dict[str, Any]:
    return describe_schema(parse_schema(text))


def changes(new_text: str) -> tuple[list[str], list[str]]:
    return schema_changes(describe(BASE), describe(new_text))


def test_describe_schema_has_the_documented_shape() -> None:
    description = describe(BASE)
    assert description["version"] == 1
    user = description["models"][0]
    assert user["name"] == "User"
    assert user["projections"] == {"card": ["id", "email"]}
    assert user["fields"][0] == {
        "name": "id",
        "type": "int",
        "nullable": False,
        "id": True,
        "unique": False,
        "enum": [],
        "default": None,
        "ref": None,
        "filter": False,
        "sort": False,
        "min": None,
        "max": None,
    }
    assert user["fields"][3]["enum"] == ["admin", "reader"]
    assert user["fields"][3]["default"] == {"kind": "value", "value": "reader"}
    assert description["models"][1]["fields"][1]["ref"] == "User"


def test_describe_schema_is_json_and_deterministic() -> None:
    text = json.dumps(describe(BASE))
    assert text == json.dumps(describe(BASE))
    assert json.loads(text) == describe(BASE)


def test_describe_schema_describes_now_and_uuid_defaults() -> None:
    d = describe("model M {\n  id uuid @id @default(uuid)\n  at datetime @default(now)\n}\n")
    fields = d["models"][0]["fields"]
    assert fields[0]["default"] == {"kind": "uuid", "value": None}
    assert fields[1]["default"] == {"kind": "now", "value": None}


def test_schema_changes_is_empty_for_the_same_schema() -> None:
    assert changes(BASE) == ([], [])


def edit(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


COMPATIBLE = [
    ("added model", BASE + "model Tag {\n  id str @id\n}\n", "model 'Tag' was added"),
    (
        "added nullable field",
        edit("  @projection", "  bio str?\n  @projection"),
        "field 'bio' was added to model 'User' (nullable)",
    ),
    (
        "added defaulted field",
        edit("  @projection", "  score int @default(0)\n  @projection"),
        "field 'score' was added to model 'User' (default 0)",
    ),
    (
        "filter flag",
        edit("@unique @filter @max(254)", "@unique @max(254)"),
        "field 'email' of model 'User': filter changed from True to False",
    ),
    (
        "sort flag",
        edit("int?  @sort", "int?  @filter @sort"),
        "field 'age' of model 'User': filter changed from False to True",
    ),
    ("min", edit("@min(0)", "@min(1)"), "field 'age' of model 'User': min changed from 0 to 1"),
    ("max", edit("@max(254)", "@max(100)"), "field 'email' of model 'User': max changed from 254 to 100"),
    ("unique dropped", edit("@unique @filter", "@filter"), "field 'email' of model 'User': @unique was dropped"),
    (
        "projections",
        edit("@projection(card, id, email)", "@projection(card, id)"),
        "projections of model 'User' changed from {'card': ['id', 'email']} to {'card': ['id']}",
    ),
    (
        "enum member added",
        edit("enum(admin, reader)", "enum(admin, reader, guest)"),
        "field 'role' of model 'User': enum members ['guest'] were added "
        "(old ['admin', 'reader'], new ['admin', 'reader', 'guest'])",
    ),
    (
        "made nullable",
        edit("int  @ref(User)", "int? @ref(User)"),
        "field 'author_id' of model 'Post': changed from non-nullable to nullable",
    ),
    (
        "default changed",
        edit("@default(reader)", "@default(admin)"),
        "field 'role' of model 'User': default changed from 'reader' to 'admin'",
    ),
    ("ref dropped", edit("int  @ref(User)", "int"), "field 'author_id' of model 'Post': @ref(User) was dropped"),
]


@pytest.mark.parametrize(("new_text", "expected"), [c[1:] for c in COMPATIBLE], ids=[c[0] for c in COMPATIBLE])
def test_schema_changes_lists_compatible_changes(new_text: str, expected: str) -> None:
    compatible, incompatible = changes(new_text)
    assert incompatible == []
    assert compatible == [expected]


INCOMPATIBLE = [
    (
        "removed model",
        BASE.replace("model Post {\n  id        int  @id\n  author_id int  @ref(User)\n}\n", ""),
        "model 'Post' was removed; its records would be lost",
    ),
    (
        "removed field",
        edit("  age    int?  @sort @min(0)\n", ""),
        "field 'age' of model 'User' was removed; its values would be lost",
    ),
    (
        "changed type",
        edit("age    int?", "age    float?"),
        "field 'age' of model 'User': type changed from 'int' to 'float'",
    ),
    (
        "enum member removed",
        edit("enum(admin, reader) @default(reader)", "enum(reader) @default(reader)"),
        "field 'role' of model 'User': enum members ['admin'] were removed (old ['admin', 'reader'], new ['reader']); "
        "existing records may hold them",
    ),
    (
        "made non-nullable",
        edit("age    int?", "age    int "),
        "field 'age' of model 'User': changed from nullable to non-nullable; existing records may hold null",
    ),
    (
        "new required field",
        edit("  @projection", "  nick str\n  @projection"),
        "field 'nick' was added to model 'User' as required (not nullable, no default); "
        "existing records have no value for it",
    ),
    (
        "changed ref target",
        edit("int  @ref(User)", "int  @ref(Post)"),
        "field 'author_id' of model 'Post': @ref changed from 'User' to 'Post'; "
        "existing values were never checked against the new target",
    ),
    (
        "unique added",
        edit("int?  @sort @min(0)", "int?  @unique @sort @min(0)"),
        "adding @unique to existing field 'age' of model 'User' is not supported "
        "(storage cannot yet verify that existing records are unique)",
    ),
]


@pytest.mark.parametrize(("new_text", "expected"), [c[1:] for c in INCOMPATIBLE], ids=[c[0] for c in INCOMPATIBLE])
def test_schema_changes_lists_incompatible_reasons(new_text: str, expected: str) -> None:
    _, incompatible = changes(new_text)
    assert incompatible == [expected]


def test_schema_changes_refuses_a_changed_id_field() -> None:
    old = describe("model M {\n  id int @id\n  code str\n}\n")
    new = describe("model M {\n  id int\n  code str @id\n}\n")
    _, incompatible = schema_changes(old, new)
    assert incompatible == ["model 'M': the @id field changed from 'id' to 'code'"]


def test_schema_changes_notes_reordered_fields_as_compatible() -> None:
    old = describe("model M {\n  id int @id\n  a str?\n  b str?\n}\n")
    new = describe("model M {\n  id int @id\n  b str?\n  a str?\n}\n")
    assert schema_changes(old, new) == (
        ["fields of model 'M' were reordered from ['id', 'a', 'b'] to ['id', 'b', 'a']"],
        [],
    )


def test_schema_changes_refuses_an_unknown_description_version() -> None:
    old = describe(BASE)
    new = dict(old, version=2)
    assert schema_changes(old, new) == ([], ["description version changed from 1 to 2"])


def test_schema_changes_works_on_json_round_tripped_descriptions() -> None:
    stored = json.loads(json.dumps(describe(BASE)))
    assert schema_changes(stored, describe(BASE)) == ([], [])
