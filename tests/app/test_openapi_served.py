"""The served `/openapi.json` describes the server that serves it (issue 32 item 12).

Through real servers: with the guard off no operation asks for a token; with it on the CRUD
routes require the bearer scheme and the operational routes still do not; the WebSocket
routes are not HTTP operations a request/response client would follow (it would get 426, or
a 101 and a socket it cannot read), so they are listed under `x-websocket-routes` and in
`/asyncapi.json`; an `int` field accepts an integral JSON number such as `31.0`, as the
document's `"type": "integer"` (JSON Schema 2020-12) admits it. The schemathesis runs of the
whole document are in test_app_schemathesis.py.
"""

from __future__ import annotations

import time

import jwt
import pytest

from support.accesskit import guard_env
from support.accesskit import keypair as make_keypair

GUARDED_PATHS = ("/api/user", "/api/user/{id}")
OPEN_PATHS = ("/health", "/ready", "/metrics", "/snapshot", "/openapi.json")


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    return make_keypair(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def guarded(serve, keypair, tmp_path):
    data = tmp_path / "guarded"
    (data / "acme").mkdir(parents=True)
    return serve(data_dir=data, env=guard_env(keypair[1]))


def _requirement(doc: dict, path: str, method: str = "get") -> list:
    """The security requirement an operation has: its own, else the document's."""
    operation = doc["paths"][path][method]
    return operation["security"] if "security" in operation else doc.get("security", [])


def test_guard_off_document_asks_no_token(blog):
    doc = blog.get("/openapi.json").json
    for path, item in doc["paths"].items():
        for method in ("get", "post", "put", "patch", "delete"):
            if method in item:
                assert _requirement(doc, path, method) in ([], [{}]), (path, method)
    assert "bearerAuth" in doc["components"]["securitySchemes"]  # described, not required


def test_guard_on_document_requires_the_bearer_token(guarded, keypair):
    doc = guarded.get("/openapi.json").json
    for path in GUARDED_PATHS:
        assert _requirement(doc, path) == [{"bearerAuth": []}], path
    for path in OPEN_PATHS:
        if path in doc["paths"]:
            assert _requirement(doc, path) == [], path
    token = jwt.encode(
        {"exp": int(time.time()) + 300, "tenant": "acme", "iss": "https://id.example.com/", "aud": "blog"},
        keypair[0],
        algorithm="ES256",
    )
    assert guarded.get("/api/user").status == 401
    assert guarded.get("/api/user", headers={"Authorization": f"Bearer {token}"}).status == 200


def test_websocket_routes_are_not_http_operations(blog):
    doc = blog.get("/openapi.json").json
    for path, item in doc["paths"].items():
        for operation in item.values():
            if isinstance(operation, dict) and "responses" in operation:
                assert "101" not in operation["responses"], path
    assert not any(p.startswith(("/subscribe/", "/live-query/", "/replicate")) for p in doc["paths"])
    websocket = doc["x-websocket-routes"]
    assert {"/subscribe/user", "/live-query/blog-post", "/replicate", "/replicate/snapshot"} <= set(websocket)
    assert "101" in websocket["/subscribe/user"]["get"]["responses"]
    assert "/asyncapi.json" in doc["info"]["description"]


def test_int_field_accepts_an_integral_json_number(blog):
    created = blog.post("/api/user", {"email": "int@example.com", "name": "Int", "age": 31.0})
    assert created.status == 201, created
    record = blog.get(f"/api/user/{created.json['id']}").json
    assert record["age"] == 31 and isinstance(record["age"], int)
    assert b'"age":31,' in blog.get(f"/api/user/{created.json['id']}").body
    assert blog.get(f"/api/user/{created.json['id']}.0").json == record  # the path id too


@pytest.mark.parametrize(
    ("age", "message"),
    [
        (31.5, "'age' must be an integer, got the number 31.5"),
        (1e300, "'age' must be a signed 64-bit integer, got 1e+300"),
    ],
)
def test_int_field_refuses_a_fraction_and_an_out_of_range_number(blog, age, message):
    reply = blog.post("/api/user", {"email": f"frac{age}@example.com", "name": "F", "age": age})
    assert reply.status == 422, reply
    assert reply.json["errors"][0]["message"].startswith(message), reply.json
