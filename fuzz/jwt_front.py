"""Bearer tokens -> the guard's front end: header parsing, JWS splitting, base64url, the
JOSE header and claims JSON, the claim checks.

Modes (first byte):
  header   the rest, latin-1 decoded like every header value, is an `Authorization`
           value for a real `Guard` holding a real ES256 key (`authorize`, as the app
           and the WebSocket routes call it);
  parsed   the rest is a token for the key-free steps alone: `parse_token`,
           `check_header`, and then, as if the signature held, `parse_claims` and
           `check_claims` (so hostile claims are reached without forging a signature);
  signed   the rest is `header JSON \\0 payload JSON`, signed with the guard's real key,
           so a validly signed token with hostile JSON goes through the whole guard.

Invariants: every refusal is a `TokenError` (or the 401/403 `RequestError` `authorize`
makes of it) and renders; accepted claims are a dict with a finite expiry.
"""

from __future__ import annotations

import math

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from dbsvc.auth import AuthConfig, Guard, authorize
from dbsvc.auth.jwt import b64url_encode, check_claims, check_header, parse_claims, parse_token
from dbsvc.errors import RequestError, TokenError
from fuzz.common import pick, render

ALG = "ES256"
ISSUER = "https://id.example.com/"
AUDIENCE = "blog"
NOW = 1_700_000_000.0
_KEY = ec.generate_private_key(ec.SECP256R1())
_PEM = _KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
GUARD = Guard(
    AuthConfig(alg=ALG, tenant="acme", issuer=ISSUER, audience=AUDIENCE, pubkey_pem=_PEM, token_cache_size=64),
    clock=lambda: NOW,
)
MAX_TOKEN = GUARD.config.max_token_bytes


def sign(header: bytes, payload: bytes) -> str:
    """A compact JWS of these exact bytes with the guard's key (raw r||s, RFC 7518 §3.4)."""
    signing_input = f"{b64url_encode(header)}.{b64url_encode(payload)}"
    r, s = decode_dss_signature(_KEY.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{b64url_encode(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _header(rest: bytes) -> None:
    try:
        claims = authorize(GUARD, rest.decode("latin-1"))
    except RequestError as exc:
        render(exc)
        return
    _accepted(claims)


def _parsed(rest: bytes) -> None:
    try:
        parsed = parse_token(rest.decode("latin-1"), MAX_TOKEN)
        check_header(parsed.header, ALG)
        claims = parse_claims(parsed.payload)
        deadline = check_claims(claims, now=NOW, leeway=60, issuer=ISSUER, audience=AUDIENCE)
    except TokenError:
        return
    assert math.isfinite(deadline) and deadline > NOW, deadline


def _signed(rest: bytes) -> None:
    header, _sep, payload = rest.partition(b"\0")
    try:
        claims = authorize(GUARD, token=sign(header, payload))
    except RequestError as exc:
        render(exc)
        return
    _accepted(claims)


def _accepted(claims: dict) -> None:
    assert isinstance(claims, dict)
    expires = GUARD.expires_at(claims)
    assert expires is not None and math.isfinite(expires) and expires > NOW, expires


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    pick(data, (_header, _parsed, _signed))(data[1:])
