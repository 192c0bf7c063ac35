"""The guard's configuration: environment variables over the schema's `[auth]` table.

Job: turn `SERVICE_JWT_*`, `SERVICE_JWKS_URL`, `SERVICE_TENANT_CLAIM` and `SERVICE_TENANT`
(docs/guide/auth.md) plus the `[auth]` defaults into one frozen `AuthConfig`, or None
when no key source is configured (the guard is off). Every unusable value is a
`ConfigError` that names the variable and says what it accepts, so the server refuses
to start instead of serving with a guard that cannot work.

Rules:

1. The environment wins over `[auth]`, variable by variable. The key source is one unit:
   when the environment names a key (`SERVICE_JWT_PUBKEY` or `SERVICE_JWKS_URL`), the
   schema's `pubkey`/`jwks_url` are ignored. Both sources set in the same place: refused.
2. An empty variable counts as unset (so `SERVICE_JWT_PUBKEY=` cannot switch a schema's
   guard off).
3. Only asymmetric JWS algorithms are accepted (RFC 7518 section 3.1): `none` and every
   HS* are refused here and, again, per token (RFC 8725 section 3.1).
4. `SERVICE_JWT_PUBKEY` is a path to a PEM public key or certificate, or the PEM text
   itself. The key is loaded here once to fail fast (type, curve, RSA size >= 2048 bits);
   that is the only point where this module reaches `cryptography`, lazily, and only when
   the guard is on. Importing this module never imports `cryptography`; a guard without
   it is refused here, for either key source, with the fix (`dbsvc.deps`).
5. `SERVICE_JWKS_URL` must be http(s) without credentials; plain http is accepted (a
   sidecar or loopback IdP) and logged as a warning when the host is not loopback.
6. `SERVICE_JWT_LEEWAY` is whole seconds from 0 to 3600; `SERVICE_JWT_ALG` is matched
   without regard to case and stored in its RFC spelling (`ps256` -> `PS256`).
7. When `SERVICE_JWT_AUDIENCE` is unset the `aud` claim is not checked; set it whenever
   the IdP issues tokens for more than one service (RFC 7519 section 4.1.3).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from dbsvc.deps import require_guard_package
from dbsvc.errors import ConfigError
from dbsvc.schema.ir import AuthSettings

# RFC 7518 section 3.1 (RS*, PS*, ES*) and RFC 8037 section 3.1 (EdDSA).
ALGORITHMS: tuple[str, ...] = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_CANONICAL = {name.lower(): name for name in ALGORITHMS}

DEFAULT_ALG = "RS256"
DEFAULT_TENANT_CLAIM = "tenant"
DEFAULT_LEEWAY = 60
MAX_LEEWAY = 3600
MAX_TOKEN_BYTES = 8192


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Everything the guard needs. Exactly one of `pubkey_pem` / `jwks_url` is set.

    The last group of fields are the guard's tunables; their defaults are the documented
    behaviour and tests shorten them (`dataclasses.replace`) instead of sleeping.
    """

    alg: str
    tenant: str
    tenant_claim: str = DEFAULT_TENANT_CLAIM
    leeway: int = DEFAULT_LEEWAY
    issuer: str | None = None
    audience: str | None = None
    pubkey_pem: bytes | None = None
    pubkey_source: str | None = None  # where the PEM came from, for messages
    jwks_url: str | None = None
    max_token_bytes: int = MAX_TOKEN_BYTES
    token_cache_size: int = 4096
    jwks_timeout: float = 2.0  # seconds, whole fetch
    jwks_max_bytes: int = 1 << 20  # response body cap
    # At most one fetch per interval: a token with an unknown `kid` (a key the IdP just
    # rotated in, or a random one) fetches at most this often, so a new key is accepted
    # within 10 s and a flood of random kids costs the IdP 6 requests a minute.
    jwks_min_interval: float = 10.0
    jwks_default_max_age: float = 300.0  # when the response has no max-age
    jwks_max_max_age: float = 86400.0  # a huge max-age is clamped to this


# The variable that overrides each `[auth]` key (rule 1).
VARIABLES = {
    "alg": "SERVICE_JWT_ALG",
    "leeway": "SERVICE_JWT_LEEWAY",
    "tenant_claim": "SERVICE_TENANT_CLAIM",
    "issuer": "SERVICE_JWT_ISSUER",
    "audience": "SERVICE_JWT_AUDIENCE",
}

T = TypeVar("T")


def env_value(environ: Mapping[str, str], name: str) -> str | None:
    """Rule 2: the variable's value stripped, None when it is unset, empty or blank. Public,
    as each rule's own step below is, so that each rule is tested alone, word for word."""
    value = environ.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _text(value: str, name: str) -> str:
    return value


def read_setting(
    environ: Mapping[str, str], schema_auth: AuthSettings, key: str, parse: Callable[[Any, str], T]
) -> T | None:
    """Rules 1 and 2 for one setting: the variable's value, else the `[auth]` key's, else
    None (the caller's default); `parse(value, where)` names the one that was wrong. Public
    for the rule's own test, as `env_value` is."""
    variable = VARIABLES[key]
    raw = env_value(environ, variable)
    if raw is not None:
        return parse(raw, variable)
    value = getattr(schema_auth, key)
    if value is None or value == "":
        return None
    return parse(value, f"[auth] {key}")


def parse_alg(value: str, name: str) -> str:
    """Canonical JWS `alg` name for `value`, or ConfigError naming `name`."""
    canonical = _CANONICAL.get(value.lower())
    if canonical is not None:
        return canonical
    accepted = ", ".join(ALGORITHMS)
    if value.lower() == "none" or value.upper().startswith("HS"):
        raise ConfigError(
            f"{name}={value!r} is refused: unsigned and shared-secret (HMAC) algorithms "
            f"cannot be used by a verify-only service; accepted: {accepted}"
        )
    raise ConfigError(f"{name}={value!r} is not a supported algorithm; accepted: {accepted}")


