"""CORS: preflights answered by the protocol layer, headers on simple requests, and no CORS
headers at all when no origin is configured."""

from __future__ import annotations

import pytest

ORIGIN = "https://app.example"


def test_preflight_from_allowed_origin_is_204_with_allow_headers(server):
    client = server.client()
    response = client.request(
        "OPTIONS",
        "/api/thing",
        {
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "DELETE",
            "Access-Control-Request-Headers": "Authorization, Content-Type, X-Secret-Sauce",
        },
    )
    assert response.status == 204
    assert response.header("access-control-allow-origin") == ORIGIN
    assert response.header("access-control-allow-methods") == "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
    assert response.header("access-control-allow-headers") == "authorization, content-type"
    assert response.header("access-control-max-age") == "600"
    assert response.header("vary") == "Origin"
    assert response.header("content-length") is None
    assert client.request("GET", "/echo").status == 200  # connection reusable


def test_preflight_allows_the_conditional_request_headers(server):
    """A browser editor sends If-Match with its writes and If-None-Match with its reads
    (issue 35), and a generated client Dbsvc-After with its reads (docs/workers.md): each
    passes a preflight, and the ETag it compares is exposed (above)."""
    response = server.client().request(
        "OPTIONS",
        "/api/thing",
        {
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "if-match, If-None-Match, content-type, Dbsvc-After",
        },
    )
    assert response.status == 204
    assert response.header("access-control-allow-headers") == "if-match, if-none-match, content-type, dbsvc-after"


def test_preflight_from_other_origin_gets_no_allow_headers(server):
    response = server.client().request(
        "OPTIONS", "/echo", {"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert response.status == 204
    assert response.header("access-control-allow-origin") is None
    assert response.header("vary") == "Origin"


def test_simple_request_from_allowed_origin_gets_cors_headers(server):
    response = server.get("/echo", {"Origin": ORIGIN})
    assert response.status == 200
    assert response.header("access-control-allow-origin") == ORIGIN
    assert (
        response.header("access-control-expose-headers")
        == "Location, X-Request-Id, Dbsvc-Watermark, Dbsvc-Offset, Link, ETag"
    )
    assert response.header("vary") == "Origin"


@pytest.mark.parametrize("headers", [{"Origin": "https://evil.example"}, {}])
def test_other_or_missing_origin_gets_only_vary(server, headers):
    response = server.get("/echo", headers)
    assert response.header("access-control-allow-origin") is None
    assert response.header("vary") == "Origin"


def test_options_without_request_method_reaches_the_app(server):
    response = server.client().request("OPTIONS", "/echo", {"Origin": ORIGIN})
    assert response.status == 200
    assert response.json()["method"] == "OPTIONS"


def test_wildcard_origin_answers_star(make_server):
    demo = make_server(["--cors", "*"])
    response = demo.get("/echo", {"Origin": "https://anything.example"})
    assert response.header("access-control-allow-origin") == "*"


def test_no_cors_configured_means_no_cors_headers(make_server):
    demo = make_server()
    response = demo.client().request("OPTIONS", "/echo", {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
    assert response.status == 200  # the app answered it
    assert response.header("access-control-allow-origin") is None
    assert response.header("vary") is None
