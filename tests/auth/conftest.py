"""Fixtures for the guard's tests: keys (once per session), guards built through the real
configuration path (`load_auth_config` over an environment dict), a loopback JWKS server."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.auth import Guard, load_auth_config
from dbsvc.schema.ir import AuthSettings
from support.authkit import AUDIENCE, ISSUER, TENANT, JwksServer, all_private_keys, public_pem


@pytest.fixture(scope="session")
def keys() -> dict[str, Any]:
    return all_private_keys()


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch):
    # The loopback JWKS server must be reached directly, whatever the host's proxy setup.
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")


def base_env(alg: str) -> dict[str, str]:
    return {
        "SERVICE_JWT_ALG": alg,
        "SERVICE_TENANT": TENANT,
        "SERVICE_JWT_ISSUER": ISSUER,
        "SERVICE_JWT_AUDIENCE": AUDIENCE,
    }


@pytest.fixture
def make_guard(tmp_path, keys):
    """make_guard(alg, key="rsa" | private key | None, jwks_url=None, env={}, clock=None, **tunables)."""
    built: list[Guard] = []

    def factory(
        alg: str,
        key: Any = None,
        *,
        jwks_url: str | None = None,
        env: dict[str, str] | None = None,
        clock: Callable[[], float] | None = None,
        **tunables: Any,
    ) -> Guard:
        environ = base_env(alg)
        if jwks_url is not None:
            environ["SERVICE_JWKS_URL"] = jwks_url
        else:
            private = keys[key] if isinstance(key, str) else key
            path = tmp_path / f"idp-{len(built)}.pem"
            path.write_bytes(public_pem(private))
            environ["SERVICE_JWT_PUBKEY"] = str(path)
        environ.update(env or {})
        config = load_auth_config(environ, AuthSettings(), str(tmp_path))
        assert config is not None
        if tunables:
            config = dataclasses.replace(config, **tunables)
        guard = Guard(config) if clock is None else Guard(config, clock=clock)
        built.append(guard)
        return guard

    yield factory
    for guard in built:
        guard.close()


@pytest.fixture
def jwks_server():
    server = JwksServer()
    yield server
    server.stop()
