"""The JWKS guard against a real loopback `http.server`: first fetch, rotation, max-age,
failures served from the cache (unreachable, slow, 5xx, bad JSON, oversized), the
single-flight refresh under a storm of random kids, redirects, and key checks."""

from __future__ import annotations

import asyncio
import json
import secrets
import time

import pytest

from dbsvc.auth import KeyRefreshNeeded, KeysUnavailable
from dbsvc.auth.jwks import parse_max_age
from dbsvc.errors import TokenError
from support.authkit import Reply, jwk_of, mint

FAST = {"jwks_min_interval": 0.2, "jwks_default_max_age": 60.0}


async def authenticate(guard, token: str) -> dict:
    """What the app does (dbsvc/app.py): verify, and once, refresh then verify again."""
    try:
        return guard.verify(f"Bearer {token}")
    except KeyRefreshNeeded:
        await guard.refresh_keys()
        return guard.verify(f"Bearer {token}")


def run(coro):
    return asyncio.run(coro)


def wait_interval(guard) -> None:
    time.sleep(guard.config.jwks_min_interval + 0.02)


def test_first_request_fetches_then_verifies(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1", use="sig")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), **FAST)
    assert not guard.has_keys  # the constructor does not fetch
    assert jwks_server.hits == {}
    token = mint(keys["rsa"], "RS256", kid="k1")
    with pytest.raises(KeyRefreshNeeded):
        guard.verify(f"Bearer {token}")
    assert run(authenticate(guard, token))["tenant"] == "acme"
    assert jwks_server.hits["/jwks.json"] == 1


def test_never_fetched_answers_503_with_retry_after(make_guard, keys, jwks_server):
    jwks_server.replies["/jwks.json"] = Reply(500, b"boom")
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=30.0)
    token = mint(keys["rsa"], "RS256", kid="k1")
    with pytest.raises(KeysUnavailable) as info:
        run(authenticate(guard, token))
    assert not isinstance(info.value, KeyRefreshNeeded)
    assert info.value.status == 503
    assert 1 <= info.value.retry_after <= 30
    assert ("Retry-After", str(info.value.retry_after)) in info.value.headers


def test_start_fetches_in_the_background(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")])
    guard = make_guard("ES256", jwks_url=jwks_server.url(), **FAST)

    async def scenario():
        await guard.start()
        deadline = time.monotonic() + 30
        while not guard.has_keys and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert guard.verify(f"Bearer {mint(keys['p256'], 'ES256', kid='k1')}")
        guard.close()

    run(scenario())


@pytest.mark.parametrize(
    "alg,key",
    [
        ("RS256", "rsa"),
        ("PS384", "rsa"),
        ("ES256", "p256"),
        ("ES384", "p384"),
        ("ES512", "p521"),
        ("EdDSA", "ed25519"),
        ("EdDSA", "ed448"),
    ],
)
def test_every_key_type_from_a_jwks(make_guard, keys, jwks_server, alg, key):
    jwks_server.serve_keys([jwk_of(keys[key], alg, "k1")])
    guard = make_guard(alg, jwks_url=jwks_server.url(), **FAST)
    assert run(authenticate(guard, mint(keys[key], alg, kid="k1")))


def test_rotation_new_kid_within_one_refresh_and_removed_kid_after_max_age(make_guard, keys, jwks_server):
    old, new = keys["rsa"], keys["rsa_other"]
    jwks_server.serve_keys([jwk_of(old, "RS256", "old")], max_age=1)
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=0.2)
    old_token, new_token = mint(old, "RS256", kid="old"), mint(new, "RS256", kid="new")
    assert run(authenticate(guard, old_token))
    # The IdP publishes the new key and withdraws the old one.
    jwks_server.serve_keys([jwk_of(new, "RS256", "new")], max_age=1)
    wait_interval(guard)
    assert run(authenticate(guard, new_token))  # picked up by one refresh
    assert jwks_server.hits["/jwks.json"] == 2
    # That refresh already dropped "old": the cached old token no longer verifies.
    with pytest.raises(TokenError, match="kid"):
        run(authenticate(guard, old_token))


