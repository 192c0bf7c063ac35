"""First contact (issue 32): the edges a newcomer meets before the first request works.

Each case runs the program as a user does, in a child process, and reads its standard
output, standard error and exit status:

- an interpreter older than 3.11 gets one line and exit 2 from every entry point
  (`dbsvc.py`, `python -m dbsvc`, a built app, a generated module), under every older
  Python pyenv has here;
- `python -I dbsvc.py`, `python -m dbsvc` and `python GENERATED.py --help` work, and a
  generated module refuses arguments it does not know, creating nothing;
- an unknown model's 404 names the models and the close match (one served blog);
- operating-system errors (a port in use, SERVICE_DATA naming a file, a missing schema
  file, `init` into a missing directory) name the setting or argument and the fix, and a
  built app's hints name it as it was run;
- the consistency items: `after=abc` is `bad_query` on every route, 426 is
  `upgrade_required`, a 422 counts "more errors", one token variable, one export summary.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli import clean_env
from support.server import Server, start_server

ROOT = Path(__file__).resolve().parents[1]
BLOG = ROOT / "schemas" / "blog.dbs"
OLD_PYTHONS = ("3.6", "3.7", "3.8", "3.9", "3.10")
TOO_OLD = "dbsvc: error: dbsvc needs Python 3.11 or newer; this is {}\n"


def old_python(version: str) -> str:
    """The interpreter `pythonX.Y`: pyenv's build of it (its shims answer only for the
    versions a directory selects), else one on PATH; or a skip saying it is missing."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for found in sorted(pyenv.glob(f"{version}.*/bin/python{version}")):
        return str(found)
    on_path = shutil.which(f"python{version}")
    if on_path is None or "/shims/" in on_path:
        pytest.skip(f"python{version} is not installed here (pyenv install {version})")
    return on_path


