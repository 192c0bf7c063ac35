"""Helpers for the guard's tests: keys, tokens minted by PyJWT, hand-forged tokens, a
loopback JWKS server. Nothing here imports dbsvc's own signature code: the tokens the
guard accepts are made by independent code (PyJWT, or `cryptography` directly)."""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt as pyjwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from support.server import Server, start_server

ISSUER = "https://id.example.com/"
AUDIENCE = "blog"
TENANT = "acme"
BLOG = Path(__file__).resolve().parents[2] / "schemas" / "blog.dbs"

HASH = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
EC_OCTETS = {"ES256": 32, "ES384": 48, "ES512": 66}

# The group orders n of SEC 2 v2 sections 2.4.2, 2.5.1 and 2.6.1, written out here rather
# than taken from keys.py: P-521's is 521 bits.
ORDERS = {
    "ES256": int("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", 16),
    "ES384": int(
        "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973", 16
    ),
    "ES512": int(
        "01FF" + "FFFFFFFF" * 7 + "FFFFFFFA" + "51868783BF2F966B7FCC0148F709A5D03BB5C9B8899C47AEBB6FB71E91386409", 16
    ),
}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def public_pem(private: Any) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def certificate_pem(private: Any) -> bytes:
    """A self-signed X.509 certificate of `private`'s public key, valid for a day from now, as
    PEM: what an identity provider may publish in place of a bare public key."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(private, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def public_der(private: Any) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def claims(**overrides: Any) -> dict[str, Any]:
    """Good claims for tenant `acme`; an override of None removes the claim."""
    now = int(time.time())
    body: dict[str, Any] = {
        "sub": "user-1",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "tenant": TENANT,
        "iat": now,
        "exp": now + 300,
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def mint(private: Any, alg: str, kid: str | None = None, headers: dict | None = None, **overrides: Any) -> str:
    """A token minted by PyJWT, the independent implementation."""
    extra = dict(headers or {})
    if kid is not None:
        extra["kid"] = kid
    return pyjwt.encode(claims(**overrides), private, algorithm=alg, headers=extra or None)


def raw_sign(private: Any, alg: str, data: bytes) -> bytes:
    """A JOSE signature of `data` made with `cryptography` directly (RFC 7518 section 3)."""
    if alg.startswith("RS"):
        return private.sign(data, padding.PKCS1v15(), HASH[alg[2:]]())
    if alg.startswith("PS"):
        h = HASH[alg[2:]]
        return private.sign(data, padding.PSS(mgf=padding.MGF1(h()), salt_length=h.digest_size), h())
    if alg.startswith("ES"):
        r, s = decode_dss_signature(private.sign(data, ec.ECDSA(HASH[alg[2:]]())))
        n = EC_OCTETS[alg]
        return r.to_bytes(n, "big") + s.to_bytes(n, "big")
    return private.sign(data)


def forge(
    header: dict | str,
    payload: dict | str,
    signature: bytes | str | None = None,
    private: Any = None,
    alg: str | None = None,
) -> str:
    """A hand-built token. Header and payload may be raw JSON text (for NaN, 1e400 ...).
    With `private`, the signature is a real one over exactly these segments."""
    head = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    body = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    signing_input = f"{b64(head.encode())}.{b64(body.encode())}"
    if private is not None:
        sig = b64(raw_sign(private, alg or json.loads(head)["alg"], signing_input.encode()))
    elif isinstance(signature, bytes):
        sig = b64(signature)
    else:
        sig = signature or ""
    return f"{signing_input}.{sig}"


def jwk_of(private: Any, alg: str | None = None, kid: str | None = None, **extra: Any) -> dict[str, Any]:
    """The public JWK (RFC 7517/7518 section 6, RFC 8037) of `private`'s public key."""
    public = private.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        nums = public.public_numbers()
        size = (nums.n.bit_length() + 7) // 8
        jwk: dict[str, Any] = {
            "kty": "RSA",
            "n": b64(nums.n.to_bytes(size, "big")),
            "e": b64(nums.e.to_bytes(3, "big")),
        }
    elif isinstance(public, ec.EllipticCurvePublicKey):
        crv = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}[public.curve.name]
        n = {"P-256": 32, "P-384": 48, "P-521": 66}[crv]
        nums = public.public_numbers()
        jwk = {"kty": "EC", "crv": crv, "x": b64(nums.x.to_bytes(n, "big")), "y": b64(nums.y.to_bytes(n, "big"))}
    else:
        crv = "Ed25519" if isinstance(public, ed25519.Ed25519PublicKey) else "Ed448"
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        jwk = {"kty": "OKP", "crv": crv, "x": b64(raw)}
    if alg:
        jwk["alg"] = alg
    if kid:
        jwk["kid"] = kid
    jwk.update(extra)
    return jwk


@dataclass
class Reply:
    """What the loopback server answers on a path."""

    status: int = 200
    body: bytes = b'{"keys": []}'
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    content_length: bool = True


class JwksServer:
    """A real `http.server` on 127.0.0.1, port 0, in a thread. `replies[path]` is served;
    `hits[path]` counts requests. Thread-safe enough for the tests (GIL, simple writes)."""

    def __init__(self) -> None:
        self.replies: dict[str, Reply] = {}
        self.hits: dict[str, int] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                reply = owner.replies.get(self.path, Reply(404, b"not found"))
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    if reply.content_length:
                        self.send_header("Content-Length", str(len(reply.body)))
                    else:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(reply.body)
                except OSError:
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str = "/jwks.json") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def serve_keys(self, keys: list[dict], path: str = "/jwks.json", max_age: int | None = None) -> None:
        headers = {"Content-Type": "application/json"}
        if max_age is not None:
            headers["Cache-Control"] = f"public, max-age={max_age}"
        self.replies[path] = Reply(200, json.dumps({"keys": keys}).encode(), headers)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def all_private_keys() -> dict[str, Any]:
    """One private key per algorithm family the guard accepts."""
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        "rsa": rsa_key,
        "rsa_other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa_small": rsa.generate_private_key(public_exponent=65537, key_size=1024),
        "p256": ec.generate_private_key(ec.SECP256R1()),
        "p256_other": ec.generate_private_key(ec.SECP256R1()),
        "p384": ec.generate_private_key(ec.SECP384R1()),
        "p521": ec.generate_private_key(ec.SECP521R1()),
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "ed448": ed448.Ed448PrivateKey.generate(),
    }


# Which key signs which algorithm.
KEY_FOR_ALG = {
    "RS256": "rsa",
    "RS384": "rsa",
    "RS512": "rsa",
    "PS256": "rsa",
    "PS384": "rsa",
    "PS512": "rsa",
    "ES256": "p256",
    "ES384": "p384",
    "ES512": "p521",
    "EdDSA": "ed25519",
}


def serve_jwks_guarded(data: Path, jwks_url: str, log_level: str = "info") -> Server:
    """The blog schema served by a real process for TENANT (created under `data`), its
    guard fetching ES256 keys from `jwks_url` and checking ISSUER and AUDIENCE."""
    (data / TENANT).mkdir(parents=True)
    env = {
        "SERVICE_TENANT": TENANT,
        "SERVICE_JWKS_URL": jwks_url,
        "SERVICE_JWT_ALG": "ES256",
        "SERVICE_JWT_ISSUER": ISSUER,
        "SERVICE_JWT_AUDIENCE": AUDIENCE,
        "RUST_LOG": log_level,
    }
    return start_server(BLOG, data, env=env)
