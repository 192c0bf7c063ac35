"""What access rules add to the OpenAPI and AsyncAPI documents (compiler/openapi_rules.py):
each operation's rule in its description, the 403 / 404 responses rules add, fields set
from the token, who may replicate; and the documents of schemas/notes.dbs stay valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft7Validator
from openapi_spec_validator import validate

from dbsvc.compiler.asyncapi import build_asyncapi
from dbsvc.compiler.openapi import build_openapi
from dbsvc.schema import load_schema, parse_schema
from support.documents import refs, resolve
from support.mutation import shared

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "schemas" / "notes.dbs"


@pytest.fixture(scope=shared("module"))
def openapi() -> dict:
    return build_openapi(load_schema(str(NOTES)))


@pytest.fixture(scope=shared("module"))
def asyncapi() -> dict:
    return build_asyncapi(load_schema(str(NOTES)))


def test_openapi_of_a_schema_with_rules_is_valid(openapi: dict) -> None:
    validate(openapi)


def test_each_operation_quotes_its_rule(openapi: dict) -> None:
    paths = openapi["paths"]
    get = paths["/api/post/{id}"]["get"]["description"]
    assert 'Access rule (get): `@allow(read, record.status == "published" or record.author == token.sub)`' in get
    assert "A record the rule hides answers 404, exactly as a missing record." in get
    delete = paths["/api/post/{id}"]["delete"]["description"]
    assert "`@allow(create delete, record.author == token.sub)` or `@allow(delete, token.role == \"admin\")`" in delete
    listing = paths["/api/note"]["get"]["description"]
    assert "Access rule (list): `@allow(all, record.owner == token.sub)`. The rule is a filter" in listing
    for operation in ("put", "patch"):
        assert (
            "must hold before and after the change), 403 `forbidden`"
            in paths["/api/post/{id}"][operation]["description"]
        )
    assert (
        "`@allow(read, record.org == token.org or record.org in token.orgs)`"
        in (openapi["x-websocket-routes"]["/subscribe/doc"]["get"]["description"])
    )
    assert "refused 403 at the upgrade" in openapi["x-websocket-routes"]["/live-query/doc"]["get"]["description"]


def test_rules_add_their_403_and_404_responses(openapi: dict) -> None:
    item = openapi["paths"]["/api/doc/{id}"]
    assert "the `update` rule of `Doc` refuses it" in item["put"]["responses"]["403"]["description"]
    assert "the `get` rule of `Doc` hides it" in item["get"]["responses"]["404"]["description"]
    assert (
        "the `create` rule of `Doc` refuses it"
        in (openapi["paths"]["/api/doc"]["post"]["responses"]["403"]["description"])
    )
    assert "403" in openapi["x-websocket-routes"]["/subscribe/doc"]["get"]["responses"]


def test_token_default_fields_are_set_from_the_token(openapi: dict) -> None:
    schemas = openapi["components"]["schemas"]
    create = schemas["Post.Create"]
    assert "author" not in create.get("required", [])
    assert "set from the token's claim `sub` on create" in create["properties"]["author"]["description"]
    assert "author" in schemas["Post.Replace"]["required"]  # PUT carries the whole record


def test_replicate_says_who_may(openapi: dict, asyncapi: dict) -> None:
    for path in ("/replicate", "/replicate/snapshot"):
        operation = openapi["x-websocket-routes"][path]["get"]
        assert '(`@allow(replicate, token.role == "replicator")`) may replicate' in operation["description"]
        assert "may replicate" in operation["responses"]["403"]["description"]
    for channel in ("replicate", "replicate-snapshot"):
        assert "may replicate" in asyncapi["channels"][channel]["description"]


def test_without_a_replicate_rule_replication_is_refused_to_every_token() -> None:
    schema = parse_schema("model A {\n  id int @id\n  @allow(read)\n}\n", "a.dbs")
    doc = build_openapi(schema)
    assert (
        "no `@allow(replicate, ...)`: every token gets 403"
        in doc["x-websocket-routes"]["/replicate"]["get"]["description"]
    )
    validate(doc)
    plain = build_openapi(parse_schema("model A {\n  id int @id\n}\n", "a.dbs"))
    assert "access rules" not in plain["x-websocket-routes"]["/replicate"]["get"]["description"]
    assert "Access rule" not in plain["paths"]["/api/a"]["get"].get("description", "")


def test_asyncapi_feeds_quote_the_subscribe_rule_and_stay_resolvable(asyncapi: dict) -> None:
    feed = asyncapi["channels"]["subscribe.note"]["description"]
    assert "Access rule (subscribe): `@allow(all, record.owner == token.sub)`" in feed
    assert "Access rule (subscribe)" in asyncapi["channels"]["live-query.audit"]["description"]
    for pointer in refs(asyncapi):
        resolve(asyncapi, pointer)
    for schema in asyncapi["components"]["schemas"].values():
        Draft7Validator.check_schema(schema)
