"""OpenAPI of `expand=` (compiler/openapi*.py): the parameter with its allowed values per model,
and the response schemas with `_expand`, checked by validating the answers the REST tests
pin byte for byte (tests/app/test_expand_rest.py) against the document with `jsonschema`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from dbsvc.compiler.openapi import build_openapi
from dbsvc.schema import load_schema
from support.mutation import shared

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope=shared("module"))
def document() -> dict:
    return build_openapi(load_schema(str(ROOT / "schemas" / "blog.dbs")))


def expand_of(operation: dict) -> dict | None:
    found = [p for p in operation["parameters"] if p.get("name") == "expand"]
    return found[0] if found else None


def validator(document: dict, name: str) -> Draft202012Validator:
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource("urn:openapi", resource)
    return Draft202012Validator({"$ref": f"urn:openapi#/components/schemas/{name}"}, registry=registry)


def test_expand_is_a_parameter_of_get_and_list_with_the_models_values(document):
    paths = document["paths"]
    for path in ("/api/comment", "/api/comment/{id}"):
        expand = expand_of(paths[path]["get"])
        assert expand is not None, path
        assert expand["style"] == "form" and expand["explode"] is False
        assert expand["schema"]["items"]["enum"] == ["post_id", "post_id:summary", "author_id", "author_id:card"]
    assert expand_of(paths["/api/blog-post"]["get"])["schema"]["items"]["enum"] == ["author_id", "author_id:card"]
    assert expand_of(paths["/api/user"]["get"]) is None  # no @ref fields
    assert expand_of(paths["/api/user/{id}"]["get"]) is None


def test_expanded_answers_validate_and_a_nested_expand_does_not(document):
    page = validator(document, "BlogPost.Page")
    record = {"id": 1, "author_id": 1, "title": "One", "body": "b", "published": False, "score": 1.0, "tags": None}
    ann = {"id": 1, "name": "Ann"}
    page.validate({"data": [{**record, "_expand": {"author_id": ann}}], "total": 1, "limit": 100, "offset": 0})
    page.validate({"data": [{"id": 1, "title": "T", "score": 1.0, "_expand": {}}], "total": 1, "limit": 1, "offset": 0})
    with pytest.raises(ValidationError):  # at most one level
        page.validate(
            {
                "data": [{**record, "_expand": {"author_id": {**ann, "_expand": {}}}}],
                "total": 1,
                "limit": 1,
                "offset": 0,
            }
        )
    with pytest.raises(ValidationError):  # only @ref fields
        page.validate({"data": [{**record, "_expand": {"title": ann}}], "total": 1, "limit": 1, "offset": 0})
    schema = document["paths"]["/api/blog-post/{id}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert {"$ref": "#/components/schemas/BlogPost.Expanded"} in schema["schema"]["anyOf"]


def test_feeds_and_the_asyncapi_messages_have_no_expand(document):
    text = json.dumps(document["x-websocket-routes"])
    assert "Expanded" not in text and '"expand"' not in text
