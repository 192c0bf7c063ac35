"""auth/settings.py's rules one by one, word for word: each refusal's exact message, each
default, the environment over `[auth]` setting by setting, the edges of the leeway and of a
JWKS URL. Fixture-free (the keys and files are made at import), so the in-process mutation
runner can call them (docs/mutation.md, session 15, wt-mpo5: the module had never been run)."""

from __future__ import annotations

import os
import re
import tempfile

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from dbsvc.auth.settings import (
    ALGORITHMS,
    DEFAULT_LEEWAY,
    MAX_LEEWAY,
    check_jwks_url,
    env_value,
    load_auth_config,
    parse_alg,
    parse_leeway,
    read_pem,
    read_setting,
)
from dbsvc.errors import ConfigError
from dbsvc.schema.ir import AuthSettings

PEM = (
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
)
# A TemporaryDirectory removes itself when the module is unloaded at exit; mkdtemp left one a run.
_KEEP = tempfile.TemporaryDirectory(prefix="dbsvc-settings-units-")
DIR = _KEEP.name
with open(os.path.join(DIR, "idp.pem"), "wb") as _handle:
    _handle.write(PEM)
os.mkdir(os.path.join(DIR, "keys"))
with open(os.path.join(DIR, "keys", "rel.pem"), "wb") as _handle:
    _handle.write(PEM)
ES = {"SERVICE_JWT_ALG": "ES256", "SERVICE_TENANT": "acme"}


def refused(call, *args) -> str:
    with pytest.raises(ConfigError) as caught:
        call(*args)
    return str(caught.value)


# --- env_value: rule 2, an empty or blank variable is unset


def test_a_variable_is_read_stripped_and_blank_is_unset():
    env = {"A": "  x y  ", "B": "   ", "C": ""}
    assert (env_value(env, "A"), env_value(env, "B"), env_value(env, "C"), env_value(env, "D")) == (
        "x y",
        None,
        None,
        None,
    )


# --- read_setting: rule 1, the variable over the [auth] key, setting by setting


def test_a_setting_comes_from_the_variable_first_then_the_auth_table_then_none():
    seen: list[tuple[object, str]] = []

    def parse(value, where):
        seen.append((value, where))
        return f"<{value}>"

    auth = AuthSettings(issuer="from-table", audience="")
    assert read_setting({"SERVICE_JWT_ISSUER": " env "}, auth, "issuer", parse) == "<env>"
    assert read_setting({"SERVICE_JWT_ISSUER": "  "}, auth, "issuer", parse) == "<from-table>"
    assert read_setting({}, auth, "audience", parse) is None  # "" in the table is unset too
    assert read_setting({}, AuthSettings(), "leeway", parse) is None
    assert read_setting({}, AuthSettings(leeway=0), "leeway", parse) == "<0>"  # 0 is a value
    assert seen == [("env", "SERVICE_JWT_ISSUER"), ("from-table", "[auth] issuer"), (0, "[auth] leeway")]


# --- parse_alg: rules 3 and 6


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_every_algorithm_is_taken_in_any_case_and_given_in_its_rfc_spelling(alg):
    assert parse_alg(alg.lower(), "X") == alg
    assert parse_alg(alg.upper(), "X") == alg


ACCEPTED = "RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA"


@pytest.mark.parametrize("alg", ["none", "NONE", "HS256", "hs512", "Hs384", "HSX"])
def test_unsigned_and_hmac_algorithms_are_refused_with_the_reason(alg):
    assert refused(parse_alg, alg, "SERVICE_JWT_ALG") == (
        f"SERVICE_JWT_ALG={alg!r} is refused: unsigned and shared-secret (HMAC) algorithms cannot be "
        f"used by a verify-only service; accepted: {ACCEPTED}"
    )


@pytest.mark.parametrize("alg", ["RS255", "ES256K", "xhs256", "nones", ""])
def test_an_unknown_algorithm_is_refused_with_the_list(alg):
    assert refused(parse_alg, alg, "[auth] alg") == (
        f"[auth] alg={alg!r} is not a supported algorithm; accepted: {ACCEPTED}"
    )


# --- parse_leeway: rule 6


@pytest.mark.parametrize(
    ("value", "seconds"), [("0", 0), ("60", 60), ("3600", 3600), ("000007", 7), (0, 0), (3600, 3600)]
)
def test_a_leeway_is_whole_seconds_from_0_to_3600(value, seconds):
    assert parse_leeway(value, "L") == seconds


@pytest.mark.parametrize("value", ["3601", "999999", "1000000", "-1", "1.5", " 5", "", "x", 3601, -1, True, False])
def test_any_other_leeway_is_refused_naming_the_range(value):
    assert MAX_LEEWAY == 3600
    assert refused(parse_leeway, value, "SERVICE_JWT_LEEWAY") == (
        f"SERVICE_JWT_LEEWAY={str(value) if isinstance(value, bool) else value!r} "
        "is not a whole number of seconds from 0 to 3600"
    )


