"""What the guard answers a refused request, in-process: the 401/403 problem and its
`WWW-Authenticate` (docs/guide/auth.md), the WebSocket subprotocol path, and the
`Retry-After` of a JWKS guard that has no keys yet. Found by mutation testing
(docs/mutation.md): the server tests check these through a child process, where mutation
testing cannot see them."""

from __future__ import annotations

import asyncio
import socket

import pytest

from dbsvc.auth import Guard
from dbsvc.auth.guard import KeyRefreshNeeded, KeysUnavailable, authorize
from dbsvc.errors import Forbidden, Unauthorized
from support.authkit import mint


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_request_without_a_token_gets_401_and_a_challenge_without_an_error_code(make_guard):
    guard = make_guard("ES256", "p256")
    for authorization in (None, "", "Basic dXNlcjpwdw=="):
        with pytest.raises(Unauthorized) as refused:
            authorize(guard, authorization)
        assert refused.value.headers == [("WWW-Authenticate", 'Bearer realm="dbsvc"')]
    assert str(refused.value) == "authorization scheme is not Bearer"


def test_a_bad_token_gets_401_invalid_token_with_what_was_wrong(make_guard, keys):
    guard = make_guard("ES256", "p256")
    expired = mint(keys["p256"], "ES256", exp=1, iat=0)
    with pytest.raises(Unauthorized) as refused:
        authorize(guard, f"Bearer {expired}")
    assert str(refused.value) == "token has expired"
    assert refused.value.headers == [("WWW-Authenticate", 'Bearer realm="dbsvc", error="invalid_token"')]


def test_a_genuine_token_for_another_tenant_gets_403_without_naming_ours(make_guard, keys):
    guard = make_guard("ES256", "p256")
    with pytest.raises(Forbidden) as refused:
        authorize(guard, f"Bearer {mint(keys['p256'], 'ES256', tenant='globex')}")
    assert str(refused.value) == "the token does not grant access to this tenant"


def test_the_subprotocol_token_is_verified_as_a_bare_token(make_guard, keys):
    guard = make_guard("ES256", "p256")
    token = mint(keys["p256"], "ES256", sub="ws-user")
    assert authorize(guard, None, token=token)["sub"] == "ws-user"
    # The bare form takes no scheme: "Bearer <jwt>" as a subprotocol token is refused.
    with pytest.raises(Unauthorized):
        authorize(guard, None, token=f"Bearer {token}")
    assert authorize(guard, f"Bearer {token}")["sub"] == "ws-user"


def test_a_jwks_guard_without_keys_says_when_to_retry(make_guard, keys):
    url = f"http://127.0.0.1:{_closed_port()}/jwks.json"
    config = make_guard("ES256", jwks_url=url, jwks_min_interval=10, jwks_timeout=5).config
    now = [1000.0]
    guard = Guard(config, monotonic=lambda: now[0])
    token = mint(keys["p256"], "ES256")
    with pytest.raises(KeyRefreshNeeded):  # never tried: the app fetches, then asks again
        guard.verify(f"Bearer {token}")
    asyncio.run(guard.refresh_keys())  # refused connection: no keys
    assert guard.fetches == 1 and not guard.has_keys
    for elapsed, retry_after in ((0.0, 10), (3.5, 7), (9.2, 1), (9.99, 1)):
        now[0] = 1000.0 + elapsed
        with pytest.raises(KeysUnavailable) as unavailable:
            guard.verify(f"Bearer {token}")
        assert not isinstance(unavailable.value, KeyRefreshNeeded)
        assert str(unavailable.value) == "token verification keys have not been fetched yet"
        assert unavailable.value.retry_after == retry_after
        assert unavailable.value.headers == [("Retry-After", str(retry_after))]
    now[0] = 1010.0  # the interval is over: fetch again
    with pytest.raises(KeyRefreshNeeded):
        guard.verify(f"Bearer {token}")


def test_a_refresh_that_escapes_the_apps_retry_is_a_503_that_says_so():
    # The app awaits refresh_keys() and asks again; should KeyRefreshNeeded ever reach the
    # error mapping, the client gets a 503 with a reason and Retry-After: 1, not a 500.
    escaped = KeyRefreshNeeded()
    assert isinstance(escaped, KeysUnavailable) and escaped.status == 503
    assert str(escaped) == "verification keys are being refreshed; retry"
    assert escaped.retry_after == 1 and escaped.headers == [("Retry-After", "1")]
