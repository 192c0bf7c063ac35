"""Token parsing and the claim checks at their exact edges, and the exact message each
refusal gives (it is the 401's `detail`). Found by mutation testing (docs/mutation.md): the
guard tests prove that an expired token is refused, these prove where "expired" begins."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dbsvc.auth.jwt import (
    b64url_decode,
    b64url_encode,
    check_claims,
    check_header,
    load_json_object,
    parse_claims,
    parse_token,
)
from dbsvc.errors import TokenError

NOW = 1_700_000_000.0
ISSUER = "https://id.example.com/"
AUDIENCE = "blog"


def check(
    claims: dict[str, Any],
    *,
    now: float = NOW,
    leeway: float = 30.0,
    issuer: str | None = ISSUER,
    audience: str | None = AUDIENCE,
) -> float:
    return check_claims(claims, now=now, leeway=leeway, issuer=issuer, audience=audience)


def good(**over: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "iat": NOW, "nbf": NOW, "exp": NOW + 300}
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def test_a_token_is_accepted_until_exp_plus_leeway_and_refused_from_that_instant():
    deadline = NOW + 300 + 30
    assert check(good(), now=deadline - 0.001) == deadline
    with pytest.raises(TokenError) as refused:
        check(good(), now=deadline)
    assert str(refused.value) == "token has expired"


@pytest.mark.parametrize(
    "claim, message",
    [("nbf", "token is not valid yet ('nbf' is in the future)"), ("iat", "token was issued in the future ('iat')")],
)
def test_nbf_and_iat_are_accepted_up_to_now_plus_leeway(claim, message):
    # RFC 7519 sections 4.1.5 and 4.1.6: at `now + leeway` the token is valid, past it not.
    assert check(good(**{claim: NOW + 30})) == NOW + 330
    with pytest.raises(TokenError) as refused:
        check(good(**{claim: NOW + 30.5}))
    assert str(refused.value) == message


def test_fractional_numeric_dates_are_accepted():
    # RFC 7519 section 2: a NumericDate may be non-integer; a strict JSON parser must not
    # mistake every float for an overflow.
    claims = parse_claims(b'{"exp": 1700000300.25, "nbf": 1699999999.5, "iat": 1699999999.75}')
    assert check(claims, issuer=None, audience=None) == 1700000300.25 + 30


@pytest.mark.parametrize("text", [b'{"exp": 1e400}', b'{"exp": NaN}', b'{"exp": -Infinity}'])
def test_json_numbers_outside_a_double_are_refused_before_any_claim_is_read(text):
    with pytest.raises(ValueError):
        load_json_object(text)
    with pytest.raises(TokenError) as refused:
        parse_claims(text)
    assert str(refused.value) == "token payload is not a JSON object"


@pytest.mark.parametrize(
    "claims, message",
    [
        ({"iss": ISSUER, "aud": AUDIENCE}, "token has no 'exp' claim"),
        (good(exp="soon"), "token 'exp' claim is not a number"),
        (good(exp=True), "token 'exp' claim is not a number"),
        (good(nbf="0"), "token 'nbf' claim is not a number"),
        (good(iat=[1]), "token 'iat' claim is not a number"),
        (good(exp=10**400), "token 'exp' claim is out of range"),
        (good(exp=float("inf")), "token 'exp' claim is out of range"),
        (good(iss="https://id.example.com"), "token issuer ('iss') is not the configured issuer"),
        (good(iss=None), "token issuer ('iss') is not the configured issuer"),
        (good(aud="other"), "token audience ('aud') does not include the configured audience"),
        (good(aud=["other", 1]), "token audience ('aud') does not include the configured audience"),
        (good(aud={"blog": True}), "token audience ('aud') does not include the configured audience"),
    ],
)
def test_each_refused_claim_set_gets_its_own_message(claims, message):
    with pytest.raises(TokenError) as refused:
        check(claims)
    assert str(refused.value) == message
    assert refused.value.sent and not refused.value.forbidden


def test_audience_may_be_a_list_that_contains_ours():
    assert check(good(aud=["other", AUDIENCE])) == NOW + 330


HEADER = "eyJhbGciOiJFUzI1NiJ9"  # {"alg":"ES256"}
TOKEN = f"{HEADER}.e30.c2ln"  # payload {}, signature b"sig"


@pytest.mark.parametrize(
    "token, message",
    [
        ("", "token is empty"),
        ("x" * 101, "token is larger than 100 bytes"),
        (TOKEN.replace("c2ln", "c2lé"), "token is not a compact JWS: non-ASCII characters"),
        (f"{HEADER}.e30", "token is not a compact JWS: expected three dot-separated segments"),
        (f"{TOKEN}.e30.e30", "token is not a compact JWS: expected three dot-separated segments"),
        (f"{HEADER}.e30=.c2ln", "token is not a compact JWS: a segment is not base64url"),
        ("W10.e30.c2ln", "token header is not a JSON object"),  # header []
    ],
)
def test_each_malformed_token_gets_its_own_message(token, message):
    with pytest.raises(TokenError) as refused:
        parse_token(token, 100)
    assert str(refused.value) == message


def test_a_token_of_exactly_the_size_limit_is_parsed():
    parsed = parse_token(TOKEN, len(TOKEN))
    assert parsed.header == {"alg": "ES256"} and parsed.signature == b"sig"
    assert parsed.signing_input == f"{HEADER}.e30".encode()
    with pytest.raises(TokenError, match="larger than"):
        parse_token(TOKEN, len(TOKEN) - 1)


@pytest.mark.parametrize("text", ["YQ", "YWI", "YWJj", "_-8", "AAAA_w"])
def test_canonical_base64url_decodes(text):
    assert b64url_decode(text) == base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.parametrize("text", ["YR", "YWJ", "YWK", "Y", "YWJjZ", "YQ==", "Y Q", ""])
def test_every_other_spelling_of_the_same_bytes_is_refused(text):
    # RFC 4648 section 3.5: unused trailing bits must be zero ("YR" and "YQ" would both be "a").
    with pytest.raises(ValueError):
        b64url_decode(text)


@pytest.mark.parametrize("kid", ["k", "k" * 256])
def test_a_kid_of_1_to_256_characters_is_returned(kid):
    assert check_header({"alg": "ES256", "kid": kid}, "ES256") == kid


@pytest.mark.parametrize(
    "header, message",
    [
        ({"alg": "ES256", "kid": ""}, "token 'kid' header is not a short non-empty string"),
        ({"alg": "ES256", "kid": "k" * 257}, "token 'kid' header is not a short non-empty string"),
        ({"alg": "ES256", "kid": 5}, "token 'kid' header is not a short non-empty string"),
        ({"alg": "ES256", "kid": ["k"]}, "token 'kid' header is not a short non-empty string"),
        ({"alg": "ES256", "crit": ["exp"]}, "token has a 'crit' header; no critical extensions are supported"),
        ({"alg": "RS256"}, "token 'alg' header is not the configured algorithm ES256"),
        ({}, "token 'alg' header is not the configured algorithm ES256"),
    ],
)
def test_each_refused_header_gets_its_own_message(header, message):
    with pytest.raises(TokenError) as refused:
        check_header(header, "ES256")
    assert str(refused.value) == message


@given(st.binary(min_size=1, max_size=70))
@example(b"\x00\x00\x17")  # "AAAX": only "=" is stripped
def test_b64url_encode_is_unpadded_url_safe_and_decodes_back(data):
    # fuzz/jwt_front.py builds its tokens with it; the verifier must read what it writes
    # (an empty segment never: the decoder refuses it, no JWT segment is empty).
    text = b64url_encode(data)
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert len(text) == -(-len(data) * 4 // 3)  # no "=" padding
    assert b64url_decode(text) == data
