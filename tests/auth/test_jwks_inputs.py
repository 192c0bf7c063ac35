"""Whatever a JWKS endpoint answers, `fetch_jwks` ends in a key set or a `JwksError`, never
another exception.

The guard relies on it: a `JwksError` is logged as a failed fetch with the keys kept, and its
last-resort `except Exception` in `Guard._fetch_once` is for a bug of ours, which no answer
of an endpoint can reach (docs/mutation.md counts the mutants of that branch as unreachable
because of these tests). Key sets are built from arbitrary JSON; whole answers (status,
headers, body) come from a real loopback `http.server`.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.auth.jwks import JwksError, KeySet, build_keyset, fetch_jwks
from dbsvc.auth.jwt import load_json_object
from support.authkit import KEY_FOR_ALG, Reply, jwk_of

ALGS = ["RS256", "PS384", "ES256", "ES384", "ES512", "EdDSA"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# JWK members with the names a key parser reads, each any JSON value or a plausible string.
MEMBERS = ["kty", "crv", "n", "e", "x", "y", "kid", "use", "key_ops", "alg"]
member_values = json_values | st.sampled_from(
    [
        "RSA",
        "EC",
        "OKP",
        "P-256",
        "P-384",
        "P-521",
        "Ed25519",
        "Ed448",
        "sig",
        "enc",
        "verify",
        "AQAB",
        "AA",
        "_-_-",
        "====",
        "",
        "RS256",
        "EdDSA",
        "ES256",
    ]
)
jwks = st.dictionaries(st.sampled_from(MEMBERS), member_values, max_size=8)
documents = st.fixed_dictionaries({}, optional={"keys": st.lists(jwks | json_values, max_size=4)}) | st.dictionaries(
    st.text(max_size=6), json_values, max_size=3
)


def _keyset_or_jwks_error(build) -> None:
    try:
        result = build()
    except JwksError:
        return
    assert isinstance(result, KeySet)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(document=documents, alg=st.sampled_from(ALGS))
def test_any_document_is_a_key_set_or_a_jwks_error(document, alg):
    _keyset_or_jwks_error(lambda: build_keyset(document, alg))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    body=st.binary(max_size=64)
    | st.builds(lambda v: json.dumps(v).encode(), json_values)
    | st.builds(lambda d: "[" * d + "]" * d, st.integers(1, 200_000)).map(str.encode)
)
def test_any_body_is_an_object_or_a_value_error(body):
    try:
        assert isinstance(load_json_object(body), dict)
    except ValueError:
        pass


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    status=st.sampled_from([200, 200, 200, 204, 301, 302, 304, 404, 500, 999]),
    headers=st.dictionaries(
        st.sampled_from(["Content-Type", "Cache-Control", "Location", "Content-Encoding", "X-Pad"]),
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
        max_size=3,
    ),
    body=st.binary(max_size=200) | st.builds(lambda v: json.dumps({"keys": v}).encode(), json_values),
    sized=st.booleans(),
)
def test_any_answer_of_an_endpoint_is_a_key_set_or_a_jwks_error(jwks_server, status, headers, body, sized):
    jwks_server.replies["/jwks.json"] = Reply(status, body, headers, content_length=sized)
    _keyset_or_jwks_error(lambda: fetch_jwks(jwks_server.url(), "RS256", timeout=10.0, max_bytes=1 << 16)[0])


@pytest.mark.parametrize("alg", ALGS)
def test_a_usable_key_among_garbage_is_still_found(keys, alg):
    # The fuzzing above must not pass only because nothing is ever usable.
    good = jwk_of(keys[KEY_FOR_ALG[alg]], alg, "good")
    keyset = build_keyset({"keys": [[], {"kty": 5}, {"kty": "RSA", "n": {}}, good, None]}, alg)
    assert list(keyset.by_kid) == ["good"]
