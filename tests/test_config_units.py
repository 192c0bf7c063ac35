"""Every setting of `dbsvc.config` at the unit: its default, its edges (the last value
accepted and the first refused), how it is read (stripped, case, empty as unset) and its
refusal word for word, as docs/guide/configuration.md states them.

A wrong bound silently accepted is a real bug (a server started with a setting its
operator was told it cannot have), so each bound is met from both sides. The expected
texts are literals here, never the module's own constants. No fixture: the mutation
runner (`bench/mutation_inprocess.py`, docs/mutation.md "config.py, storage/tenants.py,
workers/run.py") calls these functions directly; the few that need files make a
temporary directory themselves, removed when the test ends (`with TemporaryDirectory`):
an `atexit` cleanup never ran in a killed run (a mutation runner's timeout), and /tmp
gathered hundreds of them.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from dbsvc.config import check_tenant_name, load_config, zipapp_cache_dir
from dbsvc.errors import ConfigError
from dbsvc.schema.ir import AuthSettings

PEM = (
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


def refusal(environ: dict[str, str], runtime: dict[str, object] | None = None) -> str:
    with pytest.raises(ConfigError) as refused:
        load_config(environ, runtime)
    return str(refused.value)


# --- integers: each bound from both sides, the message naming the variable and the value


@pytest.mark.parametrize(
    "name, lowest, field",
    [
        ("SERVICE_PORT", 0, "port"),
        ("SERVICE_MAX_BODY", 1, "max_body"),
        ("SERVICE_MAX_CONNECTIONS", 1, "max_connections"),
        ("SERVICE_MAX_SOCKETS", 1, "max_sockets"),
        ("SERVICE_MIN_BODY_RATE", 0, "min_body_rate"),
        ("SERVICE_BODY_MEMORY", 1, "body_memory"),
        ("SERVICE_CHANGEFEED_BYTES", 65536, "changefeed_bytes"),
        ("SERVICE_LIST_CACHE_BYTES", 0, "list_cache_bytes"),
    ],
)
def test_each_integer_accepts_its_lowest_value_and_refuses_one_less_by_name(name, lowest, field):
    config = load_config({name: str(lowest)})
    assert getattr(config.http if hasattr(config.http, field) else config, field) == lowest
    bound = "an integer from 0 to 65535" if name == "SERVICE_PORT" else f"an integer of at least {lowest}"
    assert refusal({name: str(lowest - 1)}) == f"{name}='{lowest - 1}' is not valid: expected {bound}"


def test_the_port_accepts_65535_and_refuses_65536_naming_the_range():
    assert load_config({"SERVICE_PORT": "65535"}).http.port == 65535
    assert load_config({"SERVICE_PORT": " 8080 "}).http.port == 8080
    assert (
        refusal({"SERVICE_PORT": "65536"}) == "SERVICE_PORT='65536' is not valid: expected an integer from 0 to 65535"
    )
    assert refusal({"SERVICE_PORT": "http"}) == "SERVICE_PORT='http' is not valid: expected an integer from 0 to 65535"


@pytest.mark.parametrize("raw", ["1.5", "1e3", "0x10", "0b1", "10 20", "-"])
def test_an_integer_is_written_in_decimal_digits_only(raw):
    expected = f"SERVICE_MAX_SOCKETS={raw!r} is not valid: expected an integer of at least 1"
    assert refusal({"SERVICE_MAX_SOCKETS": raw}) == expected


def test_an_empty_integer_is_its_default():
    config = load_config({"SERVICE_PORT": "", "SERVICE_MAX_BODY": "", "SERVICE_CHANGEFEED_BYTES": ""})
    assert (config.http.port, config.http.max_body, config.changefeed_bytes) == (3000, 1048576, 8388608)


def test_the_largest_body_is_33553920_bytes_and_one_more_is_refused_with_the_reason():
    assert load_config({"SERVICE_MAX_BODY": "33553920"}).http.max_body == 33553920
    assert refusal({"SERVICE_MAX_BODY": "33553921"}) == (
        "SERVICE_MAX_BODY='33553921' is too large: the largest allowed value is 33553920 bytes, because a "
        "PUT or PATCH writes one log frame holding the new record and the one it replaces, and a frame "
        "holds at most 67108864 bytes (docs/guide/configuration.md)"
    )
    assert refusal({"SERVICE_MAX_BODY": " 40000000"}).startswith("SERVICE_MAX_BODY=' 40000000' is too large:")


# --- seconds


@pytest.mark.parametrize(
    "name, default",
    [("SERVICE_HEADER_TIMEOUT", 10.0), ("SERVICE_IDLE_TIMEOUT", 60.0), ("SERVICE_SHUTDOWN_TIMEOUT", 10.0)],
)
def test_a_timeout_of_0_turns_it_off_and_a_fraction_is_kept(name, default):
    field = name.removeprefix("SERVICE_").lower()
    assert getattr(load_config({}).http, field) == default
    assert getattr(load_config({name: ""}).http, field) == default
    assert getattr(load_config({name: "0"}).http, field) == 0.0
    assert getattr(load_config({name: " 0.25 "}).http, field) == 0.25


@pytest.mark.parametrize("raw", ["-1", "-0.001", "soon", "nan", "inf", "-inf", "1e999"])
def test_a_timeout_that_is_no_finite_non_negative_number_is_refused(raw):
    expected = f"SERVICE_IDLE_TIMEOUT={raw!r} is not valid: expected a non-negative number of seconds"
    assert refusal({"SERVICE_IDLE_TIMEOUT": raw}) == expected


@pytest.mark.parametrize(
    "name, default",
    [("SERVICE_WS_PING_INTERVAL", 30.0), ("SERVICE_WS_PONG_TIMEOUT", 30.0), ("SERVICE_WS_CLOSE_TIMEOUT", 5.0)],
)
def test_a_websocket_timer_must_be_positive_and_may_be_below_a_second(name, default):
    field = "ws_" + name.removeprefix("SERVICE_WS_").lower()
    assert getattr(load_config({}).http, field) == default
    assert getattr(load_config({name: ""}).http, field) == default
    assert getattr(load_config({name: "0.5"}).http, field) == 0.5
    assert getattr(load_config({name: "1"}).http, field) == 1.0
    assert refusal({name: "0"}) == f"{name}='0' is not valid: expected a positive number of seconds"
    assert refusal({name: "-2"}) == f"{name}='-2' is not valid: expected a non-negative number of seconds"


# --- choices, switches and flags


@pytest.mark.parametrize(
    "name, field, default, values",
    [
        ("SERVICE_SYNC", "sync", "full", ("full", "off")),
        ("SERVICE_LOG_FORMAT", "log_format", "text", ("text", "json")),
        ("SERVICE_HTTP_PARSER", "http_parser", "fast", ("fast", "h11")),
    ],
)
def test_a_choice_is_read_without_case_or_spaces_and_refused_naming_the_choices(name, field, default, values):
    def read(environ: dict[str, str]) -> str:
        config = load_config(environ)
        return getattr(config.http if field == "http_parser" else config, field)

    assert read({}) == default
    assert read({name: ""}) == default
    for value in values:
        assert read({name: value}) == value
        assert read({name: f" {value.upper()} "}) == value
    assert refusal({name: "Sometimes"}) == f"{name}='Sometimes' is not valid: expected one of {', '.join(values)}"


def test_the_documented_choice_refusal_reads_as_in_the_guide():
    assert refusal({"SERVICE_SYNC": "sometimes"}) == "SERVICE_SYNC='sometimes' is not valid: expected one of full, off"


@pytest.mark.parametrize(
    "raw, expected", [(None, None), ("", None), ("on", True), (" ON ", True), ("off", False), ("Off", False)]
)
def test_the_explorer_switch_is_on_off_or_left_to_its_default(raw, expected):
    environ = {} if raw is None else {"SERVICE_EXPLORER": raw}
    assert load_config(environ).explorer is expected


@pytest.mark.parametrize("raw", ["yes", "1", "maybe"])
def test_the_explorer_switch_takes_on_or_off_only(raw):
    assert refusal({"SERVICE_EXPLORER": raw}) == f"SERVICE_EXPLORER={raw!r} is not valid: expected one of on, off"


@pytest.mark.parametrize(
    "raw, expected", [(None, True), ("", True), ("on", True), (" ON ", True), ("off", False), ("Off ", False)]
)
def test_the_huge_pages_switch_is_on_unless_turned_off(raw, expected):
    environ = {} if raw is None else {"SERVICE_HUGE_PAGES": raw}
    assert load_config(environ).huge_pages is expected


@pytest.mark.parametrize("raw", ["no", "0", "madvise", "never"])
def test_the_huge_pages_switch_takes_on_or_off_only(raw):
    assert refusal({"SERVICE_HUGE_PAGES": raw}) == f"SERVICE_HUGE_PAGES={raw!r} is not valid: expected one of on, off"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("", False),
        ("0", False),
        ("off", False),
        ("false", False),
        ("no", False),
        (" OFF ", False),
        ("False", False),
        ("NO", False),
        ("1", True),
        ("on", True),
        ("true", True),
        ("yes", True),
        (" ON ", True),
        ("True", True),
        ("YES", True),
    ],
)
def test_the_rebootstrap_flag_reads_each_spelling_of_yes_and_no(raw, expected):
    assert load_config({"SERVICE_FOLLOW_REBOOTSTRAP": raw}).follow_rebootstrap is expected


def test_the_rebootstrap_flag_is_off_unset_and_refuses_anything_else_by_name():
    assert load_config({}).follow_rebootstrap is False
    assert refusal({"SERVICE_FOLLOW_REBOOTSTRAP": "2"}) == (
        "SERVICE_FOLLOW_REBOOTSTRAP='2': expected 1 or 0 (on/off, true/false, yes/no)"
    )


# --- lists: the allowed hosts and the CORS origins


def test_the_allowed_hosts_are_a_lowercased_comma_list_of_names_domains_addresses_or_a_star():
    config = load_config({"SERVICE_ALLOWED_HOSTS": "API.Example.com, .example.org ,,[::1],127.0.0.1,*, my_host-2 "})
    assert config.http.allowed_hosts == ("api.example.com", ".example.org", "[::1]", "127.0.0.1", "*", "my_host-2")
    assert load_config({}).http.allowed_hosts == ()
    assert load_config({"SERVICE_ALLOWED_HOSTS": " , "}).http.allowed_hosts == ()


@pytest.mark.parametrize("host", ["a b", "ex*ample.com", "[::1]x", "[fe80::1%eth0]", "*.example.com", "example.com:80"])
def test_an_allowed_host_that_is_no_host_name_is_refused_word_for_word(host):
    assert refusal({"SERVICE_ALLOWED_HOSTS": f"ok.example.com,{host}"}) == (
        f"SERVICE_ALLOWED_HOSTS: {host!r} is not a host name: expected a name (example.com), a domain and its "
        "subdomains (.example.com), an IP address ([::1] for IPv6) or *"
    )


def test_the_cors_origins_are_a_comma_list_with_blanks_dropped_and_case_kept():
    config = load_config({"SERVICE_CORS_ORIGINS": " https://App.example.com ,, http://localhost:5173 ,"})
    assert config.http.cors_origins == ("https://App.example.com", "http://localhost:5173")
    assert load_config({}).http.cors_origins == ()
    assert load_config({"SERVICE_CORS_ORIGINS": "*"}).http.cors_origins == ("*",)


# --- the host, the log level, the tenant and the data directory


def test_the_host_and_the_log_level_default_when_unset_or_empty_and_are_kept_as_given():
    plain = load_config({})
    assert (plain.http.host, plain.log_level) == ("127.0.0.1", "info")
    empty = load_config({"SERVICE_HOST": "", "RUST_LOG": ""})
    assert (empty.http.host, empty.log_level) == ("127.0.0.1", "info")
    given = load_config({"SERVICE_HOST": "0.0.0.0", "RUST_LOG": "warn,dbsvc::http=debug"})
    assert (given.http.host, given.log_level) == ("0.0.0.0", "warn,dbsvc::http=debug")


def test_the_tenant_is_default_unless_named_and_a_named_one_is_explicit():
    assert (load_config({}).tenant, load_config({}).tenant_explicit) == ("default", False)
    assert (load_config({"SERVICE_TENANT": ""}).tenant, load_config({"SERVICE_TENANT": ""}).tenant_explicit) == (
        "default",
        False,
    )
    shop = load_config({"SERVICE_TENANT": "shop"})
    assert (shop.tenant, shop.tenant_explicit) == ("shop", True)
    assert load_config({"SERVICE_TENANT": "default"}).tenant_explicit is True


def test_a_tenant_name_that_could_leave_the_data_directory_is_refused_as_the_guide_shows():
    assert refusal({"SERVICE_TENANT": "../etc"}) == (
        "SERVICE_TENANT: invalid tenant name '../etc': expected 1 to 63 characters of a-z, 0-9, '_' or '-', "
        "starting with a letter or digit"
    )


def test_check_tenant_name_names_its_source():
    assert check_tenant_name("shop-1") == "shop-1"
    with pytest.raises(ConfigError) as refused:
        check_tenant_name("A")
    assert str(refused.value).startswith("SERVICE_TENANT: invalid tenant name 'A': expected 1 to 63")
    with pytest.raises(ConfigError) as refused:
        check_tenant_name("a/b", "--tenant")
    assert str(refused.value).startswith("--tenant: invalid tenant name 'a/b': expected 1 to 63")


def test_the_data_directory_is_data_unless_named_and_may_not_exist_yet():
    assert load_config({}).data_dir == "data"
    assert load_config({"SERVICE_DATA": ""}).data_dir == "data"
    with tempfile.TemporaryDirectory(prefix="config-data-") as root:
        assert load_config({"SERVICE_DATA": root}).data_dir == root
        missing = os.path.join(root, "a", "b")
        assert load_config({"SERVICE_DATA": missing}).data_dir == missing


def test_a_file_as_the_data_directory_or_in_place_of_a_parent_is_refused_naming_the_file():
    with tempfile.TemporaryDirectory(prefix="config-data-") as root:
        blocker = os.path.join(root, "notadir")
        with open(blocker, "w"):
            pass
        assert refusal({"SERVICE_DATA": blocker}) == (
            f"SERVICE_DATA {blocker!r} is a file, not a directory: set SERVICE_DATA to a directory (created if missing)"
        )
        under = os.path.join(blocker, "x", "y")
        assert refusal({"SERVICE_DATA": under}) == (
            f"SERVICE_DATA {blocker!r} is a file, not a directory: set SERVICE_DATA to a directory (created if missing)"
        )


# --- tokens


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, None),
        ({"SERVICE_TOKEN": "", "SERVICE_FOLLOW_TOKEN": " "}, None),
        ({"SERVICE_TOKEN": " t.o.k "}, "t.o.k"),
        ({"SERVICE_FOLLOW_TOKEN": "old.name"}, "old.name"),
        ({"SERVICE_TOKEN": "same", "SERVICE_FOLLOW_TOKEN": " same "}, "same"),
        ({"SERVICE_TOKEN": "new", "SERVICE_FOLLOW_TOKEN": ""}, "new"),
    ],
)
def test_the_token_is_service_token_or_its_old_name(environ, expected):
    assert load_config(environ).token == expected


def test_two_different_tokens_under_both_names_are_refused():
    assert refusal({"SERVICE_TOKEN": "a", "SERVICE_FOLLOW_TOKEN": "b"}) == (
        "SERVICE_TOKEN and SERVICE_FOLLOW_TOKEN (its old name) are both set, to different tokens: set SERVICE_TOKEN only"
    )


# --- the schema's [runtime] table


def test_the_runtime_table_defaults_and_its_lowest_values():
    plain = load_config({}, {})
    assert (plain.replication, plain.changefeed_capacity, plain.replication_retain_bytes) == (False, 1024, 0)
    low = load_config({}, {"replication": True, "changefeed_capacity": 1, "replication_retain_mb": 0})
    assert (low.replication, low.changefeed_capacity, low.replication_retain_bytes) == (True, 1, 0)
    assert load_config({}, {"replication": True}).replication_retain_bytes == 256 << 20
    assert load_config({}, {"replication": False, "replication_retain_mb": 5}).replication_retain_bytes == 0
    assert load_config({}, None).changefeed_capacity == 1024


@pytest.mark.parametrize(
    "runtime, expected",
    [
        ({"changefeed_capacity": 0}, "[runtime] changefeed_capacity = 0 is not valid: expected a positive integer"),
        (
            {"changefeed_capacity": True},
            "[runtime] changefeed_capacity = True is not valid: expected a positive integer",
        ),
        ({"changefeed_capacity": "5"}, "[runtime] changefeed_capacity = '5' is not valid: expected a positive integer"),
        ({"changefeed_capacity": 2.0}, "[runtime] changefeed_capacity = 2.0 is not valid: expected a positive integer"),
        (
            {"replication_retain_mb": -1},
            "[runtime] replication_retain_mb = -1 is not valid: expected a non-negative integer",
        ),
        (
            {"replication_retain_mb": False},
            "[runtime] replication_retain_mb = False is not valid: expected a non-negative integer",
        ),
    ],
)
def test_a_bad_runtime_value_is_refused_naming_the_key(runtime, expected):
    assert refusal({}, runtime) == expected


# --- the guard's settings: read only when the schema has an [auth] table


def test_without_an_auth_table_the_guard_is_off_even_with_a_key_set():
    assert load_config({"SERVICE_JWT_PUBKEY": PEM, "SERVICE_TENANT": "acme"}).auth is None


def test_with_an_auth_table_the_guard_reads_the_environment():
    environ = {"SERVICE_JWT_PUBKEY": PEM, "SERVICE_TENANT": "acme", "SERVICE_JWT_ALG": "ES256"}
    guard = load_config(environ, auth=AuthSettings(tenant_claim="org")).auth
    assert guard is not None
    assert (guard.alg, guard.tenant, guard.tenant_claim, guard.pubkey_pem) == (
        "ES256",
        "acme",
        "org",
        PEM.strip().encode(),
    )
    assert load_config({"SERVICE_TENANT": "acme"}, auth=AuthSettings()).auth is None  # no key source: off


def test_a_schema_relative_key_path_resolves_against_the_schema_directory():
    with tempfile.TemporaryDirectory(prefix="config-schema-") as schema_dir:
        with open(os.path.join(schema_dir, "idp-key-for-config-units.pem"), "w") as key:
            key.write(PEM)
        auth = AuthSettings(pubkey="idp-key-for-config-units.pem", alg="ES256")
        guard = load_config({"SERVICE_TENANT": "acme"}, auth=auth, schema_dir=schema_dir).auth
    assert guard is not None and guard.pubkey_pem == PEM.encode()
    with pytest.raises(ConfigError) as refused:
        load_config({"SERVICE_TENANT": "acme"}, auth=auth)  # the default: the working directory
    assert str(refused.value).startswith("[auth] pubkey='idp-key-for-config-units.pem' cannot be read")


# --- where a built app unpacks its packages


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({"SERVICE_ZIPAPP_CACHE": "/srv/cache", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/srv/cache"),
        ({"SERVICE_ZIPAPP_CACHE": " /srv/cache/ ", "HOME": "/h"}, "/srv/cache"),
        ({"SERVICE_ZIPAPP_CACHE": "", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/dbsvc"),
        ({"XDG_CACHE_HOME": " /x ", "HOME": "/h"}, "/x/dbsvc"),
        ({"XDG_CACHE_HOME": "relative", "HOME": "/h"}, "/h/.cache/dbsvc"),
        ({"XDG_CACHE_HOME": "", "HOME": " /h "}, "/h/.cache/dbsvc"),
        ({"HOME": "/h"}, "/h/.cache/dbsvc"),
    ],
)
def test_the_zipapp_cache_is_its_variable_then_xdg_then_home(environ, expected):
    assert zipapp_cache_dir(environ) == expected


def test_a_relative_zipapp_cache_is_made_absolute():
    assert zipapp_cache_dir({"SERVICE_ZIPAPP_CACHE": "cache"}) == os.path.join(os.getcwd(), "cache")


def test_without_home_the_zipapp_cache_is_under_the_users_home_directory():
    assert zipapp_cache_dir({}) == os.path.join(os.path.expanduser("~"), ".cache", "dbsvc")


def test_a_relative_home_cannot_hold_the_zipapp_cache():
    with pytest.raises(ConfigError) as refused:
        zipapp_cache_dir({"HOME": "home/me"})
    assert str(refused.value) == (
        "no cache directory for the app's embedded packages: HOME is not set; set SERVICE_ZIPAPP_CACHE to a "
        "directory only this user can write"
    )


def test_a_relative_data_directory_that_is_a_file_is_named_as_given():
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="config-data-") as root:
        os.chdir(root)
        try:
            with open("notadir", "w"):
                pass
            assert refusal({"SERVICE_DATA": "notadir"}) == (
                "SERVICE_DATA 'notadir' is a file, not a directory: set SERVICE_DATA to a directory (created if missing)"
            )
            assert refusal({"SERVICE_DATA": "notadir/x"}) == (
                f"SERVICE_DATA {os.path.abspath('notadir')!r} is a file, not a directory: set SERVICE_DATA to a "
                "directory (created if missing)"
            )
        finally:
            os.chdir(here)
