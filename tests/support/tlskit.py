"""A self-signed certificate for 127.0.0.1, for the tests that speak TLS on loopback (a
`wss://` replica, `GET /snapshot` over https, the nginx TLS recipe)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(directory: Path, cert_name: str = "cert.pem", key_name: str = "key.pem") -> tuple[Path, Path]:
    """A P-256 certificate for 127.0.0.1 (its subject alternative name) and its key, written
    as PEM into `directory`: (certificate path, key path). It is its own CA (basic
    constraints), so a client may trust it as a store would hold a root (SSL_CERT_FILE), also
    under Python 3.13's strict X.509 checks; valid from 5 minutes ago for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / cert_name, directory / key_name
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
