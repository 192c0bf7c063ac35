"""A JWKS guard through a real server process (`python dbsvc.py serve`): 503 with
Retry-After while no key was ever fetched, then 200 once the IdP answers, and the 401
challenges (docs/guide/auth.md). PEM-guard HTTP cases live in tests/app/test_guard_http.py."""

from __future__ import annotations

import http.client
import time

import pytest

from support.authkit import jwk_of, mint, serve_jwks_guarded


@pytest.fixture
def jwks_dbsvc(tmp_path, jwks_server):
    server = serve_jwks_guarded(tmp_path / "data", jwks_server.url(), log_level="debug")
    yield server.port, server.log
    server.stop(timeout=15)


def get(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn.request("GET", path, headers=headers)
    reply = conn.getresponse()
    body = reply.read()
    conn.close()
    return reply.status, {k.lower(): v for k, v in reply.getheaders()}, body


def _wait_for_first_fetch(jwks_server) -> None:
    deadline = time.monotonic() + 10
    while not jwks_server.hits.get("/jwks.json") and time.monotonic() < deadline:
        time.sleep(0.02)  # the background first fetch


def test_no_keys_yet_is_503_with_retry_after(jwks_server, jwks_dbsvc, keys):
    port, _ = jwks_dbsvc
    _wait_for_first_fetch(jwks_server)
    time.sleep(0.1)
    status, headers, body = get(port, "/api/user", mint(keys["p256"], "ES256", kid="k1"))
    assert status == 503, body
    assert 1 <= int(headers["retry-after"]) <= 30
    assert get(port, "/health")[0] == 200  # never guarded
    assert jwks_server.hits["/jwks.json"] == 1  # the request did not cause a second fetch


@pytest.fixture
def idp_up(jwks_server, keys):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")])


def test_jwks_guard_answers_over_http(idp_up, jwks_server, jwks_dbsvc, keys):
    port, log = jwks_dbsvc
    token = mint(keys["p256"], "ES256", kid="k1")
    status, _, body = get(port, "/api/user", token)
    assert status == 200, body
    status, headers, _ = get(port, "/api/user")
    assert status == 401 and headers["www-authenticate"] == 'Bearer realm="dbsvc"'
    status, headers, _ = get(port, "/api/user", mint(keys["p256_other"], "ES256", kid="k1"))
    assert status == 401 and headers["www-authenticate"] == 'Bearer realm="dbsvc", error="invalid_token"'
    status, headers, _ = get(port, "/api/user", mint(keys["p256"], "ES256", kid="rotated-away"))
    assert status == 401 and headers["www-authenticate"] == 'Bearer realm="dbsvc", error="invalid_token"'
    status, _, body = get(port, "/api/user", mint(keys["p256"], "ES256", kid="k1", tenant="other"))
    assert status == 403 and b"acme" not in body and b'"data"' not in body
    assert jwks_server.hits["/jwks.json"] <= 2  # first fetch, at most one for the unknown kid

    time.sleep(0.2)
    text = "".join(log)
    assert "jwks" in text
    for part in token.split("."):
        assert part not in text
