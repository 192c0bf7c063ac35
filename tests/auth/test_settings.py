"""`load_auth_config`: guard off/on, the environment over `[auth]`, and every refusal at
start-up naming the variable and what it accepts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from dbsvc.auth import AuthConfig, Guard, load_auth_config
from dbsvc.errors import ConfigError
from dbsvc.schema.ir import AuthSettings
from support.authkit import public_pem


@pytest.fixture
def pem_path(tmp_path, keys):
    path = tmp_path / "idp.pem"
    path.write_bytes(public_pem(keys["rsa"]))
    return str(path)


def load(env, auth=None, schema_dir="."):
    return load_auth_config(env, auth or AuthSettings(), schema_dir)


def test_guard_off_without_a_key_source():
    assert load({}) is None
    assert load({"SERVICE_JWT_ALG": "HS256", "SERVICE_JWT_PUBKEY": "  "}) is None  # empty = unset
    assert load({}, AuthSettings(issuer="x", audience="y", alg="RS256")) is None


def test_pem_guard_with_defaults(pem_path):
    config = load({"SERVICE_JWT_PUBKEY": pem_path, "SERVICE_TENANT": "acme"})
    assert isinstance(config, AuthConfig)
    assert (config.alg, config.tenant_claim, config.leeway) == ("RS256", "tenant", 60)
    assert config.issuer is None and config.audience is None and config.jwks_url is None
    assert config.pubkey_pem.startswith(b"-----BEGIN PUBLIC KEY-----")


def test_inline_pem_is_accepted(keys):
    config = load({"SERVICE_JWT_PUBKEY": public_pem(keys["rsa"]).decode(), "SERVICE_TENANT": "acme"})
    assert Guard(config).has_keys


def test_environment_wins_over_auth_table(pem_path, tmp_path, keys):
    other = tmp_path / "es.pem"
    other.write_bytes(public_pem(keys["p256"]))
    auth = AuthSettings(
        issuer="schema-iss", audience="schema-aud", alg="ES256", tenant_claim="org", leeway=5, pubkey=str(other)
    )
    from_schema = load({"SERVICE_TENANT": "acme"}, auth)
    assert (
        from_schema.alg,
        from_schema.issuer,
        from_schema.audience,
        from_schema.tenant_claim,
        from_schema.leeway,
    ) == ("ES256", "schema-iss", "schema-aud", "org", 5)
    env = {
        "SERVICE_TENANT": "acme",
        "SERVICE_JWT_PUBKEY": pem_path,
        "SERVICE_JWT_ALG": "RS256",
        "SERVICE_JWT_ISSUER": "env-iss",
        "SERVICE_JWT_AUDIENCE": "env-aud",
        "SERVICE_TENANT_CLAIM": "tid",
        "SERVICE_JWT_LEEWAY": "0",
    }
    from_env = load(env, auth)
    assert (from_env.alg, from_env.issuer, from_env.audience, from_env.tenant_claim, from_env.leeway) == (
        "RS256",
        "env-iss",
        "env-aud",
        "tid",
        0,
    )
    assert from_env.pubkey_pem == public_pem(keys["rsa"])


def test_env_jwks_replaces_the_schema_pubkey(pem_path):
    config = load(
        {"SERVICE_JWKS_URL": "https://id.example.com/jwks", "SERVICE_TENANT": "t"}, AuthSettings(pubkey=pem_path)
    )
    assert config.jwks_url == "https://id.example.com/jwks" and config.pubkey_pem is None


def test_schema_relative_pubkey(tmp_path, keys):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "idp.pem").write_bytes(public_pem(keys["rsa"]))
    config = load({"SERVICE_TENANT": "t"}, AuthSettings(pubkey="keys/idp.pem"), str(tmp_path))
    assert config.pubkey_pem == public_pem(keys["rsa"])


def test_alg_names_are_canonicalised(pem_path):
    assert load({"SERVICE_JWT_PUBKEY": pem_path, "SERVICE_TENANT": "t", "SERVICE_JWT_ALG": "ps256"}).alg == "PS256"


@pytest.mark.parametrize(
    "env,auth,needle",
    [
        ({"SERVICE_JWT_PUBKEY": "PEM", "SERVICE_JWKS_URL": "https://x/j"}, None, "both set"),
        ({"SERVICE_JWT_PUBKEY": None}, AuthSettings(pubkey="a.pem", jwks_url="https://x/j"), "both set"),
        ({"SERVICE_JWT_ALG": "none"}, None, "SERVICE_JWT_ALG='none' is refused"),
        ({"SERVICE_JWT_ALG": "HS256"}, None, "SERVICE_JWT_ALG='HS256' is refused"),
        ({"SERVICE_JWT_ALG": "hs512"}, None, "refused"),
        ({"SERVICE_JWT_ALG": "RS1"}, None, "not a supported algorithm; accepted: RS256"),
        ({}, AuthSettings(alg="HS256"), "[auth] alg='HS256'"),
        ({"SERVICE_JWT_LEEWAY": "-1"}, None, "SERVICE_JWT_LEEWAY"),
        ({"SERVICE_JWT_LEEWAY": "1.5"}, None, "whole number of seconds"),
        ({"SERVICE_JWT_LEEWAY": "99999"}, None, "SERVICE_JWT_LEEWAY"),
        ({"SERVICE_JWT_LEEWAY": "sixty"}, None, "SERVICE_JWT_LEEWAY"),
        ({"SERVICE_TENANT": None}, None, "SERVICE_TENANT is required"),
        ({"SERVICE_TENANT": ""}, None, "SERVICE_TENANT is required"),
    ],
)
def test_config_refusals(pem_path, env, auth, needle):
    environ = {"SERVICE_JWT_PUBKEY": pem_path, "SERVICE_TENANT": "acme", **env}
    environ = {k: v for k, v in environ.items() if v is not None}
    with pytest.raises(ConfigError) as info:
        load(environ, auth)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "cannot be read"),
        (b"", "not a valid PEM"),
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a valid PEM"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "private key"),
        ("small", "1024 bits is too small"),
        ("ec", "RS256 needs an RSA key, got an EC key"),
    ],
)
def test_bad_pem_files(tmp_path, keys, content, needle):
    path = tmp_path / "k.pem"
    if content == "small":
        path.write_bytes(public_pem(keys["rsa_small"]))
    elif content == "ec":
        path.write_bytes(public_pem(keys["p256"]))
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load({"SERVICE_JWT_PUBKEY": str(path), "SERVICE_TENANT": "t"})
    assert "SERVICE_JWT_PUBKEY" in str(info.value)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "alg,key,needle",
    [
        ("ES256", "rsa", "needs an EC key on P-256"),
        ("ES512", "p384", "needs an EC key on P-521, got an EC key on secp384r1"),
        ("EdDSA", "p256", "Ed25519 or Ed448"),
        ("PS256", "ed25519", "needs an RSA key"),
    ],
)
def test_key_type_must_fit_alg(tmp_path, keys, alg, key, needle):
    path = tmp_path / "k.pem"
    path.write_bytes(public_pem(keys[key]))
    with pytest.raises(ConfigError, match=needle):
        load({"SERVICE_JWT_PUBKEY": str(path), "SERVICE_TENANT": "t", "SERVICE_JWT_ALG": alg})


@pytest.mark.parametrize(
    "url", ["ftp://x/jwks", "file:///etc/passwd", "jwks.json", "https://", "https://u:p@x/j", "http://x:99999/j"]
)
def test_bad_jwks_urls(url):
    with pytest.raises(ConfigError, match="SERVICE_JWKS_URL"):
        load({"SERVICE_JWKS_URL": url, "SERVICE_TENANT": "t"})


def test_rsa_3072_is_fine(tmp_path):
    path = tmp_path / "k.pem"
    path.write_bytes(public_pem(rsa.generate_private_key(public_exponent=65537, key_size=3072)))
    assert load({"SERVICE_JWT_PUBKEY": str(path), "SERVICE_TENANT": "t"})


def test_importing_dbsvc_auth_does_not_import_cryptography():
    code = (
        "import sys, dbsvc.auth\n"
        "from dbsvc.auth import load_auth_config, Guard\n"
        "from dbsvc.schema.ir import AuthSettings\n"
        "assert load_auth_config({}, AuthSettings(), '.') is None\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
