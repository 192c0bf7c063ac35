"""The OpenAPI and AsyncAPI documents list the feeds' operators (issue 34 item 5).

`/subscribe` and `/live-query` take the list's `field__op` parameters (compiler/operators.py
`operator_params`), so both documents describe each one on the feed routes, typed as on the
list operation; the list operation keeps every generated parameter with its type.
"""

from __future__ import annotations

from pathlib import Path

from dbsvc.compiler.asyncapi import build_asyncapi
from dbsvc.compiler.openapi import WEBSOCKET_ROUTES, build_openapi
from dbsvc.schema import load_schema

BLOG = load_schema(str(Path(__file__).resolve().parents[2] / "schemas" / "blog.dbs"))
USER_OPERATORS = [
    "name__gt", "name__gte", "name__lt", "name__lte", "name__prefix",
    "age__gt", "age__gte", "age__lt", "age__lte", "age__null",
    "joined__gt", "joined__gte", "joined__lt", "joined__lte",
]  # fmt: skip


def _params(operation: dict) -> dict[str, dict]:
    return {p["name"]: p for p in operation["parameters"] if "name" in p}


def test_the_list_operation_types_every_generated_parameter():
    listed = _params(build_openapi(BLOG)["paths"]["/api/user"]["get"])
    assert [n for n in listed if "__" in n] == USER_OPERATORS
    assert listed["age__gte"]["schema"]["type"] == "integer"
    assert listed["joined__lt"]["schema"] == {"type": "string", "format": "date-time"}
    assert listed["age__null"]["schema"] == {"type": "boolean"}
    operation = build_openapi(BLOG)["paths"]["/api/user"]["get"]["parameters"]
    shared = [p["$ref"].rpartition("/")[2] for p in operation if "$ref" in p]
    assert shared == ["limit", "offset", "cursor", "as_of"]


def test_the_feed_operations_list_the_operators_typed_as_on_the_list():
    doc = build_openapi(BLOG)
    paths = doc[WEBSOCKET_ROUTES]
    listed = _params(doc["paths"]["/api/user"]["get"])
    for path in ("/subscribe/user", "/live-query/user"):
        fed = _params(paths[path]["get"])
        assert [n for n in fed if "__" in n] == USER_OPERATORS, path
        for name in USER_OPERATORS:
            assert fed[name] == listed[name], (path, name)
        assert not {"sort", "limit", "offset", "cursor"} & set(fed), path


def test_the_asyncapi_feed_bindings_list_the_operators_with_their_types():
    doc = build_asyncapi(BLOG)
    listed = _params(build_openapi(BLOG)["paths"]["/api/user"]["get"])
    for channel in ("subscribe.user", "live-query.user"):
        query = doc["channels"][channel]["bindings"]["ws"]["query"]["properties"]
        assert [n for n in query if "__" in n] == USER_OPERATORS, channel
        for name in USER_OPERATORS:
            want = dict(listed[name]["schema"])
            assert {k: v for k, v in query[name].items() if k != "description"} == want, (channel, name)
            assert query[name]["description"] == listed[name]["description"]