def run(
    command: list[str], cwd: Path | str = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`command` to completion, with the test's environment less SERVICE_*; port 0, so a
    program that wrongly starts to serve binds nothing in use, and the timeout ends it."""
    full = clean_env({"SERVICE_PORT": "0"})
    full.pop("PYTHONPATH", None)
    full.update(env or {})
    return subprocess.run(command, cwd=cwd, env=full, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A built app and a generated module of the blog schema."""
    where = tmp_path_factory.mktemp("first-contact")
    app, module = where / "blog.pyz", where / "blog_service.py"
    for args in (["build", str(BLOG), "-o", str(app)], ["generate", str(BLOG), "-o", str(module)]):
        done = run([sys.executable, str(ROOT / "dbsvc.py"), *args])
        assert done.returncode == 0, done.stderr
    return {"app": app, "module": module}


def version_of(python: str) -> str:
    done = run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
    return done.stdout.strip()


def assert_too_old(done: subprocess.CompletedProcess[str], python: str) -> None:
    assert (done.returncode, done.stdout, done.stderr) == (2, "", TOO_OLD.format(version_of(python)))


# -- item 1: Python 3.10 and older ------------------------------------------------------


@pytest.mark.parametrize("version", OLD_PYTHONS)
def test_old_python_running_the_launcher_gets_one_line_and_exit_2(version, tmp_path):
    python = old_python(version)
    done = run([python, str(ROOT / "dbsvc.py"), "serve", str(BLOG)], cwd=tmp_path)
    assert_too_old(done, python)
    assert list(tmp_path.iterdir()) == []  # no ./data: nothing was touched


@pytest.mark.parametrize("version", OLD_PYTHONS)
def test_old_python_running_python_m_dbsvc_gets_one_line_and_exit_2(version):
    python = old_python(version)
    assert_too_old(run([python, "-m", "dbsvc", "--version"]), python)


@pytest.mark.parametrize("version", OLD_PYTHONS)
def test_old_python_running_a_built_app_gets_one_line_and_exit_2(version, built, tmp_path):
    python = old_python(version)
    assert_too_old(run([python, str(built["app"]), "--version"], cwd=tmp_path), python)


@pytest.mark.parametrize("version", OLD_PYTHONS)
def test_old_python_running_a_generated_module_gets_one_line_and_exit_2(version, built, tmp_path):
    python = old_python(version)
    # no dbsvc importable at all (the usual case: it is installed for 3.11 only), and with it
    for env in ({}, {"PYTHONPATH": str(ROOT)}):
        assert_too_old(run([python, str(built["module"]), "--help"], cwd=tmp_path, env=env), python)


def test_the_check_names_the_version_it_found():
    from dbsvc.launch import too_old

    assert too_old((3, 10, 13, "final", 0)) == "dbsvc: error: dbsvc needs Python 3.11 or newer; this is 3.10.13"
    assert too_old((3, 6, 0)) == "dbsvc: error: dbsvc needs Python 3.11 or newer; this is 3.6.0"
    assert too_old((3, 11, 0)) is None
    assert too_old((4, 0, 0)) is None


# -- item 3: launching --------------------------------------------------------------------


def test_isolated_mode_runs_the_checkouts_launcher(tmp_path):
    done = run([sys.executable, "-I", str(ROOT / "dbsvc.py"), "check", str(BLOG)], cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{BLOG}: ok (3 models)\n"


def test_python_m_dbsvc_runs_the_command_line():
    done = run([sys.executable, "-m", "dbsvc", "check", str(BLOG)])
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{BLOG}: ok (3 models)\n", "")
    helped = run([sys.executable, "-m", "dbsvc", "--help"])
    assert helped.returncode == 0
    assert "serve" in helped.stdout and "export" in helped.stdout


def test_generated_module_help_lists_its_commands_and_creates_nothing(built, tmp_path):
    done = run([sys.executable, str(built["module"]), "--help"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: ")
    for command in ("serve", "tenant", "export", "import", "backup"):
        assert f"    {command}" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_generated_module_refuses_an_unknown_argument_by_name(built, tmp_path):
    done = run([sys.executable, str(built["module"]), "--bogus"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert "unrecognized arguments: --bogus" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_generated_module_refuses_an_unknown_command_by_name(built, tmp_path):
    done = run([sys.executable, str(built["module"]), "srve"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert "invalid choice: 'srve'" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_generated_module_reports_its_version(built, tmp_path):
    done = run([sys.executable, str(built["module"]), "--version"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0
    assert done.stdout.startswith("dbsvc ") and "schema blog.dbs" in done.stdout


# -- a served blog, replication on (items 5 and 8) ------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(BLOG, tmp_path_factory.mktemp("served"))  # blog.dbs: replication on
    try:
        yield server
    finally:
        server.stop()


def test_an_unknown_model_names_the_models_and_the_close_match(served):
    reply = served.get("/api/users")
    assert (reply.status, reply.json["code"]) == (404, "not_found")
    assert reply.json["detail"] == (
        "no model 'users' under /api/: did you mean 'user'? the models are user, blog-post, comment (GET /api/<model>)"
    )


@pytest.mark.parametrize(
    ("path", "guess"), [("/api/BlogPost", "blog-post"), ("/api/blog_post", "blog-post"), ("/api/coment/3", "comment")]
)
def test_an_unknown_model_spelled_as_declared_or_misspelt_is_matched(served, path, guess):
    reply = served.get(path)
    assert reply.status == 404
    assert f"did you mean {guess!r}?" in reply.json["detail"]


def test_an_unknown_model_with_no_close_match_still_lists_the_models(served):
    reply = served.get("/api/zebra")
    assert reply.status == 404
    assert (
        reply.json["detail"]
        == "no model 'zebra' under /api/: the models are user, blog-post, comment (GET /api/<model>)"
    )


def test_replicate_with_a_malformed_after_is_bad_query_as_on_the_feeds(served):
    for path in ("/replicate?after=abc", "/subscribe/user?after=abc", "/live-query/user?after=abc"):
        reply = served.get(path)
        assert (reply.status, reply.json["code"]) == (400, "bad_query"), path
        assert "'abc'" in reply.json["detail"]


def test_a_plain_get_on_a_websocket_route_is_426_upgrade_required(served):
    reply = served.get("/subscribe/user", headers={"Connection": "upgrade", "Upgrade": "websocket"})
    assert (reply.status, reply.json["code"]) == (426, "upgrade_required")
    assert reply.headers["upgrade"] == "websocket"


def test_a_422_counts_the_other_errors_as_errors(served):
    reply = served.post("/api/user", {"a": 1, "b": 2, "c": 3})
    assert reply.status == 422
    assert len(reply.json["errors"]) == 5  # a, b, c unknown; email and name missing
    assert reply.json["detail"].endswith(" (and 4 more errors)")
    one_more = served.post("/api/user", {"email": "a@b.c", "a": 1})
    assert len(one_more.json["errors"]) == 2
    assert one_more.json["detail"].endswith(" (and 1 more error)")


# -- item 8: one variable for the token sent to a primary ------------------------------------


def test_service_token_is_the_token_a_replica_and_replicate_send():
    from dbsvc.config import load_config

    assert load_config({"SERVICE_TOKEN": "a.b.c"}).token == "a.b.c"
    assert load_config({"SERVICE_FOLLOW_TOKEN": " a.b.c "}).token == "a.b.c"  # the alias
    assert load_config({"SERVICE_FOLLOW_TOKEN": "a.b.c", "SERVICE_TOKEN": "a.b.c"}).token == "a.b.c"
    assert load_config({"SERVICE_FOLLOW_TOKEN": "", "SERVICE_TOKEN": ""}).token is None


def test_the_token_and_its_alias_set_to_different_values_are_refused(tmp_path):
    env = {"SERVICE_DATA": str(tmp_path / "data"), "SERVICE_TOKEN": "a.b.c", "SERVICE_FOLLOW_TOKEN": "x.y.z"}
    done = run([sys.executable, str(ROOT / "dbsvc.py"), "serve", str(BLOG), "--follow", "http://127.0.0.1:9"], env=env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "dbsvc: error: SERVICE_TOKEN and SERVICE_FOLLOW_TOKEN (its old name) are both set, to different "
        "tokens: set SERVICE_TOKEN only\n"
    )
    assert not (tmp_path / "data").exists()


def test_export_ends_with_one_summary_line(tmp_path):
    lines = '{"model": "User", "record": {"id": 1, "email": "ann@example.com", "name": "Ann"}}\n'
    (tmp_path / "in.jsonl").write_text(lines, encoding="utf-8")
    env = {"SERVICE_DATA": str(tmp_path / "data"), "SERVICE_TENANT": "t"}
    launcher = [sys.executable, str(ROOT / "dbsvc.py")]
    for args in (["tenant", "create", "t"], ["import", str(BLOG), str(tmp_path / "in.jsonl"), "--quiet"]):
        assert run([*launcher, *args], env=env).returncode == 0
    done = run([*launcher, "export", str(BLOG), "-o", str(tmp_path / "out.jsonl")], env=env)
    assert (done.returncode, done.stdout) == (0, "")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("exported 1 records in ")
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8").count("\n") == 1


# -- item 6: operating-system errors name the setting and the fix ----------------------------


def test_a_port_in_use_is_named_and_creates_no_tenant(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"SERVICE_DATA": str(tmp_path / "data"), "SERVICE_PORT": str(port)}
        done = run([sys.executable, str(ROOT / "dbsvc.py"), "serve", str(BLOG)], env=env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"dbsvc: error: port {port} is in use on 127.0.0.1: set SERVICE_PORT (0 picks a free one)\n"
    assert not (tmp_path / "data").exists()


def test_a_missing_schema_file_is_named_with_the_fix(tmp_path):
    done = run([sys.executable, str(ROOT / "dbsvc.py"), "serve", "nope.dbs"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "dbsvc: error: schema file 'nope.dbs' does not exist: give the path of a .dbs file as SCHEMA "
        "(`dbsvc init NAME` writes a starter one)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_service_data_naming_a_file_is_named_with_the_fix(tmp_path):
    (tmp_path / "afile").write_text("", encoding="utf-8")
    env = {"SERVICE_DATA": str(tmp_path / "afile")}
    expected = (
        f"dbsvc: error: SERVICE_DATA {str(tmp_path / 'afile')!r} is a file, not a directory: "
        "set SERVICE_DATA to a directory (created if missing)\n"
    )
    for args in (["serve", str(BLOG)], ["tenant", "list"], ["tenant", "create", "t"]):
        done = run([sys.executable, str(ROOT / "dbsvc.py"), *args], env=env)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", expected), args
    env = {"SERVICE_DATA": str(tmp_path / "afile" / "below")}
    done = run([sys.executable, str(ROOT / "dbsvc.py"), "tenant", "list"], env=env)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", expected)


def test_init_into_a_missing_directory_is_named_with_the_fix(tmp_path):
    done = run([sys.executable, str(ROOT / "dbsvc.py"), "init", "sub/dir/x"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "dbsvc: error: cannot write 'sub/dir/x.dbs': the directory 'sub/dir' does not exist: "
        "create it first (mkdir -p sub/dir), or give NAME in an existing directory\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["export", "compact", "serve"])
def test_a_built_apps_hints_name_the_app_as_it_was_run(built, tmp_path, command):
    env = {"SERVICE_DATA": str(tmp_path), "SERVICE_TENANT": "ghost"}
    done = run([sys.executable, str(built["app"]), command], env=env)
    assert done.returncode in (1, 2)
    assert f"create it with `{sys.executable} {built['app']} tenant create ghost`" in done.stderr


def test_the_openapi_document_admits_every_error_code_the_service_answers():
    from dbsvc import errors
    from dbsvc.compiler.openapi import build_openapi
    from dbsvc.schema import load_schema

    def subclasses(cls: type) -> list[type]:
        return [cls, *(sub for child in cls.__subclasses__() for sub in subclasses(child))]

    document = build_openapi(load_schema(str(BLOG)))
    enum = set(document["components"]["schemas"]["Problem"]["properties"]["code"]["enum"])
    answered = {cls.code for cls in subclasses(errors.RequestError) if cls is not errors.RequestError}
    assert "upgrade_required" in answered
    assert answered <= enum, sorted(answered - enum)
