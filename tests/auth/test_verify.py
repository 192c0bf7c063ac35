"""The guard against a PEM key: every algorithm accepted from PyJWT-minted tokens, the
attack corpus refused with 401, tenant problems with 403, the Authorization header forms,
and the verified-token cache."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from dbsvc.auth import ALGORITHMS, token_from_subprotocols, www_authenticate
from dbsvc.auth.keys import VerifyKey
from dbsvc.errors import TokenError
from support.authkit import (
    KEY_FOR_ALG,
    ORDERS,
    TENANT,
    b64,
    certificate_pem,
    claims,
    forge,
    jwk_of,
    mint,
    public_der,
    public_pem,
    raw_sign,
)


def refused(guard, token: str) -> TokenError:
    with pytest.raises(TokenError) as info:
        guard.verify(f"Bearer {token}")
    assert not info.value.forbidden, str(info.value)
    assert info.value.sent
    return info.value


def forbidden(guard, token: str) -> TokenError:
    with pytest.raises(TokenError) as info:
        guard.verify(f"Bearer {token}")
    assert info.value.forbidden, str(info.value)
    return info.value


# -- accepted --------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_pyjwt_tokens_are_accepted_for_every_algorithm(make_guard, keys, alg):
    guard = make_guard(alg, KEY_FOR_ALG[alg])
    token = mint(keys[KEY_FOR_ALG[alg]], alg)
    got = guard.verify(f"Bearer {token}")
    assert got["tenant"] == TENANT and got["sub"] == "user-1"


def test_eddsa_accepts_ed448(make_guard, keys):
    guard = make_guard("EdDSA", "ed448")
    assert guard.verify(f"Bearer {mint(keys['ed448'], 'EdDSA')}")["sub"] == "user-1"


@pytest.mark.parametrize("alg", ["RS256", "ES256", "EdDSA"])
def test_hand_signed_tokens_are_accepted(make_guard, keys, alg):
    guard = make_guard(alg, KEY_FOR_ALG[alg])
    token = forge({"alg": alg, "typ": "JWT"}, claims(), private=keys[KEY_FOR_ALG[alg]])
    assert guard.verify(f"Bearer {token}")["tenant"] == TENANT


def test_audience_list_containing_ours_is_accepted(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    assert guard.verify(f"Bearer {mint(keys['rsa'], 'RS256', aud=['other', 'blog'])}")


def test_expired_within_leeway_is_accepted(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    token = mint(keys["rsa"], "RS256", exp=int(time.time()) - 30, iat=int(time.time()) - 100)
    assert guard.verify(f"Bearer {token}")


def test_certificate_pem_is_accepted(tmp_path, keys):
    from dbsvc.auth import Guard, load_auth_config
    from dbsvc.schema.ir import AuthSettings

    path = tmp_path / "cert.pem"
    path.write_bytes(certificate_pem(keys["p256"]))
    config = load_auth_config(
        {"SERVICE_JWT_PUBKEY": str(path), "SERVICE_JWT_ALG": "ES256", "SERVICE_TENANT": TENANT},
        AuthSettings(),
        str(tmp_path),
    )
    assert Guard(config).verify(f"Bearer {mint(keys['p256'], 'ES256')}")


# -- the attack corpus: 401 ------------------------------------------------------------


def _hs(alg: str, secret: bytes, payload: dict) -> str:
    head = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = b64(json.dumps(payload).encode())
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    sig = hmac.new(secret, f"{head}.{body}".encode(), digest).digest()
    return f"{head}.{body}.{b64(sig)}"


def test_alg_none_is_refused(make_guard):
    guard = make_guard("RS256", "rsa")
    refused(guard, forge({"alg": "none"}, claims(), ""))
    refused(guard, forge({"alg": "none"}, claims(), b"x" * 256))
    refused(guard, forge({"alg": "None"}, claims(), b"x" * 256))


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
@pytest.mark.parametrize("form", ["pem", "der", "jwk"])
def test_hmac_signed_with_the_public_key_is_refused(make_guard, keys, alg, form):
    guard = make_guard("RS256", "rsa")
    secret = {
        "pem": public_pem(keys["rsa"]),
        "der": public_der(keys["rsa"]),
        "jwk": json.dumps(jwk_of(keys["rsa"])).encode(),
    }[form]
    error = refused(guard, _hs(alg, secret, claims()))
    assert "alg" in str(error)


def test_other_algorithm_with_a_valid_signature_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    # A genuine PS256 / RS384 signature by the very key configured: still not RS256.
    refused(guard, mint(keys["rsa"], "PS256"))
    refused(guard, mint(keys["rsa"], "RS384"))


def test_rs_token_against_an_ec_key_is_refused(make_guard, keys):
    guard = make_guard("ES256", "p256")
    refused(guard, mint(keys["rsa"], "RS256"))


def test_es384_token_against_a_p256_guard_is_refused(make_guard, keys):
    guard = make_guard("ES256", "p256")
    refused(guard, mint(keys["p384"], "ES384"))
    # ES384 header over a P-256 signature: the alg is wrong before the key is consulted.
    refused(guard, forge({"alg": "ES384"}, claims(), private=keys["p256"], alg="ES256"))


def test_wrong_key_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    assert "signature" in str(refused(guard, mint(keys["rsa_other"], "RS256")))


@pytest.mark.parametrize("alg,octets", [("ES256", 32), ("ES384", 48), ("ES512", 66)])
def test_ecdsa_signature_of_zeros_is_refused(make_guard, alg, octets):
    guard = make_guard(alg, {"ES256": "p256", "ES384": "p384", "ES512": "p521"}[alg])
    refused(guard, forge({"alg": alg}, claims(), b"\0" * (2 * octets)))


def test_ecdsa_signature_forms(make_guard, keys):
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    guard = make_guard("ES256", "p256")
    order = ORDERS["ES256"]
    head, body, _ = forge({"alg": "ES256"}, claims(), private=keys["p256"]).split(".")
    raw = raw_sign(keys["p256"], "ES256", f"{head}.{body}".encode())
    r, s = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
    good = f"{head}.{body}.{b64(raw)}"
    assert guard.verify(f"Bearer {good}")
    # The malleable twin (r, n - s) is mathematically valid: proof the order constant is right.
    twin = r.to_bytes(32, "big") + (order - s).to_bytes(32, "big")
    assert guard.verify(f"Bearer {head}.{body}.{b64(twin)}")
    bad = {
        "der": encode_dss_signature(r, s),
        "short": raw[:-1],
        "long": raw + b"\0",
        "r_zero": b"\0" * 32 + raw[32:],
        "s_zero": raw[:32] + b"\0" * 32,
        "s_is_order": raw[:32] + order.to_bytes(32, "big"),
        "r_is_order": order.to_bytes(32, "big") + raw[32:],
        "s_plus_order_wraps": raw[:32] + ((s + order) % 2**256).to_bytes(32, "big"),
        "all_ff": b"\xff" * 64,
    }
    for signature in bad.values():
        with pytest.raises(TokenError):
            guard.verify(f"Bearer {head}.{body}.{b64(signature)}")


def test_rsa_signature_of_the_wrong_length_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    head, body, _ = mint(keys["rsa"], "RS256").split(".")
    raw = raw_sign(keys["rsa"], "RS256", f"{head}.{body}".encode())
    longer, shorter = b64(b"\0" + raw), b64(raw[:-1])
    refused(guard, f"{head}.{body}.{longer}")
    refused(guard, f"{head}.{body}.{shorter}")


def test_eddsa_signature_of_the_wrong_length_is_refused(make_guard, keys):
    guard = make_guard("EdDSA", "ed25519")
    head, body, _ = mint(keys["ed25519"], "EdDSA").split(".")
    raw = raw_sign(keys["ed25519"], "EdDSA", f"{head}.{body}".encode())
    longer, shorter = b64(raw + b"\0"), b64(raw[:63])
    refused(guard, f"{head}.{body}.{longer}")
    refused(guard, f"{head}.{body}.{shorter}")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t.rsplit(".", 1)[0],  # two segments
        lambda t: t + ".e30",  # four segments
        lambda t: t + ".a.b",  # five segments (JWE shape)
        lambda t: t[:-10],  # truncated signature
        lambda t: t.replace(".", "..", 1),  # empty segment
        lambda t: t + "=",  # padding
        lambda t: t[:-1] + "!",  # outside the alphabet
        lambda t: t[:-1] + "+",  # plain base64, not base64url
        lambda t: t[:-2] + "\u00e9",  # non-ASCII
        lambda t: "." + t,  # leading dot
        lambda t: "",  # empty
    ],
    ids=["two", "four", "five", "truncated", "empty-seg", "padding", "bang", "plus", "nonascii", "lead", "empty"],
)
def test_malformed_tokens_are_refused(make_guard, keys, mangle):
    guard = make_guard("RS256", "rsa")
    refused(guard, mangle(mint(keys["rsa"], "RS256")))


def test_non_canonical_base64_is_refused(make_guard, keys):
    guard = make_guard("EdDSA", "ed25519")
    token = mint(keys["ed25519"], "EdDSA")
    head, body, sig = token.split(".")
    assert len(sig) % 4 == 2  # 64 bytes -> 86 chars, 4 unused bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet[alphabet.index(sig[-1]) | 1]  # same bytes, a non-zero unused bit
    refused(guard, f"{head}.{body}.{sig[:-1]}{last}")


@pytest.mark.parametrize("header", ["not json", "[]", '"RS256"', '{"alg":"RS256","alg":"RS256"}', '{"alg":"RS256"'])
def test_bad_headers_are_refused(make_guard, keys, header):
    guard = make_guard("RS256", "rsa")
    refused(guard, forge(header, claims(), private=keys["rsa"], alg="RS256"))


@pytest.mark.parametrize("payload", ["not json", "[1]", "null", '{"a":1,"a":2}', b"\xff\xfe".decode("latin-1")])
def test_bad_payloads_are_refused(make_guard, keys, payload):
    guard = make_guard("RS256", "rsa")
    refused(guard, forge({"alg": "RS256"}, payload, private=keys["rsa"]))


def test_expired_beyond_leeway_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    now = int(time.time())
    assert "expired" in str(refused(guard, mint(keys["rsa"], "RS256", exp=now - 61, iat=now - 600)))


def test_leeway_zero_refuses_at_exp(make_guard, keys):
    guard = make_guard("RS256", "rsa", env={"SERVICE_JWT_LEEWAY": "0"})
    refused(guard, mint(keys["rsa"], "RS256", exp=int(time.time()) - 1, iat=None))


def test_nbf_in_the_future_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    now = int(time.time())
    refused(guard, mint(keys["rsa"], "RS256", nbf=now + 120))
    assert guard.verify(f"Bearer {mint(keys['rsa'], 'RS256', nbf=now + 30)}")  # within leeway


def test_iat_in_the_future_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    refused(guard, mint(keys["rsa"], "RS256", iat=int(time.time()) + 3600))


@pytest.mark.parametrize(
    "iss", ["https://evil.example.com/", "https://ID.example.com/", None, 7, ["https://id.example.com/"]]
)
def test_wrong_issuer_is_refused(make_guard, keys, iss):
    guard = make_guard("RS256", "rsa")
    token = forge(
        {"alg": "RS256"}, {k: v for k, v in {**claims(), "iss": iss}.items() if v is not None}, private=keys["rsa"]
    )
    refused(guard, token)


@pytest.mark.parametrize("aud", ["other", ["other", "x"], [], None, 1, ["blog", 2], "Blog"])
def test_wrong_audience_is_refused(make_guard, keys, aud):
    guard = make_guard("RS256", "rsa")
    token = forge(
        {"alg": "RS256"}, {k: v for k, v in {**claims(), "aud": aud}.items() if v is not None}, private=keys["rsa"]
    )
    refused(guard, token)


def test_missing_exp_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    assert "exp" in str(refused(guard, mint(keys["rsa"], "RS256", exp=None)))


@pytest.mark.parametrize("exp", ['"9999999999"', "true", "NaN", "Infinity", "-Infinity", "1e400", "null", "[1]", "{}"])
def test_exp_of_the_wrong_kind_is_refused(make_guard, keys, exp):
    guard = make_guard("RS256", "rsa")
    payload = '{"tenant":"acme","iss":"https://id.example.com/","aud":"blog","exp":' + exp + "}"
    refused(guard, forge({"alg": "RS256"}, payload, private=keys["rsa"]))


def test_huge_integer_exp_does_not_crash(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    payload = '{"tenant":"acme","iss":"https://id.example.com/","aud":"blog","exp":1%s}' % ("0" * 400)
    refused(guard, forge({"alg": "RS256"}, payload, private=keys["rsa"]))


def test_crit_header_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    assert "crit" in str(refused(guard, mint(keys["rsa"], "RS256", headers={"crit": ["exp"]})))
    refused(guard, forge({"alg": "RS256", "b64": False, "crit": ["b64"]}, claims(), private=keys["rsa"]))


def test_oversized_token_is_refused(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    token = mint(keys["rsa"], "RS256", padding="x" * 8192)
    assert len(token) > 8192
    assert "larger" in str(refused(guard, token))


def test_one_megabyte_token_is_refused_before_any_decoding(make_guard, monkeypatch):
    import dbsvc.auth.jwt as jwt_module

    guard = make_guard("RS256", "rsa")

    def boom(*args, **kwargs):
        raise AssertionError("decoded a token that should have been refused by size")

    monkeypatch.setattr(jwt_module, "b64url_decode", boom)
    monkeypatch.setattr(jwt_module.base64, "urlsafe_b64decode", boom)
    big = "eyJ" + "A" * (1 << 20) + ".e30.AAAA"
    # The tripwire above is the proof; how fast the refusal is: bench/auth_bench.py.
    for value in (f"Bearer {big}", big):
        with pytest.raises(TokenError):
            guard.verify(value)
    with pytest.raises(TokenError):
        guard.verify_token(big)


def test_key_bearing_headers_are_never_trusted(make_guard, keys, jwks_server):
    guard = make_guard("RS256", "rsa")
    attacker = keys["rsa_other"]
    jwks_server.serve_keys([jwk_of(attacker, "RS256", "evil")], "/evil.json")
    for header in (
        {"jku": jwks_server.url("/evil.json"), "kid": "evil"},
        {"x5u": jwks_server.url("/evil.json")},
        {"jwk": jwk_of(attacker, "RS256")},
        {"x5c": [b64(public_der(attacker))]},
    ):
        refused(guard, forge({"alg": "RS256", **header}, claims(), private=attacker))
    assert jwks_server.hits == {}
    # A genuine token carrying such headers is judged by the configured key alone.
    assert guard.verify(
        f"Bearer {forge({'alg': 'RS256', 'jku': jwks_server.url('/evil.json')}, claims(), private=keys['rsa'])}"
    )
    assert jwks_server.hits == {}


# -- tenant: 403 -----------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["other", ["acme"], 1, "", "ACME", "Acme", "acme ", {"id": "acme"}, True, None])
def test_tenant_problems_are_403_without_data(make_guard, keys, tenant):
    guard = make_guard("ES256", "p256")
    token = forge({"alg": "ES256"}, claims(tenant=tenant), private=keys["p256"])
    error = forbidden(guard, token)
    assert TENANT not in str(error).lower()  # the served tenant is never revealed
    assert "user-1" not in str(error)


def test_tenant_claim_name_is_configurable(make_guard, keys):
    guard = make_guard("ES256", "p256", env={"SERVICE_TENANT_CLAIM": "org"})
    forbidden(guard, mint(keys["p256"], "ES256"))  # has `tenant`, not `org`
    assert guard.verify(f"Bearer {mint(keys['p256'], 'ES256', org=TENANT)}")


def test_invalid_token_with_wrong_tenant_is_401_not_403(make_guard, keys):
    guard = make_guard("ES256", "p256")
    refused(guard, mint(keys["p256"], "ES256", tenant="other", exp=int(time.time()) - 3600))
    refused(guard, mint(keys["p256_other"], "ES256", tenant="other"))


# -- header forms, challenge, subprotocol ----------------------------------------------


def test_authorization_header_forms(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    token = mint(keys["rsa"], "RS256")
    for value in (f"Bearer {token}", f"bearer {token}", f"BEARER  {token}", f" Bearer {token} "):
        assert guard.verify(value)["tenant"] == TENANT
    for value in (None, "", f"Basic {token}", token, f"Token {token}"):
        with pytest.raises(TokenError) as info:
            guard.verify(value)
        assert not info.value.sent and not info.value.forbidden
        assert www_authenticate(info.value) == 'Bearer realm="dbsvc"'
    with pytest.raises(TokenError) as info:
        guard.verify("Bearer ")
    assert info.value.sent


def test_www_authenticate_values():
    assert www_authenticate(TokenError("x")) == 'Bearer realm="dbsvc", error="invalid_token"'
    assert www_authenticate(TokenError("x", sent=False)) == 'Bearer realm="dbsvc"'


def test_subprotocol_token(make_guard, keys):
    guard = make_guard("RS256", "rsa")
    token = mint(keys["rsa"], "RS256")
    assert token_from_subprotocols(["bearer", f"bearer.{token}"]) == token
    assert token_from_subprotocols(["chat", "bearer"]) is None
    assert guard.verify_token(token_from_subprotocols([f"bearer.{token}"]))["tenant"] == TENANT


def test_expires_at_includes_leeway(make_guard, keys):
    guard = make_guard("RS256", "rsa", env={"SERVICE_JWT_LEEWAY": "5"})
    exp = int(time.time()) + 100
    got = guard.verify(f"Bearer {mint(keys['rsa'], 'RS256', exp=exp)}")
    assert guard.expires_at(got) == exp + 5


# -- the cache -------------------------------------------------------------------------


def test_verified_token_is_cached_and_skips_the_signature(make_guard, keys, monkeypatch):
    guard = make_guard("RS256", "rsa")
    token = mint(keys["rsa"], "RS256")
    first = guard.verify(f"Bearer {token}")
    calls = []
    monkeypatch.setattr(VerifyKey, "verify", lambda _key, *a: calls.append(a) or False)  # every check counted
    assert guard.verify(f"Bearer {token}") is first
    assert calls == []


def test_cached_token_is_refused_once_expired(make_guard, keys):
    now = [time.time()]
    guard = make_guard("RS256", "rsa", env={"SERVICE_JWT_LEEWAY": "0"}, clock=lambda: now[0])
    token = mint(keys["rsa"], "RS256", exp=int(now[0]) + 10)
    assert guard.verify(f"Bearer {token}")
    now[0] += 11
    refused(guard, token)
    assert token not in guard.cached_tokens()


def test_cache_is_bounded(make_guard, keys):
    guard = make_guard("ES256", "p256", token_cache_size=8)
    tokens = [mint(keys["p256"], "ES256", sub=f"u{i}") for i in range(20)]
    for token in tokens:
        guard.verify(f"Bearer {token}")
    assert guard.cached_tokens() == tokens[-8:]  # the last eight, oldest first


def test_refused_tokens_are_not_cached(make_guard, keys):
    guard = make_guard("ES256", "p256")
    forbidden(guard, mint(keys["p256"], "ES256", tenant="other"))
    refused(guard, mint(keys["p256_other"], "ES256"))
    assert guard.cached_tokens() == []


def test_ec_key_curve_must_match_in_config(tmp_path, keys):
    from dbsvc.auth import load_auth_config
    from dbsvc.errors import ConfigError
    from dbsvc.schema.ir import AuthSettings

    path = tmp_path / "k.pem"
    path.write_bytes(public_pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(ConfigError, match="P-384"):
        load_auth_config(
            {"SERVICE_JWT_PUBKEY": str(path), "SERVICE_JWT_ALG": "ES384", "SERVICE_TENANT": "t"},
            AuthSettings(),
            str(tmp_path),
        )


def test_verify_token_none_means_no_token(make_guard):
    guard = make_guard("RS256", "rsa")
    with pytest.raises(TokenError) as info:
        guard.verify_token(None)
    assert not info.value.sent