# --- check_jwks_url: rule 5


@pytest.mark.parametrize("url", ["https://id.example.com/jwks", "http://127.0.0.1:8080/j", "https://h:443/x?y=1"])
def test_an_http_or_https_url_is_kept_as_it_is(url):
    assert check_jwks_url(url, "U") == url


@pytest.mark.parametrize(
    "url", ["ftp://x/jwks", "file:///etc/passwd", "jwks.json", "https://", "HTTPS//x", "https:///j"]
)
def test_a_url_that_is_not_http_is_refused_with_an_example(url):
    assert refused(check_jwks_url, url, "SERVICE_JWKS_URL") == (
        f"SERVICE_JWKS_URL={url!r} is not an http(s) URL; expected e.g. https://id.example.com/.well-known/jwks.json"
    )


@pytest.mark.parametrize("url", ["http://x:99999/j", "https://x:-1/j", "https://x:p/j"])
def test_a_port_out_of_range_is_refused(url):
    assert refused(check_jwks_url, url, "[auth] jwks_url") == f"[auth] jwks_url={url!r} has an invalid port"


@pytest.mark.parametrize("url", ["https://u:p@x/j", "https://u@x/j", "https://:p@x/j"])
def test_credentials_in_the_url_are_refused_a_user_alone_or_a_password_alone_too(url):
    assert refused(check_jwks_url, url, "SERVICE_JWKS_URL") == "SERVICE_JWKS_URL must not carry credentials in the URL"


# --- read_pem: rule 4


def test_inline_pem_is_taken_as_text_with_its_label():
    text = "  \n" + PEM.decode()
    assert read_pem(text, "SERVICE_JWT_PUBKEY", None) == (text.encode(), "SERVICE_JWT_PUBKEY (inline PEM)")


def test_a_pem_path_is_read_with_its_label():
    path = os.path.join(DIR, "idp.pem")
    assert read_pem(path, "SERVICE_JWT_PUBKEY", None) == (PEM, f"SERVICE_JWT_PUBKEY={path!r}")


def test_a_relative_path_is_found_beside_the_schema_only_when_given_a_schema_directory():
    assert read_pem("keys/rel.pem", "[auth] pubkey", DIR) == (PEM, "[auth] pubkey='keys/rel.pem'")
    assert "cannot be read" in refused(read_pem, "keys/rel.pem", "SERVICE_JWT_PUBKEY", None)


def test_an_unreadable_path_is_refused_with_the_cause():
    path = os.path.join(DIR, "missing.pem")
    assert refused(read_pem, path, "SERVICE_JWT_PUBKEY", None) == (
        f"SERVICE_JWT_PUBKEY={path!r} cannot be read (No such file or directory); "
        "expected the path of a PEM public key or certificate"
    )


# --- load_auth_config


def test_no_key_source_is_the_guard_off():
    assert load_auth_config({"SERVICE_TENANT": "acme", "SERVICE_JWT_PUBKEY": " "}, AuthSettings(), DIR) is None
    assert load_auth_config({}, AuthSettings(pubkey="", jwks_url=""), DIR) is None


def test_a_pem_guard_takes_every_default():
    config = load_auth_config({**ES, "SERVICE_JWT_PUBKEY": os.path.join(DIR, "idp.pem")}, AuthSettings(), DIR)
    assert config is not None
    assert (config.alg, config.tenant, config.tenant_claim, config.leeway) == (
        "ES256",
        "acme",
        "tenant",
        DEFAULT_LEEWAY,
    )
    assert (config.issuer, config.audience, config.jwks_url) == (None, None, None)
    assert (config.pubkey_pem, config.pubkey_source) == (PEM, f"SERVICE_JWT_PUBKEY={os.path.join(DIR, 'idp.pem')!r}")


def test_a_jwks_guard_keeps_its_url_and_reads_no_pem():
    config = load_auth_config({"SERVICE_TENANT": "t", "SERVICE_JWKS_URL": "https://id/j"}, AuthSettings(), DIR)
    assert config is not None
    assert (config.alg, config.jwks_url, config.pubkey_pem, config.pubkey_source) == (
        "RS256",
        "https://id/j",
        None,
        None,
    )


def test_the_auth_table_gives_every_setting_when_the_environment_is_silent():
    auth = AuthSettings(pubkey="keys/rel.pem", alg="es256", leeway=0, tenant_claim="org", issuer="iss", audience="aud")
    config = load_auth_config({"SERVICE_TENANT": "acme"}, auth, DIR)
    assert config is not None
    assert (config.alg, config.leeway, config.tenant_claim, config.issuer, config.audience) == (
        "ES256",
        0,
        "org",
        "iss",
        "aud",
    )
    assert config.pubkey_source == "[auth] pubkey='keys/rel.pem'"


