"""JWS compact serialization and JWT claims: parsing and checks, no cryptography.

Job: turn an untrusted token string into its protected header, the exact signing input
and the signature bytes (RFC 7515 section 7.1), refuse every header this verify-only
service does not understand, and check the registered claims (RFC 7519 section 4.1)
once the signature has been verified. Signature checks live in `keys.py`, the only
module that imports `cryptography`; this one imports nothing but the standard library
and `dbsvc.errors`, so it is safe to import with the guard off.

Invariants:

- Nothing is decoded before the size check: a token over `max_bytes` characters is
  refused by its length alone (a 1 MB token never reaches base64).
- base64url is strict (RFC 7515 section 2, RFC 4648 section 5): no padding, no
  characters outside the URL-safe alphabet, no non-zero unused trailing bits, so every
  byte string has exactly one accepted spelling.
- JSON is strict: UTF-8, an object, no duplicate member names (RFC 7515 section 5.2
  step 4 allows refusing them), no NaN/Infinity, no number that overflows a double.
- No message ever contains token text: errors say what was wrong, never echo values.
- Exceptions from decoders are dropped (`from None`): their context could carry
  fragments of the token into a logged traceback.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from typing import Any

from dbsvc.bodies import BODY_DECODER
from dbsvc.errors import TokenError

_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}

# Header parameters (RFC 7515 section 4.1) that name or carry keys. They are never
# fetched and never trusted: the only keys are the configured PEM key or JWKS URL.
UNTRUSTED_KEY_HEADERS = frozenset({"jku", "jwk", "x5u", "x5c"})


@dataclass(frozen=True, slots=True)
class ParsedToken:
    """A token split and decoded, signature not yet checked.

    `payload` stays raw bytes: claims are parsed only after the signature verifies.
    """

    header: dict[str, Any]
    payload: bytes
    signing_input: bytes
    signature: bytes


def b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url (RFC 7515 section 2). Raises ValueError."""
    if not text or _B64URL.fullmatch(text) is None:
        raise ValueError("not base64url")
    rest = len(text) % 4
    if rest == 1:
        raise ValueError("impossible base64url length")
    # Unused low bits of the last character must be zero (RFC 4648 section 3.5), or
    # several spellings would decode to the same bytes.
    if rest == 2 and _INDEX[text[-1]] & 0x0F:
        raise ValueError("non-canonical base64url")
    if rest == 3 and _INDEX[text[-1]] & 0x03:
        raise ValueError("non-canonical base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def load_json_object(data: bytes) -> dict[str, Any]:
    """A strict JSON object from UTF-8 bytes. Raises ValueError."""
    try:
        value = BODY_DECODER.decode(data.decode("utf-8"))  # finite numbers, each name once
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        raise ValueError("not a JSON object") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def parse_token(token: str, max_bytes: int) -> ParsedToken:
    """Split and decode a compact JWS (RFC 7515 section 7.1). Raises TokenError (401)."""
    if len(token) > max_bytes:
        raise TokenError(f"token is larger than {max_bytes} bytes")
    if not token:
        raise TokenError("token is empty")
    if not token.isascii():
        raise TokenError("token is not a compact JWS: non-ASCII characters")
    parts = token.split(".")
    if len(parts) != 3:
        # Five segments would be a JWE (RFC 7516 section 7.1): not accepted either.
        raise TokenError("token is not a compact JWS: expected three dot-separated segments")
    head, body, sig = parts
    try:
        header_bytes = b64url_decode(head)
        payload = b64url_decode(body)
        signature = b64url_decode(sig)
    except ValueError:
        raise TokenError("token is not a compact JWS: a segment is not base64url") from None
    try:
        header = load_json_object(header_bytes)
    except ValueError:
        raise TokenError("token header is not a JSON object") from None
    signing_input = token[: len(head) + 1 + len(body)].encode("ascii")
    return ParsedToken(header, payload, signing_input, signature)


def check_header(header: dict[str, Any], alg: str) -> str | None:
    """Refuse what this verifier does not accept; return the `kid` (or None).

    - `alg` must equal the configured algorithm exactly (RFC 7515 section 4.1.1; RFC 8725
      section 3.1): this refuses `none`, every HS* and any other algorithm per token.
    - `crit` is refused outright: we implement no extensions, and RFC 7515 section
      4.1.11 says a recipient that does not understand them MUST reject the JWS (this
      also refuses `b64: false`, RFC 7797 section 6).
    - `jku`, `jwk`, `x5u`, `x5c` are ignored (see UNTRUSTED_KEY_HEADERS).
    """
    if header.get("alg") != alg:
        raise TokenError(f"token 'alg' header is not the configured algorithm {alg}")
    if "crit" in header:
        raise TokenError("token has a 'crit' header; no critical extensions are supported")
    kid = header.get("kid")
    if kid is not None and (not isinstance(kid, str) or not kid or len(kid) > 256):
        raise TokenError("token 'kid' header is not a short non-empty string")
    return kid


def parse_claims(payload: bytes) -> dict[str, Any]:
    """The claims set (RFC 7519 section 7.2 step 10): a strict JSON object."""
    try:
        return load_json_object(payload)
    except ValueError:
        raise TokenError("token payload is not a JSON object") from None


def _numeric_date(claims: dict[str, Any], name: str) -> float | None:
    """A NumericDate (RFC 7519 section 2): a finite JSON number, never a bool or string."""
    if name not in claims:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenError(f"token '{name}' claim is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise TokenError(f"token '{name}' claim is out of range") from None
    if not math.isfinite(number):
        raise TokenError(f"token '{name}' claim is out of range")
    return number


def check_claims(
    claims: dict[str, Any], *, now: float, leeway: float, issuer: str | None, audience: str | None
) -> float:
    """Check exp/nbf/iat/iss/aud; return the instant (unix seconds) the token stops
    being accepted, `exp + leeway`. Raises TokenError (401)."""
    # RFC 7519 section 4.1.4: required here, and refused from exp + leeway on.
    exp = _numeric_date(claims, "exp")
    if exp is None:
        raise TokenError("token has no 'exp' claim")
    deadline = exp + leeway
    if now >= deadline:
        raise TokenError("token has expired")
    # RFC 7519 section 4.1.5: not before nbf (minus leeway).
    nbf = _numeric_date(claims, "nbf")
    if nbf is not None and now + leeway < nbf:
        raise TokenError("token is not valid yet ('nbf' is in the future)")
    # RFC 7519 section 4.1.6: a token issued in the future is refused too.
    iat = _numeric_date(claims, "iat")
    if iat is not None and now + leeway < iat:
        raise TokenError("token was issued in the future ('iat')")
    # RFC 7519 section 4.1.1: a case-sensitive string comparison.
    if issuer is not None:
        iss = claims.get("iss")
        if not isinstance(iss, str) or iss != issuer:
            raise TokenError("token issuer ('iss') is not the configured issuer")
    # RFC 7519 section 4.1.3: a string or an array of strings that must contain ours.
    if audience is not None:
        aud = claims.get("aud")
        if isinstance(aud, str):
            ok = aud == audience
        elif isinstance(aud, list) and all(isinstance(a, str) for a in aud):
            ok = audience in aud
        else:
            ok = False
        if not ok:
            raise TokenError("token audience ('aud') does not include the configured audience")
    return deadline
