"""The guard (dbsvc/auth/guard.py) at its edges, where mutation testing found nothing pinned
down (docs/mutation.md): what its configuration errors and log lines say, the exact refusal
texts (the 401's `detail`), the `Authorization` spellings the fast path must treat like the
careful one (RFC 7235 allows several spaces after the scheme), the header size limit at
its edge, and the freshness of cached tokens and JWKS keys at the exact instant they end
(on fake clocks)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import time

import pytest

import dbsvc.auth
from dbsvc.auth import Guard, KeyRefreshNeeded
from dbsvc.errors import ConfigError, TokenError
from support.authkit import Reply, jwk_of, mint, public_pem

WAIT = 30.0  # generous: a loaded two-core machine


def _message(call) -> str:
    with pytest.raises(TokenError) as refused:
        call()
    return str(refused.value)


# -- building a guard ------------------------------------------------------------------------


def test_without_cryptography_building_a_guard_says_which_package_to_install(make_guard, monkeypatch):
    config = make_guard("ES256", "p256").config
    monkeypatch.delattr(dbsvc.auth, "jwks", raising=False)
    monkeypatch.setitem(sys.modules, "dbsvc.auth.jwks", None)  # "import dbsvc.auth.jwks" fails
    with pytest.raises(ConfigError) as refused:
        Guard(config)
    assert str(refused.value) == "the token guard needs the 'cryptography' package (pip install 'dbsvc[auth]')"


def test_an_unusable_key_is_refused_naming_where_it_came_from(make_guard, keys):
    config = make_guard("ES256", "p256").config
    rsa_pem = dataclasses.replace(config, pubkey_pem=public_pem(keys["rsa"]))
    for source, named in ((config.pubkey_source, config.pubkey_source), (None, "SERVICE_JWT_PUBKEY")):
        with pytest.raises(ConfigError) as refused:
            Guard(dataclasses.replace(rsa_pem, pubkey_source=source))
        text = str(refused.value)
        assert text.startswith(f"{named}: ") and len(text) > len(named) + 2, text


def test_a_guard_without_a_key_source_is_a_config_error(make_guard):
    config = dataclasses.replace(make_guard("ES256", "p256").config, pubkey_pem=None, jwks_url=None)
    with pytest.raises(ConfigError) as refused:
        Guard(config)
    assert str(refused.value) == "the guard needs SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL"


def test_a_plain_http_jwks_url_is_warned_about_unless_it_is_loopback(make_guard, caplog):
    config = make_guard("ES256", "p256").config
    quiet = [
        "http://127.0.0.1:8080/jwks.json",
        "http://localhost/jwks.json",
        "http://[::1]/jwks.json",
        "https://keys.example/jwks.json",
    ]
    loud = ["http://keys.example/jwks.json", "http://10.0.0.7/jwks.json"]
    for url in quiet + loud:
        with caplog.at_level(logging.WARNING, logger="dbsvc.auth"):
            caplog.clear()
            Guard(dataclasses.replace(config, pubkey_pem=None, jwks_url=url))
        said = [r.getMessage() for r in caplog.records]
        if url in quiet:
            assert said == [], url
        else:
            assert said == [f"SERVICE_JWKS_URL {url} is plain http: keys fetched without TLS can be forged in transit"]


# -- what a refusal says -------------------------------------------------------------------


def test_no_token_is_said_as_such_without_an_error_code(make_guard):
    guard = make_guard("ES256", "p256")
    for call in (lambda: guard.verify(None), lambda: guard.verify(""), lambda: guard.verify_token(None)):
        with pytest.raises(TokenError) as refused:
            call()
        assert str(refused.value) == "missing bearer token" and refused.value.sent is False


def test_a_bad_signature_is_said_as_such(make_guard, keys):
    guard = make_guard("ES256", "p256")
    assert _message(lambda: guard.verify(f"Bearer {mint(keys['p256_other'], 'ES256')}")) == (
        "token signature is invalid"
    )


# -- the Authorization spellings -------------------------------------------------------------


def _token_ending_in_x(keys) -> str:
    """A token whose last character is `X`, a letter that no whitespace strip may take (an
    ES384 signature is 96 bytes, 128 base64url characters: its last one can be any)."""
    for n in range(5000):
        token = mint(keys["p384"], "ES384", sub=f"user-{n}")
        if token.endswith("X"):
            return token
    raise AssertionError("no signature ended in X in 5000 tries")


def test_spaces_and_tabs_around_the_token_are_allowed_in_every_spelling(make_guard, keys):
    guard = make_guard("ES384", "p384")
    token = _token_ending_in_x(keys)
    for value in (
        f"Bearer  {token}",
        f"Bearer \t{token}",
        f"Bearer {token} ",
        f"Bearer {token}\t",
        f"Bearer {token} \t ",
        f"bearer {token} ",
        f"bearer {token}",
        f"Bearer   {token}  ",
    ):
        guard.forget()  # each spelling is verified, not answered from the cache
        assert guard.verify(value)["tenant"] == "acme", value
    # Only spaces and tabs (RFC 9110 OWS), in either spelling: other characters a header
    # value may hold in its latin-1 decoding, a no-break space or NEL, are not whitespace.
    for value in (
        f"Bearer {token}\xa0 ",
        f"Bearer {token}\x85",
        f"bearer {token}\x85",
        f"bearer {token}\xa0\t",
        f"\x85bearer {token}",
    ):
        assert _message(lambda: guard.verify(value)).startswith(
            ("token is not a compact JWS", "authorization scheme is not Bearer")
        ), value


def test_the_header_limit_leaves_room_for_the_scheme_and_spaces_and_no_more(make_guard, keys):
    token = mint(keys["p256"], "ES256")
    guard = make_guard("ES256", "p256", max_token_bytes=len(token))
    assert guard.verify(f"Bearer {token}")["tenant"] == "acme"  # a token of exactly the limit
    padded = f"Bearer {token}" + " " * 57  # the header limit: limit + 64
    assert len(padded) == len(token) + 64
    guard.forget()
    assert guard.verify(padded)["tenant"] == "acme"
    assert _message(lambda: guard.verify(padded + " ")) == f"token is larger than {len(token)} bytes"


# -- cached tokens and JWKS keys at the instant they end ------------------------------------


def test_a_cached_token_is_refused_at_exactly_exp_plus_leeway(make_guard, keys):
    config = make_guard("ES256", "p256", env={"SERVICE_JWT_LEEWAY": "5"}).config
    start = float(int(time.time()))
    now = [start]
    guard = Guard(config, clock=lambda: now[0])
    token = mint(keys["p256"], "ES256", iat=int(start), exp=int(start) + 100)
    assert guard.verify(f"Bearer {token}")["tenant"] == "acme"
    now[0] = start + 104.999
    assert guard.verify(f"Bearer {token}")["tenant"] == "acme"  # from the cache
    now[0] = start + 105
    assert _message(lambda: guard.verify(f"Bearer {token}")) == "token has expired"


def _jwks_guard(make_guard, jwks_server, now: list[float]) -> Guard:
    config = make_guard("ES256", jwks_url=jwks_server.url(), jwks_min_interval=10.0, jwks_timeout=WAIT).config
    return Guard(config, monotonic=lambda: now[0])


def test_keys_past_their_max_age_are_refreshed_first_cached_token_or_not(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=60)
    now = [1000.0]
    guard = _jwks_guard(make_guard, jwks_server, now)
    asyncio.run(guard.refresh_keys())
    cached = mint(keys["p256"], "ES256", kid="k1", sub="cached")
    fresh = mint(keys["p256"], "ES256", kid="k1", sub="new")
    assert guard.verify(f"Bearer {cached}")["sub"] == "cached"
    now[0] = 1059.999
    assert guard.verify(f"Bearer {cached}")["sub"] == "cached"
    assert guard.verify(f"Bearer {fresh}")["sub"] == "new"
    guard.forget(fresh)
    now[0] = 1060.0  # max-age over, no background refresher: fetch first
    for token in (cached, fresh):
        with pytest.raises(KeyRefreshNeeded):
            guard.verify(f"Bearer {token}")


def test_a_cached_token_is_served_while_another_request_refreshes_stale_keys(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=60)
    now = [1000.0]
    guard = _jwks_guard(make_guard, jwks_server, now)
    token = mint(keys["p256"], "ES256", kid="k1")

    async def scenario() -> None:
        await guard.refresh_keys()
        assert guard.verify(f"Bearer {token}")["tenant"] == "acme"
        now[0] = 1100.0  # stale
        reply = jwks_server.replies["/jwks.json"]
        jwks_server.replies["/jwks.json"] = dataclasses.replace(reply, delay=0.3)
        refreshing = asyncio.create_task(guard.refresh_keys())  # another request's fetch
        deadline = time.monotonic() + WAIT
        while jwks_server.hits.get("/jwks.json", 0) < 2:
            assert time.monotonic() < deadline, "the second fetch never reached the server"
            await asyncio.sleep(0.005)
        # The fetch just started, so another is not due: the cached token is answered now.
        assert guard.verify(f"Bearer {token}")["tenant"] == "acme"
        await refreshing

    asyncio.run(scenario())
    assert guard.fetches == 2


def test_the_kid_refusals_say_what_was_wrong(make_guard, keys, jwks_server):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1"), jwk_of(keys["p256_other"], "ES256", "k2")])
    now = [1000.0]
    guard = _jwks_guard(make_guard, jwks_server, now)
    asyncio.run(guard.refresh_keys())
    assert _message(lambda: guard.verify(f"Bearer {mint(keys['p256'], 'ES256')}")) == (
        "token has no 'kid' header and the key set holds several keys"
    )
    # A fetch was made 0 s ago: an unknown kid is refused without another.
    assert _message(lambda: guard.verify(f"Bearer {mint(keys['p256'], 'ES256', kid='k9')}")) == (
        "token 'kid' names no known key"
    )
    assert guard.fetches == 1


# -- what the JWKS fetches log --------------------------------------------------------------


def test_each_new_key_set_is_logged_once_and_a_failed_fetch_says_what_it_keeps(make_guard, keys, jwks_server, caplog):
    now = [1000.0]
    guard = _jwks_guard(make_guard, jwks_server, now)
    url = jwks_server.url()
    jwks_server.replies["/jwks.json"] = Reply(500, b"boom")
    with caplog.at_level(logging.INFO, logger="dbsvc.auth"):
        asyncio.run(guard.refresh_keys())
        jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=60)
        for _ in range(2):  # the same set twice: said once
            now[0] += 10
            asyncio.run(guard.refresh_keys())
        jwks_server.replies["/jwks.json"] = Reply(500, b"boom")
        now[0] += 10
        asyncio.run(guard.refresh_keys())
    assert [r.getMessage() for r in caplog.records] == [
        f"jwks fetch from {url} failed: http status 500 (Internal Server Error); keeping 0 key(s)",
        f"jwks: 1 key(s) from {url} (kids ['k1']); fresh for 60 s",
        f"jwks fetch from {url} failed: http status 500 (Internal Server Error); keeping 1 key(s)",
    ]
    assert guard.fetches == 4


def test_a_fetch_that_cannot_even_start_is_logged_with_its_cause_and_the_keys_stay(
    make_guard, keys, jwks_server, caplog
):
    # fetch_jwks itself turns every I/O and parse failure into JwksError (test_jwks_inputs.py);
    # what is left for the last-resort branch is the thread the fetch runs in: here the
    # loop's default executor is already shut down, as at the very end of a shutdown.
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=60)
    now = [1000.0]
    guard = _jwks_guard(make_guard, jwks_server, now)
    url = jwks_server.url()
    asyncio.run(guard.refresh_keys())

    async def refresh_without_an_executor() -> None:
        await asyncio.get_running_loop().shutdown_default_executor()
        await guard.refresh_keys()

    now[0] += 120  # the keys are stale: a fetch is due
    caplog.clear()  # the first fetch's line shows when an earlier test left dbsvc.auth at INFO
    with caplog.at_level(logging.INFO, logger="dbsvc.auth"):
        asyncio.run(refresh_without_an_executor())
    [record] = caplog.records
    assert record.getMessage() == f"jwks fetch from {url} failed unexpectedly"
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert guard.fetches == 2
    token = mint(keys["p256"], "ES256", kid="k1", sub="after")
    assert guard.verify(f"Bearer {token}")["sub"] == "after"  # the old keys still verify


def test_a_cache_size_below_one_still_caches_the_latest_token_only(make_guard, keys):
    for size in (0, 1):
        guard = make_guard("ES256", "p256", token_cache_size=size)
        first, second = (mint(keys["p256"], "ES256", sub=f"u{i}") for i in range(2))
        guard.verify(f"Bearer {first}")
        guard.verify(f"Bearer {second}")
        assert guard.cached_tokens() == [second], size