def test_the_environments_key_source_replaces_the_tables_whole():
    auth = AuthSettings(pubkey="keys/rel.pem", jwks_url="https://table/j")  # both: refused if used
    config = load_auth_config({"SERVICE_TENANT": "t", "SERVICE_JWKS_URL": "https://env/j"}, auth, DIR)
    assert config is not None and (config.jwks_url, config.pubkey_pem) == ("https://env/j", None)
    assert refused(load_auth_config, {"SERVICE_TENANT": "t"}, auth, DIR) == (
        "[auth] pubkey and [auth] jwks_url are both set; set exactly one "
        "(or override with SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL)"
    )


def test_both_key_variables_are_refused():
    env = {"SERVICE_TENANT": "t", "SERVICE_JWKS_URL": "https://x/j", "SERVICE_JWT_PUBKEY": os.path.join(DIR, "idp.pem")}
    assert refused(load_auth_config, env, AuthSettings(), DIR) == (
        "SERVICE_JWT_PUBKEY and SERVICE_JWKS_URL are both set; set exactly one: "
        "a PEM public key (or certificate) path, or a JWKS URL"
    )


def test_the_guard_needs_a_tenant():
    for env in ({"SERVICE_JWKS_URL": "https://x/j"}, {"SERVICE_JWKS_URL": "https://x/j", "SERVICE_TENANT": " "}):
        assert refused(load_auth_config, env, AuthSettings(), DIR) == (
            "SERVICE_TENANT is required when the token guard is on (SERVICE_JWT_PUBKEY or "
            "SERVICE_JWKS_URL is set); set it to the tenant this process serves"
        )


def test_the_tables_jwks_url_is_checked_under_its_own_name():
    message = refused(load_auth_config, {"SERVICE_TENANT": "t"}, AuthSettings(jwks_url="ftp://x/j"), DIR)
    assert message.startswith("[auth] jwks_url='ftp://x/j' is not an http(s) URL")


def test_a_key_that_does_not_fit_the_algorithm_is_refused_naming_its_source():
    path = os.path.join(DIR, "idp.pem")
    message = refused(load_auth_config, {"SERVICE_TENANT": "t", "SERVICE_JWT_PUBKEY": path}, AuthSettings(), DIR)
    assert re.fullmatch(
        rf"SERVICE_JWT_PUBKEY={re.escape(repr(path))}: .*; expected a PEM public key or certificate usable with RS256",
        message,
    ), message


# --- what the first mutation run of the module left (docs/mutation.md, session 15, wt-mpo5)


def test_inline_pem_with_a_character_past_ascii_is_read_with_it_replaced_not_raised():
    text = PEM.decode().replace("-----END", "é-----END")
    assert read_pem(text, "SERVICE_JWT_PUBKEY", None)[0] == PEM.replace(b"-----END", b"?-----END")
    message = refused(
        load_auth_config,
        {"SERVICE_TENANT": "t", "SERVICE_JWT_ALG": "ES256", "SERVICE_JWT_PUBKEY": text},
        AuthSettings(),
        DIR,
    )
    assert message.startswith("SERVICE_JWT_PUBKEY (inline PEM): ")


def test_a_pem_file_is_read_up_to_one_mebibyte():
    path = os.path.join(DIR, "huge.pem")
    with open(path, "wb") as handle:
        handle.write(PEM + b"\n" * ((2 << 20) + 1 - len(PEM)))
    data, _label = read_pem(path, "SERVICE_JWT_PUBKEY", None)
    assert len(data) == 1 << 20 and data.startswith(PEM)


def test_a_bad_jwks_url_in_the_environment_is_named_by_its_variable():
    env = {"SERVICE_TENANT": "t", "SERVICE_JWKS_URL": "ftp://x/j"}
    assert refused(load_auth_config, env, AuthSettings(pubkey="keys/rel.pem"), DIR) == (
        "SERVICE_JWKS_URL='ftp://x/j' is not an http(s) URL; expected e.g. https://id.example.com/.well-known/jwks.json"
    )


@pytest.mark.parametrize(
    ("env", "auth", "setting"),
    [
        ({"SERVICE_JWT_PUBKEY": os.path.join(DIR, "idp.pem")}, AuthSettings(), "SERVICE_JWT_PUBKEY"),
        ({}, AuthSettings(pubkey="keys/rel.pem"), "[auth] pubkey"),
        ({"SERVICE_JWKS_URL": "https://x/j"}, AuthSettings(), "SERVICE_JWKS_URL"),
        ({}, AuthSettings(jwks_url="https://x/j"), "[auth] jwks_url"),
    ],
)
def test_a_guard_without_cryptography_is_refused_naming_the_setting_that_asked_for_it(env, auth, setting):
    import sys

    saved = sys.modules.get("cryptography")
    sys.modules["cryptography"] = None  # type: ignore[assignment]  # find_spec: not installed
    try:
        message = refused(load_auth_config, {"SERVICE_TENANT": "t", "SERVICE_JWT_ALG": "ES256", **env}, auth, DIR)
    finally:
        if saved is None:
            del sys.modules["cryptography"]
        else:
            sys.modules["cryptography"] = saved
    assert message.startswith(f"{setting} is set but the 'cryptography' package is not installed: ")
