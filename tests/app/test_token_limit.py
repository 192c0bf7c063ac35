"""The 8 KiB token limit (docs/security.md, docs/guide/auth.md): a larger token is refused
401 before any signature work, whatever it holds, through a real guarded server."""

from __future__ import annotations

import time

import jwt
import pytest

from support.accesskit import guard_env, keypair


@pytest.fixture
def guarded(serve, tmp_path):
    private, pem = keypair(tmp_path)
    (tmp_path / "data" / "acme").mkdir(parents=True)
    server = serve(data_dir=tmp_path / "data", env=guard_env(pem))
    return server, private


def _token(private, size: int) -> str:
    claims = {"exp": int(time.time()) + 300, "tenant": "acme", "iss": "https://id.example.com/", "aud": "blog"}
    token = jwt.encode({**claims, "pad": ""}, private, algorithm="ES256")
    pad = (size - len(token)) * 3 // 4  # base64url: 4 characters per 3 bytes
    return jwt.encode({**claims, "pad": "x" * max(0, pad)}, private, algorithm="ES256")


def test_a_9_kib_token_is_401_naming_the_limit(guarded):
    server, private = guarded
    token = _token(private, 9 * 1024)
    assert 9 * 1024 - 8 <= len(token) <= 9 * 1024 + 8
    reply = server.get("/api/user", headers={"Authorization": f"Bearer {token}"})
    assert reply.status == 401
    assert reply.json["code"] == "unauthorized"
    assert reply.json["detail"] == "token is larger than 8192 bytes"
    assert reply.headers["www-authenticate"] == 'Bearer realm="dbsvc", error="invalid_token"'


def test_a_token_just_under_the_limit_is_accepted(guarded):
    server, private = guarded
    token = _token(private, 8000)
    assert server.get("/api/user", headers={"Authorization": f"Bearer {token}"}).status == 200
