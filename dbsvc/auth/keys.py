"""Verification keys: PEM and JWK loading, key checks, and the signature check per alg.

Job: the only module of dbsvc that imports `cryptography`. It is imported lazily, by
`settings.load_auth_config` and `Guard` when a guard is built, never by `import
dbsvc.auth`. A `VerifyKey` is bound to exactly one algorithm when it is loaded, so the
hot path never consults the token to decide how to verify (RFC 8725 section 3.1).

Checks, done once at load:

- RS*/PS* need an RSA key of at least 2048 bits (RFC 7518 sections 3.3 and 3.5).
- ES256/ES384/ES512 need an EC key on P-256/P-384/P-521 respectively (RFC 7518 section
  3.4); a JWK's `crv` must say so and its `x`/`y` must be full-size coordinates of a
  point on the curve (RFC 7518 section 6.2.1).
- EdDSA needs an Ed25519 or Ed448 key (RFC 8037 section 3.1).
- A JWK must have the right `kty`; `use`, when present, must be `sig`; `key_ops`, when
  present, must contain `verify`; `alg`, when present, must be the configured one
  (RFC 7517 sections 4.2-4.4).

Signature checks, per token:

- RSA: the signature is exactly the modulus length (RFC 8017 section 8.2.2 step 1); PSS
  uses MGF1 with the same hash and a salt as long as the hash (RFC 7518 section 3.5).
- ECDSA: the JOSE form R || S, each exactly the curve's octet length (RFC 7518 section
  3.4), with 0 < r, s < n (FIPS 186-5 section 6.4.2 step 1); a DER signature is refused
  by its length. Only then is it re-encoded as DER for OpenSSL.
- EdDSA: 64 (Ed25519) or 114 (Ed448) octets (RFC 8032 section 5.1.7, 5.2.7).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from dbsvc.auth.jwt import b64url_decode

# (signing input, signature) -> whether the signature is valid: one per key, built at load.
Checker = Callable[[bytes, bytes], bool]

MIN_RSA_BITS = 2048

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}

# alg -> (JWK crv, cryptography curve class, coordinate octets, group order n).
# Orders from SEC 2 v2 sections 2.4.2, 2.5.1 and 2.6.1 (FIPS 186-5 / SP 800-186 D.1.2).
_CURVES: dict[str, tuple[str, type[ec.EllipticCurve], int, int]] = {
    "ES256": ("P-256", ec.SECP256R1, 32, 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551),
    "ES384": (
        "P-384",
        ec.SECP384R1,
        48,
        0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973,
    ),
    "ES512": (
        "P-521",
        ec.SECP521R1,
        66,
        0x01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFA51868783BF2F966B7FCC0148F709A5D03BB5C9B8899C47AEBB6FB71E91386409,
    ),
}

_OKP_SIZES = {"Ed25519": (32, 64), "Ed448": (57, 114)}  # crv -> (key octets, signature octets)


class UnusableKey(ValueError):
    """A key that cannot verify the configured algorithm; the message says why."""


class VerifyKey:
    """A public key bound to one algorithm. `verify` answers True or False, never raises
    for a bad signature. `fingerprint` identifies the key material (for key-set diffs)."""

    __slots__ = ("_check", "alg", "fingerprint", "kid")

    def __init__(self, alg: str, kid: str | None, public: Any) -> None:
        self.alg = alg
        self.kid = kid
        der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.fingerprint = (kid, alg, der)
        family = alg[:2]
        if family in ("RS", "PS"):
            self._check = self._rsa_checker(alg, public)
        elif family == "ES":
            self._check = self._ec_checker(alg, public)
        else:
            self._check = self._okp_checker(public)

    def verify(self, signing_input: bytes, signature: bytes) -> bool:
        return self._check(signing_input, signature)

    @staticmethod
    def _rsa_checker(alg: str, public: rsa.RSAPublicKey) -> Checker:
        hash_cls = _HASHES[alg[2:]]
        size = (public.key_size + 7) // 8
        if alg.startswith("RS"):
            pad: padding.AsymmetricPadding = padding.PKCS1v15()  # RFC 7518 section 3.3
        else:
            pad = padding.PSS(mgf=padding.MGF1(hash_cls()), salt_length=hash_cls().digest_size)

        def check(data: bytes, signature: bytes) -> bool:
            if len(signature) != size:
                return False
            try:
                public.verify(signature, data, pad, hash_cls())
            except InvalidSignature:
                return False
            return True

        return check

    @staticmethod
    def _ec_checker(alg: str, public: ec.EllipticCurvePublicKey) -> Checker:
        _, _, octets, order = _CURVES[alg]
        hash_cls = _HASHES[alg[2:]]

        def check(data: bytes, signature: bytes) -> bool:
            if len(signature) != 2 * octets:
                return False
            r = int.from_bytes(signature[:octets], "big")
            s = int.from_bytes(signature[octets:], "big")
            if not (0 < r < order and 0 < s < order):
                return False
            try:
                public.verify(encode_dss_signature(r, s), data, ec.ECDSA(hash_cls()))
            except InvalidSignature:
                return False
            return True

        return check

    @staticmethod
    def _okp_checker(public: ed25519.Ed25519PublicKey | ed448.Ed448PublicKey) -> Checker:
        size = 64 if isinstance(public, ed25519.Ed25519PublicKey) else 114

        def check(data: bytes, signature: bytes) -> bool:
            if len(signature) != size:
                return False
            try:
                public.verify(signature, data)
            except InvalidSignature:
                return False
            return True

        return check


def check_public_key(public: Any, alg: str) -> None:
    """Refuse a key whose type, curve or size does not fit `alg`. Raises UnusableKey."""
    family = alg[:2]
    if family in ("RS", "PS"):
        if not isinstance(public, rsa.RSAPublicKey):
            raise UnusableKey(f"{alg} needs an RSA key, got {_describe(public)}")
        if public.key_size < MIN_RSA_BITS:
            raise UnusableKey(f"RSA key of {public.key_size} bits is too small; at least {MIN_RSA_BITS} bits required")
    elif family == "ES":
        crv, curve_cls, _, _ = _CURVES[alg]
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise UnusableKey(f"{alg} needs an EC key on {crv}, got {_describe(public)}")
        if not isinstance(public.curve, curve_cls):
            raise UnusableKey(f"{alg} needs an EC key on {crv}, got {_describe(public)}")
    elif alg == "EdDSA":
        if not isinstance(public, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
            raise UnusableKey(f"EdDSA needs an Ed25519 or Ed448 key, got {_describe(public)}")
    else:
        raise UnusableKey(f"algorithm {alg!r} is not supported")


def _describe(public: Any) -> str:
    if isinstance(public, rsa.RSAPublicKey):
        return f"an RSA key of {public.key_size} bits"
    if isinstance(public, ec.EllipticCurvePublicKey):
        return f"an EC key on {public.curve.name}"
    if isinstance(public, ed25519.Ed25519PublicKey):
        return "an Ed25519 key"
    if isinstance(public, ed448.Ed448PublicKey):
        return "an Ed448 key"
    return f"a {type(public).__name__.removeprefix('_')}"


def load_pem_key(data: bytes, alg: str) -> VerifyKey:
    """A PEM public key (SPKI or PKCS#1) or X.509 certificate as a VerifyKey for `alg`."""
    if b"PRIVATE KEY" in data:
        raise UnusableKey("a private key, which this service must never hold; give the public key")
    public: Any
    try:
        if b"-----BEGIN CERTIFICATE-----" in data:
            public = x509.load_pem_x509_certificate(data).public_key()
        else:
            public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise UnusableKey("not a valid PEM public key or certificate") from None
    check_public_key(public, alg)
    return VerifyKey(alg, None, public)


def _b64_member(jwk: Mapping[str, Any], name: str) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise UnusableKey(f"jwk member {name!r} is missing or not a string")
    try:
        return b64url_decode(value)
    except ValueError:
        raise UnusableKey(f"jwk member {name!r} is not base64url") from None


def key_from_jwk(jwk: Mapping[str, Any], alg: str) -> VerifyKey:
    """One JWK (RFC 7517 section 4) as a VerifyKey for `alg`. Raises UnusableKey."""
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise UnusableKey("jwk 'kid' is not a string")
    use = jwk.get("use")
    if use is not None and use != "sig":
        raise UnusableKey(f"jwk 'use' is {use!r}, not 'sig'")
    key_ops = jwk.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise UnusableKey("jwk 'key_ops' does not allow 'verify'")
    jwk_alg = jwk.get("alg")
    if jwk_alg is not None and jwk_alg != alg:
        raise UnusableKey(f"jwk 'alg' is {jwk_alg!r}, not the configured {alg}")
    kty = jwk.get("kty")
    family = alg[:2]
    try:
        if family in ("RS", "PS"):
            if kty != "RSA":
                raise UnusableKey(f"jwk 'kty' is {kty!r}, {alg} needs 'RSA'")
            n = int.from_bytes(_b64_member(jwk, "n"), "big")
            e = int.from_bytes(_b64_member(jwk, "e"), "big")
            public: Any = rsa.RSAPublicNumbers(e, n).public_key()
        elif family == "ES":
            crv, curve_cls, octets, _ = _CURVES[alg]
            if kty != "EC":
                raise UnusableKey(f"jwk 'kty' is {kty!r}, {alg} needs 'EC'")
            if jwk.get("crv") != crv:
                raise UnusableKey(f"jwk 'crv' is {jwk.get('crv')!r}, {alg} needs {crv!r}")
            x, y = _b64_member(jwk, "x"), _b64_member(jwk, "y")
            if len(x) != octets or len(y) != octets:  # RFC 7518 section 6.2.1.2
                raise UnusableKey(f"jwk coordinates are not {octets} octets each")
            numbers = ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"), curve_cls())
            public = numbers.public_key()  # refuses a point off the curve
        elif alg == "EdDSA":
            if kty != "OKP":
                raise UnusableKey(f"jwk 'kty' is {kty!r}, EdDSA needs 'OKP'")
            okp_crv = jwk.get("crv")
            if okp_crv not in _OKP_SIZES:
                raise UnusableKey(f"jwk 'crv' is {okp_crv!r}, EdDSA needs 'Ed25519' or 'Ed448'")
            x = _b64_member(jwk, "x")
            if len(x) != _OKP_SIZES[okp_crv][0]:
                raise UnusableKey(f"jwk 'x' is not {_OKP_SIZES[okp_crv][0]} octets")
            cls = ed25519.Ed25519PublicKey if okp_crv == "Ed25519" else ed448.Ed448PublicKey
            public = cls.from_public_bytes(x)
        else:
            raise UnusableKey(f"algorithm {alg!r} is not supported")
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        if isinstance(exc, UnusableKey):
            raise
        raise UnusableKey("jwk does not describe a valid public key") from None
    check_public_key(public, alg)
    return VerifyKey(alg, kid, public)