def parse_leeway(value: str | int, name: str) -> int:
    """Leeway in whole seconds, 0 to MAX_LEEWAY."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        number = value
    elif re.fullmatch(r"[0-9]{1,6}", value):
        number = int(value)
    else:
        raise ConfigError(f"{name}={value!r} is not a whole number of seconds from 0 to {MAX_LEEWAY}")
    if not 0 <= number <= MAX_LEEWAY:
        raise ConfigError(f"{name}={value!r} is not a whole number of seconds from 0 to {MAX_LEEWAY}")
    return number


def check_jwks_url(url: str, name: str) -> str:
    """Rule 5: `url` when it is http(s) with a host, a valid port and no credentials, else
    ConfigError naming `name`. Public, as `parse_alg` is, for the rule's own test."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{name}={url!r} is not an http(s) URL; expected e.g. https://id.example.com/.well-known/jwks.json"
        )
    try:
        _ = parts.port  # raises for a port out of range
    except ValueError:
        raise ConfigError(f"{name}={url!r} has an invalid port") from None
    if parts.username or parts.password:
        raise ConfigError(f"{name} must not carry credentials in the URL")
    return url


def read_pem(value: str, name: str, schema_relative: str | None) -> tuple[bytes, str]:
    """Rule 4's read: the PEM bytes named by `value` (a path, or the PEM text itself) and a
    label; a relative path is looked for beside the schema (`schema_relative`) too. Public,
    as `parse_alg` is, for the rule's own test (the key it holds is checked afterwards)."""
    if value.lstrip().startswith("-----BEGIN"):
        return value.encode("ascii", "replace"), f"{name} (inline PEM)"
    path = value
    if schema_relative is not None and not os.path.isabs(path) and not os.path.exists(path):
        # The schema parser resolves `pubkey` against the schema's directory already; an
        # [auth] table built some other way may still hold a schema-relative path.
        candidate = os.path.join(schema_relative, path)
        if os.path.exists(candidate):
            path = candidate
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except OSError as exc:
        raise ConfigError(
            f"{name}={value!r} cannot be read ({exc.strerror or exc}); expected the path of a PEM "
            f"public key or certificate"
        ) from exc
    return data, f"{name}={value!r}"


def load_auth_config(environ: Mapping[str, str], schema_auth: AuthSettings, schema_dir: str) -> AuthConfig | None:
    """The guard configuration, or None when no key source is set (guard off).

    Raises ConfigError, naming the variable and what it accepts, for: both key sources,
    an algorithm that is none/HS*/unknown, a bad leeway, SERVICE_TENANT unset, an
    unreadable or invalid PEM, an RSA key under 2048 bits, a key that does not fit the
    algorithm, or a JWKS URL that is not http(s).
    """
    env_pub = env_value(environ, "SERVICE_JWT_PUBKEY")
    env_jwks = env_value(environ, "SERVICE_JWKS_URL")
    if env_pub and env_jwks:
        raise ConfigError(
            "SERVICE_JWT_PUBKEY and SERVICE_JWKS_URL are both set; set exactly one: "
            "a PEM public key (or certificate) path, or a JWKS URL"
        )
    pub_name, jwks_name = "SERVICE_JWT_PUBKEY", "SERVICE_JWKS_URL"
    pubkey, jwks_url, relative_to = env_pub, env_jwks, None
    if not (env_pub or env_jwks):
        pubkey = schema_auth.pubkey or None
        jwks_url = schema_auth.jwks_url or None
        pub_name, jwks_name, relative_to = "[auth] pubkey", "[auth] jwks_url", schema_dir
        if pubkey and jwks_url:
            raise ConfigError(
                "[auth] pubkey and [auth] jwks_url are both set; set exactly one "
                "(or override with SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL)"
            )
    if not (pubkey or jwks_url):
        return None

    alg = read_setting(environ, schema_auth, "alg", parse_alg) or DEFAULT_ALG
    leeway = read_setting(environ, schema_auth, "leeway", parse_leeway)
    tenant = env_value(environ, "SERVICE_TENANT")  # its name passed dbsvc.config's check
    if tenant is None:
        raise ConfigError(
            "SERVICE_TENANT is required when the token guard is on (SERVICE_JWT_PUBKEY or "
            "SERVICE_JWKS_URL is set); set it to the tenant this process serves"
        )
    pem: bytes | None = None
    source: str | None = None
    if pubkey:
        pem, source = read_pem(pubkey, pub_name, relative_to)
        require_guard_package(pub_name)
        from dbsvc.auth.keys import UnusableKey, load_pem_key  # imports cryptography

        try:
            load_pem_key(pem, alg)
        except UnusableKey as exc:
            raise ConfigError(f"{source}: {exc}; expected a PEM public key or certificate usable with {alg}") from None
    else:
        assert jwks_url is not None
        jwks_url = check_jwks_url(jwks_url, jwks_name)
        require_guard_package(jwks_name)

    return AuthConfig(
        alg=alg,
        tenant=tenant,
        tenant_claim=read_setting(environ, schema_auth, "tenant_claim", _text) or DEFAULT_TENANT_CLAIM,
        leeway=DEFAULT_LEEWAY if leeway is None else leeway,
        issuer=read_setting(environ, schema_auth, "issuer", _text),
        audience=read_setting(environ, schema_auth, "audience", _text),
        pubkey_pem=pem,
        pubkey_source=source,
        jwks_url=jwks_url,
    )
