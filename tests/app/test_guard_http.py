"""The token guard through a real server: which routes it covers, and the 401/403/503 answers
(docs/guide/auth.md). Tokens are minted by PyJWT, an independent library."""

from __future__ import annotations

import time

import jwt
import pytest

from support.accesskit import guard_env
from support.accesskit import keypair as make_keypair
from support.server import ROOT, server_pool


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    return make_keypair(tmp_path_factory.mktemp("keys"))


def token(private, **claims) -> str:
    body = {"exp": int(time.time()) + 300, "tenant": "acme", "iss": "https://id.example.com/", "aud": "blog"}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, private, algorithm="ES256")


@pytest.fixture
def guarded(serve, keypair, tmp_path):
    """A guarded server of this test's own: for the tests that write, or stop it to read its log."""
    _private, path = keypair
    data = tmp_path / "data"
    (data / "acme").mkdir(parents=True)
    return serve(data_dir=data, env=guard_env(path))


@pytest.fixture(scope="module")
def refusing(keypair, tmp_path_factory):
    """One guarded server for the module's tests of refused and token-free requests: a
    refused request writes nothing and an operational route writes nothing, so each of them
    sees the same empty tenant, whatever ran before it."""
    _private, path = keypair
    data = tmp_path_factory.mktemp("refusing") / "data"
    (data / "acme").mkdir(parents=True)
    with server_pool(data) as pool:
        yield pool(data_dir=data, env=guard_env(path))


def test_valid_token_reaches_crud(guarded, keypair):
    auth = {"Authorization": f"Bearer {token(keypair[0])}"}
    assert guarded.post("/api/user", {"email": "g@x.io", "name": "G"}, headers=auth).status == 201
    assert guarded.get("/api/user", headers=auth).json["total"] == 1


def test_missing_token_is_401_with_bare_challenge(refusing):
    reply = refusing.get("/api/user")
    assert reply.status == 401
    assert reply.json["code"] == "unauthorized"
    assert reply.headers["www-authenticate"] == 'Bearer realm="dbsvc"'


@pytest.mark.parametrize("bad", ["garbage", "a.b.c", "Bearer", "Basic dXNlcjpwYXNz"])
def test_malformed_token_is_401_invalid_token(refusing, bad):
    value = bad if bad.startswith(("Bearer", "Basic")) else f"Bearer {bad}"
    reply = refusing.get("/api/user", headers={"Authorization": value})
    assert reply.status == 401, reply
    assert reply.json["code"] == "unauthorized"


def test_expired_token_is_401_invalid_token(refusing, keypair):
    reply = refusing.get(
        "/api/user", headers={"Authorization": f"Bearer {token(keypair[0], exp=int(time.time()) - 3600)}"}
    )
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]


def test_wrong_tenant_is_403_without_data(refusing, keypair):
    auth = {"Authorization": f"Bearer {token(keypair[0], tenant='other')}"}
    reply = refusing.get("/api/user", headers=auth)
    assert reply.status == 403
    assert reply.json["code"] == "forbidden"
    assert "data" not in reply.json and "acme" not in reply.body.decode()


def test_operational_routes_need_no_token(refusing):
    for path in ("/health", "/ready", "/metrics", "/snapshot"):
        assert refusing.get(path).status == 200, path
    assert refusing.get("/metrics").json["total_rows"] == 0  # no refused request of the module wrote


def test_guard_on_without_tenant_refuses_to_start(keypair, tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update({"SERVICE_JWT_PUBKEY": str(keypair[1]), "SERVICE_JWT_ALG": "ES256", "SERVICE_DATA": str(tmp_path)})
    result = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(ROOT / "schemas" / "blog.dbs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "SERVICE_TENANT" in result.stderr


def test_token_never_reaches_the_log(guarded, keypair):
    secret = token(keypair[0])
    guarded.get("/api/user", headers={"Authorization": f"Bearer {secret}"})
    guarded.get("/api/user", headers={"Authorization": f"Bearer {secret}x"})
    guarded.stop()
    assert secret not in "".join(guarded.log)
