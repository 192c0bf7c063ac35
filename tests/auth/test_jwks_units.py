"""auth/jwks.py's parts one by one: which key a `kid` selects, which keys a set keeps and
what it logs for the others, the max-age of a Cache-Control header, the origin a redirect
must keep, and each bound of a fetch with its exact message, over a real loopback server.
Fixture-free (each test starts and stops its own server), so the in-process mutation
runner can call them (docs/mutation.md, session 15, wt-mpo5: the module had never been run)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dbsvc.auth.jwks import JwksError, KeySet, build_keyset, fetch_jwks, origin_of, parse_max_age
from dbsvc.auth.keys import key_from_jwk
from support.authkit import JwksServer, Reply, all_private_keys, jwk_of

KEYS = all_private_keys()
A = key_from_jwk(jwk_of(KEYS["p256"], kid="a"), "ES256")
B = key_from_jwk(jwk_of(KEYS["p256_other"], kid="b"), "ES256")
ANON = key_from_jwk(jwk_of(KEYS["p256"]), "ES256")
ANON2 = key_from_jwk(jwk_of(KEYS["p256_other"]), "ES256")


@contextmanager
def logged() -> Iterator[list[tuple[str, str]]]:
    """(level, message) of every line of the "dbsvc.auth" logger inside the block."""
    lines: list[tuple[str, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.levelname, record.getMessage()))

    logger = logging.getLogger("dbsvc.auth")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextmanager
def serving(**replies: Reply) -> Iterator[JwksServer]:
    server = JwksServer()
    server.replies.update({f"/{name}": reply for name, reply in replies.items()})
    try:
        yield server
    finally:
        server.stop()


def _body(*jwks: dict) -> bytes:
    return json.dumps({"keys": list(jwks)}).encode()


def fetch_refused(url: str, **bounds) -> str:
    with pytest.raises(JwksError) as caught:
        fetch_jwks(url, "ES256", timeout=bounds.get("timeout", 5.0), max_bytes=bounds.get("max_bytes", 1 << 20))
    return str(caught.value)


# --- KeySet.select


def test_a_kid_selects_its_key_and_an_unknown_kid_none():
    keys = KeySet({"a": A, "b": B}, (ANON,))
    assert len(keys) == 3
    assert (keys.select("a"), keys.select("b"), keys.select("c")) == (A, B, None)
    assert keys.select(None) is None  # three keys: none is guessed


def test_a_lone_key_without_a_kid_answers_any_kid_only_when_no_key_has_one():
    assert KeySet({}, (ANON,)).select("whatever") is ANON
    assert KeySet({"a": A}, (ANON,)).select("whatever") is None
    assert KeySet({}, (ANON, ANON2)).select("whatever") is None


def test_a_token_without_a_kid_takes_the_only_key_whichever_kind():
    assert KeySet({"a": A}).select(None) is A
    assert KeySet({}, (ANON,)).select(None) is ANON
    assert KeySet({}, (ANON, ANON2)).select(None) is None
    assert KeySet({"a": A, "b": B}).select(None) is None
    assert KeySet().select(None) is None and len(KeySet()) == 0


# --- build_keyset


def test_a_set_keeps_the_usable_keys_and_logs_each_one_it_skips():
    document = {
        "keys": [
            "not an object",
            jwk_of(KEYS["p256"], kid="a"),
            jwk_of(KEYS["rsa"], kid="r"),
            jwk_of(KEYS["p256_other"], kid="a"),
            jwk_of(KEYS["p256_other"]),
        ]
    }
    with logged() as lines:
        keys = build_keyset(document, "ES256")
    assert list(keys.by_kid) == ["a"] and keys.by_kid["a"].fingerprint == A.fingerprint
    assert [k.fingerprint for k in keys.anonymous] == [ANON2.fingerprint]
    assert keys.fingerprint == frozenset({A.fingerprint, ANON2.fingerprint})
    assert lines == [
        ("WARNING", "jwks: key #0 is not an object; skipped"),
        ("INFO", "jwks: key #2 (kid 'r') skipped: jwk 'kty' is 'RSA', ES256 needs 'EC'"),
        ("WARNING", "jwks: duplicate kid 'a'; the first usable key is kept"),
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "response has no 'keys' array"),
        ({"keys": {"a": 1}}, "response has no 'keys' array"),
        ({"keys": []}, "no key in the set is usable with ES256"),
        ({"keys": [jwk_of(KEYS["rsa"])]}, "no key in the set is usable with ES256"),
    ],
)
def test_a_set_without_a_usable_key_is_refused(document, message):
    with pytest.raises(JwksError) as caught:
        build_keyset(document, "ES256")
    assert str(caught.value) == message


def test_a_set_of_anonymous_keys_alone_is_usable():
    keys = build_keyset({"keys": [jwk_of(KEYS["p256"])]}, "ES256")
    assert (keys.by_kid, [k.fingerprint for k in keys.anonymous]) == ({}, [ANON.fingerprint])


# --- parse_max_age


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("public", None),
        ("max-age=300", 300.0),
        ("public, max-age=60", 60.0),
        ("MAX-AGE = 7 , public", 7.0),
        ('max-age="120"', 120.0),
        ("max-age=0", 0.0),
        ("max-age=9999999999", 9999999999.0),
        ("max-age=99999999999", None),
        ("s-maxage=5", None),
        ("xmax-age=5", None),
        ("max-age=5x", None),
        ("no-store", 0.0),
        ("public, no-cache", 0.0),
        ("No-Cache , private", 0.0),
        ("no-cache, max-age=30", 30.0),
        ("no-storex", None),
    ],
)
def test_max_age_is_read_from_cache_control(header, seconds):
    assert parse_max_age(header) == seconds


# --- origin_of


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://ID.example.com/jwks", ("https", "id.example.com", 443)),
        ("HTTP://h/x", ("http", "h", 80)),
        ("http://h:8080/x", ("http", "h", 8080)),
        ("https://h:80/x", ("https", "h", 80)),
        ("/relative", ("", "", 80)),
    ],
)
def test_an_origin_is_scheme_host_and_port_with_the_schemes_default(url, origin):
    assert origin_of(url) == origin


# --- fetch_jwks over a real loopback server


def test_a_fetch_gives_the_keys_and_the_max_age():
    reply = Reply(200, _body(jwk_of(KEYS["p256"], kid="a")), {"Cache-Control": "max-age=42"})
    with serving(**{"jwks.json": reply}) as server:
        keys, max_age = fetch_jwks(server.url(), "ES256", timeout=5.0, max_bytes=1 << 20)
    assert (list(keys.by_kid), max_age) == (["a"], 42.0)


def test_a_fetch_without_cache_control_has_no_max_age():
    with serving(**{"jwks.json": Reply(200, _body(jwk_of(KEYS["p256"])))}) as server:
        assert fetch_jwks(server.url(), "ES256", timeout=5.0, max_bytes=1 << 20)[1] is None


def test_a_status_other_than_200_is_refused_with_it():
    with serving(**{"jwks.json": Reply(204, b""), "gone": Reply(503, b"x")}) as server:
        assert fetch_refused(server.url()) == "http status 204"
        assert fetch_refused(server.url("/gone")) == "http status 503 (Service Unavailable)"


def test_a_body_past_the_cap_is_refused_by_its_length_or_while_read():
    body = _body(jwk_of(KEYS["p256"]))
    with serving(**{"jwks.json": Reply(200, body), "streamed": Reply(200, body, content_length=False)}) as server:
        assert fetch_refused(server.url(), max_bytes=len(body) - 1) == (
            f"response of {len(body)} bytes is over the {len(body) - 1}-byte cap"
        )
        assert fetch_jwks(server.url(), "ES256", timeout=5.0, max_bytes=len(body))[0]
        assert fetch_refused(server.url("/streamed"), max_bytes=len(body) - 1) == (
            f"response is over the {len(body) - 1}-byte cap"
        )
        assert fetch_jwks(server.url("/streamed"), "ES256", timeout=5.0, max_bytes=len(body))[0]


def test_a_body_that_is_not_a_json_object_is_refused():
    with serving(**{"jwks.json": Reply(200, b"[1, 2]"), "text": Reply(200, b"keys")}) as server:
        assert fetch_refused(server.url()) == "response is not a JSON object"
        assert fetch_refused(server.url("/text")) == "response is not a JSON object"


def test_a_redirect_is_followed_on_the_same_origin_only():
    with serving(**{"jwks.json": Reply(200, _body(jwk_of(KEYS["p256"], kid="a")))}) as server:
        server.replies["/moved"] = Reply(302, b"", {"Location": "/jwks.json"})
        keys, _ = fetch_jwks(server.url("/moved"), "ES256", timeout=5.0, max_bytes=1 << 20)
        assert list(keys.by_kid) == ["a"]
        server.replies["/away"] = Reply(302, b"", {"Location": f"http://localhost:{server.port}/jwks.json"})
        assert fetch_refused(server.url("/away")) == "http status 302 (redirect to another origin refused)"
        assert server.hits.get("/jwks.json") == 1


def test_an_endpoint_that_cannot_be_reached_is_refused_with_the_reason():
    server = JwksServer()
    url = server.url()
    server.stop()
    assert fetch_refused(url).startswith("cannot reach the endpoint (")


def test_a_slow_body_is_refused_past_the_timeout():
    with serving(**{"jwks.json": Reply(200, _body(jwk_of(KEYS["p256"])), delay=1.0)}) as server:
        message = fetch_refused(server.url(), timeout=0.3)
    assert message.startswith(
        ("fetch failed (TimeoutError", "cannot reach the endpoint (", "fetch took longer than")
    ), message


# --- what the first mutation run of the module left (docs/mutation.md, session 15, wt-mpo5)


@contextmanager
def scripted(*pieces: tuple[float, bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """A one-connection server on 127.0.0.1: it keeps the request's head, then sends each
    piece after its pause. Yields (url, [the head])."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    done = threading.Event()  # set when the test is over: the pauses left are cut short

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            seen.append(head)
            try:
                for pause, data in pieces:
                    if done.wait(pause):
                        return
                    conn.sendall(data)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/jwks.json", seen
    finally:
        done.set()
        thread.join(10)
        listener.close()


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body