def test_removed_kid_is_refused_after_max_age_even_when_cached(make_guard, keys, jwks_server):
    a, b = keys["p256"], keys["p256_other"]
    jwks_server.serve_keys([jwk_of(a, "ES256", "a"), jwk_of(b, "ES256", "b")], max_age=1)
    guard = make_guard("ES256", jwks_url=jwks_server.url(), jwks_min_interval=0.1)
    token_a = mint(a, "ES256", kid="a")
    assert run(authenticate(guard, token_a))
    jwks_server.serve_keys([jwk_of(b, "ES256", "b")], max_age=1)
    assert guard.verify(f"Bearer {token_a}")  # still fresh: cached, no fetch
    assert jwks_server.hits["/jwks.json"] == 1
    time.sleep(1.1)
    with pytest.raises(TokenError):
        run(authenticate(guard, token_a))
    assert jwks_server.hits["/jwks.json"] == 2


def test_background_refresh_follows_max_age(make_guard, keys, jwks_server):
    a, b = keys["p256"], keys["p256_other"]
    jwks_server.serve_keys([jwk_of(a, "ES256", "a")], max_age=1)
    guard = make_guard("ES256", jwks_url=jwks_server.url(), jwks_min_interval=0.1)
    token_a = mint(a, "ES256", kid="a")

    async def scenario():
        await guard.start()
        deadline = time.monotonic() + 30
        while not guard.has_keys and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert guard.verify(f"Bearer {token_a}")
        jwks_server.serve_keys([jwk_of(b, "ES256", "b")], max_age=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                guard.verify(f"Bearer {token_a}")
            except TokenError:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the withdrawn key was still accepted 30 s later")
        guard.close()

    run(scenario())
    assert 2 <= jwks_server.hits["/jwks.json"] <= 4  # one per max-age, give or take a tick


@pytest.mark.parametrize(
    "failure",
    ["500", "503", "badjson", "notobject", "nokeys", "oversized", "oversized-unsized", "unusable", "redirect-away"],
)
def test_failed_refresh_keeps_the_keys(make_guard, keys, jwks_server, failure, caplog):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=0.1, jwks_max_bytes=1 << 20)
    token = mint(keys["rsa"], "RS256", kid="k1")
    assert run(authenticate(guard, token))
    replies = {
        "500": Reply(500, b"oops"),
        "503": Reply(503, b"", {"Retry-After": "5"}),
        "badjson": Reply(200, b'{"keys": [', {"Content-Type": "application/json"}),
        "notobject": Reply(200, b"[]"),
        "nokeys": Reply(200, b'{"keys": []}'),
        "oversized": Reply(200, b'{"keys": [], "pad": "' + b"x" * (1 << 20) + b'"}'),
        "oversized-unsized": Reply(200, b'{"keys": [], "pad": "' + b"x" * (1 << 20) + b'"}', content_length=False),
        "unusable": Reply(200, json.dumps({"keys": [jwk_of(keys["rsa_small"], "RS256", "k9")]}).encode()),
        "redirect-away": Reply(302, b"", {"Location": "http://localhost:1/jwks.json"}),
    }
    jwks_server.replies["/jwks.json"] = replies[failure]
    wait_interval(guard)
    before = guard.fetches
    with pytest.raises(TokenError, match="kid"):
        run(authenticate(guard, mint(keys["rsa"], "RS256", kid="unknown")))
    assert guard.fetches == before + 1
    assert guard.verify(f"Bearer {token}")  # the old key still works
    assert any("jwks fetch" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


def test_unreachable_endpoint_keeps_the_keys(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=0.1)
    token = mint(keys["rsa"], "RS256", kid="k1")
    assert run(authenticate(guard, token))
    jwks_server.stop()  # the port now refuses connections
    wait_interval(guard)
    with pytest.raises(TokenError):
        run(authenticate(guard, mint(keys["rsa"], "RS256", kid="k2")))
    assert guard.verify(f"Bearer {token}")
    jwks_server.stop = lambda: None  # already stopped


def test_unreachable_from_the_start_is_503(make_guard, keys):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    guard = make_guard("RS256", jwks_url=f"http://127.0.0.1:{port}/jwks.json", jwks_min_interval=5.0)
    with pytest.raises(KeysUnavailable) as info:
        run(authenticate(guard, mint(keys["rsa"], "RS256", kid="k1")))
    assert info.value.retry_after >= 1


def test_slow_endpoint_times_out_without_blocking_the_loop(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=0.1)  # 2 s timeout
    assert guard.config.jwks_timeout == 2.0
    token = mint(keys["rsa"], "RS256", kid="k1")
    assert run(authenticate(guard, token))
    # The endpoint would answer after 60 s; the guard gives up at its 2 s timeout.
    jwks_server.replies["/jwks.json"] = Reply(200, b'{"keys": []}', delay=60.0)
    wait_interval(guard)

    async def scenario():
        answered = 0

        async def cached_token_requests():
            nonlocal answered
            while True:
                await asyncio.sleep(0.05)
                assert guard.verify(f"Bearer {token}")
                answered += 1

        task = asyncio.create_task(cached_token_requests())
        started = time.monotonic()
        with pytest.raises(TokenError):
            await authenticate(guard, mint(keys["rsa"], "RS256", kid="k2"))
        elapsed = time.monotonic() - started
        task.cancel()
        return elapsed, answered

    elapsed, answered = run(scenario())
    assert 1.8 <= elapsed < 60  # the 2 s timeout, not the 60 s delay
    # Cached-token requests kept being answered while the fetch hung in its thread (a
    # blocked loop would have answered none, or one).
    assert answered >= 3
    assert guard.verify(f"Bearer {token}")


def test_storm_of_random_kids_fetches_once_per_interval(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")])
    jwks_server.replies["/jwks.json"].delay = 0.2  # keep the fetch in flight a while
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=30.0)
    good = mint(keys["rsa"], "RS256", kid="k1")
    storm = [mint(keys["rsa"], "RS256", kid=secrets.token_hex(8)) for _ in range(200)]

    async def scenario():
        results = await asyncio.gather(
            authenticate(guard, good), *(authenticate(guard, t) for t in storm), return_exceptions=True
        )
        more = await asyncio.gather(*(authenticate(guard, t) for t in storm), return_exceptions=True)
        return results, more

    results, more = run(scenario())
    assert isinstance(results[0], dict)
    assert all(isinstance(r, TokenError) and not r.forbidden for r in results[1:] + more)
    assert jwks_server.hits["/jwks.json"] == 1
    assert guard.fetches == 1


def test_storm_after_the_interval_fetches_once_more(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=1.0)
    storm = [mint(keys["rsa"], "RS256", kid=secrets.token_hex(8)) for _ in range(50)]
    assert run(authenticate(guard, mint(keys["rsa"], "RS256", kid="k1")))
    wait_interval(guard)

    async def burst():
        return await asyncio.gather(*(authenticate(guard, t) for t in storm), return_exceptions=True)

    run(burst())
    run(burst())
    assert jwks_server.hits["/jwks.json"] == 2


def test_redirect_to_another_origin_is_not_followed(make_guard, keys, jwks_server):
    from support.authkit import JwksServer

    other = JwksServer()
    try:
        other.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")])
        jwks_server.replies["/jwks.json"] = Reply(302, b"", {"Location": other.url()})
        guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=30.0)
        with pytest.raises(KeysUnavailable):
            run(authenticate(guard, mint(keys["rsa"], "RS256", kid="k1")))
        assert other.hits == {}
    finally:
        other.stop()


