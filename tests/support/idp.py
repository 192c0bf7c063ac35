"""A throwaway identity provider for black-box tests: an EC P-256 key, its public PEM file
for SERVICE_JWT_PUBKEY, tokens minted by PyJWT (independent of dbsvc's own JWT code), the
environment of a guarded server, and its tenant directory.

    idp = TestIdp(tmp_path)
    server = start_server(schema, idp.data_dir(), idp.server_env())
    headers = {"Authorization": f"Bearer {idp.token()}"}
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ISSUER = "https://id.example.com/"  # the [auth] defaults of schemas/blog.dbs
AUDIENCE = "blog"


class TestIdp:
    """One key, the PEM beside it in `directory`, and the tenant its tokens name."""

    __test__ = False  # not a test class, despite the name

    def __init__(self, directory: Path, tenant: str = "acme") -> None:
        self.directory = Path(directory)
        self.tenant = tenant
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.pem = self.directory / "idp.pem"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pem.write_bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def token(self, **claims: Any) -> str:
        """A valid token for the tenant (5 minutes); `claims` override or, as None, drop."""
        body: dict[str, Any] = {"exp": int(time.time()) + 300, "tenant": self.tenant, "iss": ISSUER, "aud": AUDIENCE}
        body.update(claims)
        return jwt.encode({k: v for k, v in body.items() if v is not None}, self.private, algorithm="ES256")

    def server_env(self, **extra: str) -> dict[str, str]:
        """The guard's variables for a server that trusts this IdP and serves its tenant."""
        return {"SERVICE_JWT_PUBKEY": str(self.pem), "SERVICE_JWT_ALG": "ES256", "SERVICE_TENANT": self.tenant, **extra}

    def data_dir(self, name: str = "data") -> Path:
        """A data directory holding the tenant's (empty) directory, as `tenant create` makes."""
        data = self.directory / name
        (data / self.tenant).mkdir(parents=True, exist_ok=True)
        return data
