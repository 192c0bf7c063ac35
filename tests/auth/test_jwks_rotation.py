"""A key the IdP rotates in is accepted within 10 s of the last fetch, while tokens with
random `kid`s still cost the IdP at most one fetch per interval (issue 14, item 11).

The guard runs with its default tunables against a real loopback JWKS server; only its
monotonic clock is a test clock, so "10 s later" needs no sleep. One slow test shows the
same through a real server process and wall-clock time.
"""

from __future__ import annotations

import asyncio
import http.client
import secrets
import time

import pytest

from dbsvc.auth import Guard, KeyRefreshNeeded, load_auth_config
from dbsvc.errors import TokenError
from dbsvc.schema.ir import AuthSettings
from support.authkit import AUDIENCE, ISSUER, TENANT, jwk_of, mint, serve_jwks_guarded

PROMISED = 10.0  # a rotated-in key is accepted at most this long after the last fetch


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def guard_at(tmp_path, jwks_server):
    """A JWKS guard built from the environment alone (every tunable at its default)."""
    clock = Clock()
    environ = {
        "SERVICE_JWKS_URL": jwks_server.url(),
        "SERVICE_JWT_ALG": "ES256",
        "SERVICE_TENANT": TENANT,
        "SERVICE_JWT_ISSUER": ISSUER,
        "SERVICE_JWT_AUDIENCE": AUDIENCE,
    }
    config = load_auth_config(environ, AuthSettings(), str(tmp_path))
    assert config is not None
    guard = Guard(config, monotonic=clock)
    yield guard, clock
    guard.close()


async def authenticate(guard: Guard, token: str) -> dict:
    """What the app does: verify, and after KeyRefreshNeeded refresh once and verify again."""
    try:
        return guard.verify(f"Bearer {token}")
    except KeyRefreshNeeded:
        await guard.refresh_keys()
        return guard.verify(f"Bearer {token}")


def fetches(jwks_server) -> int:
    return jwks_server.hits.get("/jwks.json", 0)


def test_rotated_in_key_is_accepted_at_the_promised_interval(guard_at, jwks_server, keys):
    guard, clock = guard_at
    old, new = keys["p256"], keys["p256_other"]
    jwks_server.serve_keys([jwk_of(old, "ES256", "old")])
    assert asyncio.run(authenticate(guard, mint(old, "ES256", kid="old")))["tenant"] == TENANT
    assert fetches(jwks_server) == 1
    # The IdP rotates a new key in; tokens signed with it start arriving at once.
    jwks_server.serve_keys([jwk_of(old, "ES256", "old"), jwk_of(new, "ES256", "new")])
    new_token = mint(new, "ES256", kid="new")
    clock.now += PROMISED - 0.5
    with pytest.raises(TokenError, match="'kid' names no known key"):
        asyncio.run(authenticate(guard, new_token))
    assert fetches(jwks_server) == 1  # inside the interval: no fetch
    clock.now += 0.5
    assert asyncio.run(authenticate(guard, new_token))["tenant"] == TENANT
    assert fetches(jwks_server) == 2
    # The old key is still published, so its tokens keep working without another fetch.
    assert asyncio.run(authenticate(guard, mint(old, "ES256", kid="old")))
    assert fetches(jwks_server) == 2


def test_random_kids_fetch_at_most_once_per_interval(guard_at, jwks_server, keys):
    guard, clock = guard_at
    key = keys["p256"]
    jwks_server.serve_keys([jwk_of(key, "ES256", "k1")])
    assert asyncio.run(authenticate(guard, mint(key, "ES256", kid="k1")))
    start = clock.now
    refused = 0
    # A flood of tokens with made-up kids, 0.25 s apart over three intervals.
    for step in range(int(3 * PROMISED / 0.25)):
        clock.now = start + step * 0.25
        with pytest.raises(TokenError, match="kid"):
            asyncio.run(authenticate(guard, mint(key, "ES256", kid=secrets.token_hex(8))))
        refused += 1
    assert refused == 120
    assert fetches(jwks_server) == 1 + 2  # first fetch, then one at 10 s and one at 20 s
    # The genuine key kept working all along.
    assert asyncio.run(authenticate(guard, mint(key, "ES256", kid="k1")))


def test_concurrent_random_kids_share_one_fetch(guard_at, jwks_server, keys):
    guard, clock = guard_at
    key = keys["p256"]
    jwks_server.serve_keys([jwk_of(key, "ES256", "k1")])
    assert asyncio.run(authenticate(guard, mint(key, "ES256", kid="k1")))
    clock.now += PROMISED

    async def storm() -> list:
        tokens = [mint(key, "ES256", kid=secrets.token_hex(8)) for _ in range(50)]
        return await asyncio.gather(*(authenticate(guard, t) for t in tokens), return_exceptions=True)

    results = asyncio.run(storm())
    assert all(isinstance(r, TokenError) for r in results), results
    assert fetches(jwks_server) == 2  # single flight: fifty tokens, one fetch


# ---------------------------------------------------------------------------------------
# The same through a real server process (wall-clock time, so marked slow).
# ---------------------------------------------------------------------------------------


@pytest.fixture
def jwks_service(tmp_path, jwks_server):
    server = serve_jwks_guarded(tmp_path / "data", jwks_server.url())
    yield server.port
    server.stop(timeout=15)


def status_of(port: int, token: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/api/user", headers={"Authorization": f"Bearer {token}"})
        reply = conn.getresponse()
        reply.read()
        return reply.status
    finally:
        conn.close()


@pytest.mark.slow
def test_server_accepts_a_rotated_in_key_while_random_kids_stay_cheap(jwks_server, keys, jwks_service):
    old, new = keys["p256"], keys["p256_other"]
    jwks_server.serve_keys([jwk_of(old, "ES256", "old")])
    port = jwks_service
    deadline = time.monotonic() + 60
    while status_of(port, mint(old, "ES256", kid="old")) != 200:
        assert time.monotonic() < deadline, "the first key was never accepted"
        time.sleep(0.1)
    jwks_server.serve_keys([jwk_of(old, "ES256", "old"), jwk_of(new, "ES256", "new")])
    rotated = time.monotonic()
    new_token = mint(new, "ES256", kid="new")
    while True:
        assert status_of(port, mint(old, "ES256", kid=secrets.token_hex(8))) == 401
        if status_of(port, new_token) == 200:
            break
        assert time.monotonic() < deadline, "the rotated-in key was never accepted"
        time.sleep(0.05)
    elapsed = time.monotonic() - rotated
    # One fetch at start, then at most one per interval whatever the random kids asked for.
    assert fetches(jwks_server) <= 2 + int(elapsed // PROMISED) + 1