def test_a_fetch_asks_for_a_jwk_set_and_names_itself():
    with scripted((0.0, _answer(_body(jwk_of(KEYS["p256"], kid="a"))))) as (url, seen):
        assert list(fetch_jwks(url, "ES256", timeout=5.0, max_bytes=1 << 20)[0].by_kid) == ["a"]
    first, *lines = seen[0].decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines if line)}
    assert first == "GET /jwks.json HTTP/1.1"  # header names compared without case (RFC 9110 5.1)
    assert (headers["accept"], headers["user-agent"]) == ("application/jwk-set+json, application/json", "dbsvc")


def test_an_endpoint_that_never_answers_is_given_up_at_the_timeout():
    began = time.monotonic()
    with scripted((3.0, _answer(b"{}"))) as (url, _seen):
        message = fetch_refused(url, timeout=0.3)
        waited = time.monotonic() - began
    assert message in ("fetch failed (TimeoutError: timed out)", "cannot reach the endpoint (timed out)"), message
    assert waited < 2.5, waited


def test_a_body_that_trickles_past_the_timeout_is_refused_whatever_each_read_takes():
    body = _body(jwk_of(KEYS["p256"]))
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    pieces = [(0.0, head)] + [(0.15, body[i : i + 1]) for i in range(8)] + [(0.0, body[8:])]
    with scripted(*pieces) as (url, _seen):
        assert fetch_refused(url, timeout=0.5) == "fetch took longer than 0.5 s"


def test_the_cap_counts_every_chunk_of_a_streamed_body_and_a_long_body_is_joined_whole():
    padded = _body(jwk_of(KEYS["p256"], kid="a")).replace(b"{", b"{" + b" " * 150_000, 1)
    stream = Reply(200, padded, content_length=False)
    with serving(**{"jwks.json": Reply(200, padded), "streamed": stream}) as server:
        assert list(fetch_jwks(server.url(), "ES256", timeout=5.0, max_bytes=1 << 20)[0].by_kid) == ["a"]
        assert list(fetch_jwks(server.url("/streamed"), "ES256", timeout=5.0, max_bytes=1 << 20)[0].by_kid) == ["a"]
        assert fetch_refused(server.url("/streamed"), max_bytes=100_000) == "response is over the 100000-byte cap"