def test_same_origin_redirect_is_followed(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")], "/v2/jwks.json")
    jwks_server.replies["/jwks.json"] = Reply(301, b"", {"Location": "/v2/jwks.json"})
    guard = make_guard("RS256", jwks_url=jwks_server.url(), **FAST)
    assert run(authenticate(guard, mint(keys["rsa"], "RS256", kid="k1")))


@pytest.mark.parametrize(
    "bad_jwk", [{"use": "enc"}, {"alg": "RS512"}, {"key_ops": ["encrypt"]}, {"kty": "EC"}, "small", "ec"]
)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_unfit_jwks_keys_are_skipped(make_guard, keys, jwks_server, bad_jwk):
    if bad_jwk == "small":
        entry = jwk_of(keys["rsa_small"], "RS256", "bad")
        signer = keys["rsa_small"]
    elif bad_jwk == "ec":
        entry = jwk_of(keys["p256"], None, "bad")
        signer = keys["rsa"]
    else:
        entry = {**jwk_of(keys["rsa"], "RS256", "bad"), **bad_jwk}
        signer = keys["rsa"]
    jwks_server.serve_keys([entry, jwk_of(keys["rsa_other"], "RS256", "good")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=30.0)
    assert run(authenticate(guard, mint(keys["rsa_other"], "RS256", kid="good")))
    with pytest.raises(TokenError, match="kid"):
        run(authenticate(guard, mint(signer, "RS256", kid="bad")))


@pytest.mark.parametrize(
    "alg,jwk_key,crv,signer",
    [
        ("ES384", "p256", None, "p384"),  # a P-256 key offered for ES384
        ("ES256", "p256", "P-384", "p256"),  # crv that does not match the coordinates
        ("EdDSA", "ed25519", "X25519", "ed25519"),
    ],
)
def test_curve_mismatches_are_skipped(make_guard, keys, jwks_server, alg, jwk_key, crv, signer):
    entry = jwk_of(keys[jwk_key], None, "k")
    if crv:
        entry["crv"] = crv
    jwks_server.serve_keys([entry])
    guard = make_guard(alg, jwks_url=jwks_server.url(), jwks_min_interval=30.0)
    with pytest.raises(KeysUnavailable):  # nothing usable: never had keys
        run(authenticate(guard, mint(keys[signer], alg, kid="k")))
    assert guard.fetches == 1


def test_off_curve_and_short_coordinates_are_skipped(make_guard, keys, jwks_server):
    good = jwk_of(keys["p256"], "ES256", "k")
    off = {**good, "kid": "off", "y": good["x"]}  # (x, x) is not on the curve
    short = {**good, "kid": "short", "x": good["x"][:-2]}
    jwks_server.serve_keys([off, short, good])
    guard = make_guard("ES256", jwks_url=jwks_server.url(), jwks_min_interval=30.0)
    assert run(authenticate(guard, mint(keys["p256"], "ES256", kid="k")))
    for kid in ("off", "short"):
        with pytest.raises(TokenError):
            run(authenticate(guard, mint(keys["p256"], "ES256", kid=kid)))


def test_token_without_kid(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "only")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), **FAST)
    assert run(authenticate(guard, mint(keys["rsa"], "RS256")))  # one key: no guessing needed
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "a"), jwk_of(keys["rsa_other"], "RS256", "b")])
    wait_interval(guard)
    run(guard.refresh_keys())
    with pytest.raises(TokenError, match="kid"):
        guard.verify(f"Bearer {mint(keys['rsa'], 'RS256', sub='fresh')}")


@pytest.mark.parametrize(
    "header,expected",
    [
        (None, None),
        ("", None),
        ("public", None),
        ("max-age=60", 60.0),
        ("public, max-age=600", 600.0),
        ('max-age="120", must-revalidate', 120.0),
        ("no-store", 0.0),
        ("no-cache, max-age=5", 5.0),
        ("s-maxage=10", None),
        ("max-age=-1", None),
    ],
)
def test_parse_max_age(header, expected):
    assert parse_max_age(header) == expected


def test_max_age_is_clamped_to_the_minimum_interval(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1")], max_age=0)
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=30.0)
    token = mint(keys["rsa"], "RS256", kid="k1")
    assert run(authenticate(guard, token))
    for _ in range(5):
        assert run(authenticate(guard, token))
    assert jwks_server.hits["/jwks.json"] == 1
