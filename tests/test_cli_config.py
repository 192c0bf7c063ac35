"""One command line and one settings reader: every command reads SERVICE_* through
`dbsvc.config.load_config`, so a variable has one default and one check everywhere; the
guard's variables follow one rule (environment over `[auth]` over the default); the app's
parser is the same parser without the SCHEMA arguments; a generated module run as a script
ends through the same error mapping.

Commands run as real subprocesses of `python dbsvc.py` on temporary directories; the
bad-variable cases, twelve calls of one check, run `dbsvc.cli.main` in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbsvc.cli import build_parser
from dbsvc.compiler import compile_schema, generate_source
from dbsvc.config import load_config, zipapp_cache_dir
from dbsvc.errors import ConfigError
from dbsvc.schema import load_schema
from dbsvc.schema.ir import AuthSettings
from support.cli import run_dbsvc

ROOT = Path(__file__).resolve().parents[1]
BLOG = ROOT / "schemas" / "blog.dbs"


def dbsvc(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_dbsvc(*args, cwd=cwd, env=env, timeout=120)


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- the commands


def tenant_commands(tmp_path: Path) -> list[list[str]]:
    records = tmp_path / "records.jsonl"
    records.write_text("")
    return [
        ["compact"],
        ["export", str(BLOG)],
        ["import", str(BLOG), str(records)],
        ["backup", str(tmp_path / "backup")],
        ["serve", str(BLOG)],
    ]


@pytest.mark.parametrize("index", range(5), ids=["compact", "export", "import", "backup", "serve"])
def test_every_tenant_command_refuses_a_bad_tenant_name_alike(tmp_path, index):
    data = tmp_path / "data"
    (data / "acme").mkdir(parents=True)
    before = tree(data)
    command = tenant_commands(tmp_path)[index]
    done = dbsvc(*command, cwd=tmp_path, SERVICE_DATA=str(data), SERVICE_TENANT="../acme", SERVICE_PORT="0")
    assert done.returncode == 2, done
    assert done.stderr == (
        "dbsvc: error: SERVICE_TENANT: invalid tenant name '../acme': expected 1 to 63 "
        "characters of a-z, 0-9, '_' or '-', starting with a letter or digit\n"
    )
    assert tree(data) == before and sorted(p.name for p in data.iterdir()) == ["acme"]
    assert not (tmp_path / "backup").exists()


@pytest.mark.parametrize("index", range(4), ids=["compact", "export", "import", "backup"])
def test_every_tenant_command_finds_its_tenant_the_same_way(tmp_path, index):
    # SERVICE_DATA and SERVICE_TENANT, with one default each: a named tenant that is missing
    # is refused with the command that creates it.
    data = tmp_path / "elsewhere"
    data.mkdir()
    done = dbsvc(*tenant_commands(tmp_path)[index], cwd=tmp_path, SERVICE_DATA=str(data), SERVICE_TENANT="acme")
    assert done.returncode in (1, 2), done
    assert done.stderr.endswith(
        f"tenant 'acme' does not exist under {str(data)!r}: create it with `dbsvc tenant create acme`\n"
    )
    assert list(data.iterdir()) == []


@pytest.fixture
def dbsvc_in_process(monkeypatch, capsys):
    """`dbsvc(...)` as `dbsvc.cli.main` in this process: the same parser, commands and exit
    mapping without a Python start a call. Every SERVICE_* variable is removed, then `env`
    set, as `run_dbsvc` does for a child; the working directory is `cwd`."""
    from dbsvc.cli import main

    def run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        with monkeypatch.context() as patch:
            for name in list(os.environ):
                if name.startswith("SERVICE_"):
                    patch.delenv(name)
            for name, value in env.items():
                patch.setenv(name, value)
            patch.chdir(cwd)
            capsys.readouterr()
            code = main(list(args))
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["dbsvc", *args], code, out, err)

    return run


@pytest.mark.parametrize(
    ("variable", "value"), [("SERVICE_SYNC", "sometimes"), ("SERVICE_PORT", "http"), ("SERVICE_LOG_FORMAT", "xml")]
)
def test_a_bad_variable_is_refused_by_every_command_that_reads_the_environment(
    tmp_path, variable, value, dbsvc_in_process
):
    # In process (12 Python starts fewer): the refusal is load_config's, reached through
    # main() alike by every command; the launcher's status 2 and stderr line for a refused
    # variable are run as subprocesses by the bad-tenant-name cases above.
    for command in (["tenant", "list"], ["compact"], ["backup", str(tmp_path / "backup")]):
        done = dbsvc_in_process(*command, cwd=tmp_path, **{variable: value})
        assert done.returncode == 2, (command, done)
        assert done.stderr.startswith(f"dbsvc: error: {variable}={value!r} is not valid: expected "), command
    assert not (tmp_path / "data").exists() and not (tmp_path / "backup").exists()
    assert dbsvc_in_process("check", str(BLOG), cwd=tmp_path, **{variable: value}).returncode == 0  # reads none


def test_tenant_tools_default_to_data_and_default(tmp_path):
    assert dbsvc("tenant", "create", "default", cwd=tmp_path).returncode == 0
    assert (tmp_path / "data" / "default").is_dir()
    done = dbsvc("compact", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "tenant 'default' has never been opened; nothing to compact\n")


def test_a_generated_module_run_as_a_script_ends_through_the_same_errors(tmp_path):
    script = tmp_path / "blog_service.py"
    script.write_text(generate_source(load_schema(str(BLOG))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(PYTHONPATH=str(ROOT), SERVICE_DATA=str(tmp_path / "data"), SERVICE_MAX_BODY="-1")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr == "dbsvc: error: SERVICE_MAX_BODY='-1' is not valid: expected an integer of at least 1\n"
    assert not (tmp_path / "data").exists()


def test_service_max_body_is_bounded_so_a_record_and_its_previous_fit_a_log_frame(tmp_path):
    # Issue 30 item 2: a 40 MB POST then a 40 MB PATCH made an 80 MB update frame that the
    # next start refused. Half a frame (less the event's head) is the largest value.
    largest = 33_553_920
    assert load_config({"SERVICE_MAX_BODY": str(largest)}).http.max_body == largest
    done = dbsvc("serve", str(BLOG), cwd=tmp_path, SERVICE_MAX_BODY=str(40 << 20), SERVICE_PORT="0")
    assert done.returncode == 2, done
    assert done.stderr == (
        f"dbsvc: error: SERVICE_MAX_BODY='{40 << 20}' is too large: the largest allowed value is {largest} "
        "bytes, because a PUT or PATCH writes one log frame holding the new record and the one it replaces, "
        "and a frame holds at most 67108864 bytes (docs/guide/configuration.md)\n"
    )
    assert not (tmp_path / "data").exists()
    with pytest.raises(ConfigError, match=f"SERVICE_MAX_BODY='{largest + 1}' is too large"):
        load_config({"SERVICE_MAX_BODY": str(largest + 1)})


# ---------------------------------------------------------------- one parser, two shapes


def test_the_apps_parser_has_no_schema_argument_and_no_schema_tools():
    module = compile_schema(load_schema(str(BLOG)))
    app = build_parser(module)
    args = app.parse_args(["export", "User", "-o", "out.jsonl"])
    assert args.module is module and args.models == ["User"] and not hasattr(args, "schema")
    args = app.parse_args(["serve", "--follow", "http://127.0.0.1:1"])
    assert args.follow == "http://127.0.0.1:1" and args.module is module
    for command in (["check", str(BLOG)], ["build", str(BLOG), "-o", "x.pyz"], ["init"], ["generate", str(BLOG)]):
        with pytest.raises(SystemExit) as stopped:
            app.parse_args(command)
        assert stopped.value.code == 2

    cli = build_parser()
    args = cli.parse_args(["export", str(BLOG), "User"])
    assert (args.schema, args.models, args.module) == (str(BLOG), ["User"], None)
    assert cli.parse_args(["build", str(BLOG), "-o", "x.pyz", "--with-guard"]).with_guard is True


# ---------------------------------------------------------------- Config


def test_tokens_are_read_once_with_empty_meaning_unset():
    config = load_config({"SERVICE_FOLLOW_TOKEN": " a.b.c ", "SERVICE_TOKEN": ""})
    assert (config.token, config.auth) == ("a.b.c", None)  # SERVICE_FOLLOW_TOKEN: SERVICE_TOKEN's alias


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"SERVICE_ZIPAPP_CACHE": "/srv/cache", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/srv/cache"),
        ({"SERVICE_ZIPAPP_CACHE": "", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/dbsvc"),
        ({"XDG_CACHE_HOME": "relative", "HOME": "/h"}, "/h/.cache/dbsvc"),  # XDG: relative is ignored
        ({"HOME": "/h"}, "/h/.cache/dbsvc"),
    ],
)
def test_the_zipapp_cache_follows_its_variable_then_xdg_then_home(environ, expected):
    assert zipapp_cache_dir(environ) == expected


def test_without_a_home_the_cache_must_be_named(monkeypatch):
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # no passwd entry either
    with pytest.raises(ConfigError, match="HOME is not set; set SERVICE_ZIPAPP_CACHE"):
        zipapp_cache_dir({})


@pytest.fixture
def pem(tmp_path) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "idp.pem"
    path.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return str(path)


# (AuthConfig field, [auth] key, variable, a schema value, an environment value, the default)
LAYERS = [
    ("alg", "alg", "SERVICE_JWT_ALG", "es256", "ES256", "RS256"),
    ("leeway", "leeway", "SERVICE_JWT_LEEWAY", 0, "7", 60),
    ("tenant_claim", "tenant_claim", "SERVICE_TENANT_CLAIM", "org", "tid", "tenant"),
    ("issuer", "issuer", "SERVICE_JWT_ISSUER", "https://schema/", "https://env/", None),
    ("audience", "audience", "SERVICE_JWT_AUDIENCE", "schema-aud", "env-aud", None),
]


@pytest.mark.parametrize(
    ("field", "key", "variable", "schema_value", "env_value", "default"), LAYERS, ids=[layer[0] for layer in LAYERS]
)
def test_each_guard_setting_is_environment_over_schema_over_default(
    pem, field, key, variable, schema_value, env_value, default
):
    base = {"SERVICE_JWT_PUBKEY": pem, "SERVICE_TENANT": "acme"}
    if field != "alg":
        base["SERVICE_JWT_ALG"] = "ES256"  # the key is EC; RS256 would not fit it

    def read(environ: dict[str, str], auth: AuthSettings) -> object:
        config = load_config(environ, auth=auth)
        assert config.auth is not None and config.tenant == "acme"
        return getattr(config.auth, field)

    if field != "alg":
        assert read(base, AuthSettings()) == default
    schema = AuthSettings(**{key: schema_value})
    from_schema = read(base, schema)
    assert from_schema == ("ES256" if field == "alg" else schema_value)  # 0 is a value, not unset
    assert read({**base, variable: ""}, schema) == from_schema  # empty counts as unset
    expected = int(env_value) if field == "leeway" else env_value
    assert read({**base, variable: env_value}, schema) == expected


def test_a_bad_guard_setting_names_where_it_came_from(pem):
    env = {"SERVICE_JWT_PUBKEY": pem, "SERVICE_TENANT": "acme"}
    with pytest.raises(ConfigError, match=r"^\[auth\] leeway='soon' is not a whole number"):
        load_config(env, auth=AuthSettings(leeway="soon"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^SERVICE_JWT_ALG='HS256' is refused"):
        load_config({**env, "SERVICE_JWT_ALG": "HS256"}, auth=AuthSettings(alg="ES256"))


def test_the_guard_needs_a_tenant_and_checks_its_name_first(pem):
    with pytest.raises(ConfigError, match="SERVICE_TENANT is required when the token guard is on"):
        load_config({"SERVICE_JWT_PUBKEY": pem}, auth=AuthSettings())
    with pytest.raises(ConfigError, match="^SERVICE_TENANT: invalid tenant name"):
        load_config({"SERVICE_JWT_PUBKEY": pem, "SERVICE_TENANT": "a/b"}, auth=AuthSettings())


OTHER_PYTHONS = sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob("versions/3.1[2-9]*/bin/python"))
HELP_SCRIPT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from dbsvc import cli\n"
    "try:\n    cli.main(sys.argv[2:])\nexcept SystemExit:\n    pass\n"
)


def _help(python: str, *words: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run(
        [python, "-c", HELP_SCRIPT, str(ROOT), *words, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout


@pytest.mark.skipif(not OTHER_PYTHONS, reason="no other Python 3.12+ on this machine (pyenv)")
@pytest.mark.parametrize("words", [(), ("serve",), ("tenant",), ("import",)], ids=lambda w: " ".join(w) or "dbsvc")
def test_help_reads_the_same_on_every_python(words):
    """The guide shows `dbsvc --help` as printed; Python 3.13's argparse moved the command
    column, which the top-level parser now pins (cli.py `_CommandsHelp`). The other
    interpreters run the CLI from this checkout with nothing installed (--help needs no
    third-party package)."""
    here = _help(sys.executable, *words)
    assert here.startswith("usage: dbsvc")
    for python in OTHER_PYTHONS:
        assert _help(str(python), *words) == here, python


def test_the_documented_defaults_are_the_ones_in_the_configuration_chapter():
    text = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "configuration.md").read_text()
    for row in (
        "| `SERVICE_HEADER_TIMEOUT` | `10` |",
        "| `SERVICE_IDLE_TIMEOUT` | `60` |",
        "| `SERVICE_SHUTDOWN_TIMEOUT` | `10` |",
        "| `SERVICE_WS_PING_INTERVAL` | `30` |",
        "| `SERVICE_WS_PONG_TIMEOUT` | `30` |",
        "| `SERVICE_WS_CLOSE_TIMEOUT` | `5` |",
    ):
        assert row in text, row


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_close_timeout_must_be_a_positive_number_of_seconds(value):
    with pytest.raises(ConfigError) as refused:
        load_config({"SERVICE_WS_CLOSE_TIMEOUT": value})
    expected = "a positive number of seconds" if value in ("0",) else "a non-negative number of seconds"
    assert str(refused.value) == f"SERVICE_WS_CLOSE_TIMEOUT={value!r} is not valid: expected {expected}"
