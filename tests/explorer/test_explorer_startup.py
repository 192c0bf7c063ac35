"""The first minutes: a missing package is one clear line, `dbsvc init` writes a schema that
checks and serves, `serve` prints where to go, and a `dbsvc build` zipapp carries the page.

The missing-package runs use a fresh virtual environment with no packages at all
(`python -m venv --without-pip`), running `dbsvc.py` from the checkout with `-E -s` (no
PYTHON* variables, no user site): the checkout's `dbsvc` is importable (the script's own
directory), `h11`, `wsproto` and `cryptography` are not, unless a test copies them in.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbsvc.build import build_zipapp
from dbsvc.explorer.page import ASSETS
from dbsvc.schema import load_schema
from support.idp import TestIdp
from support.server import ROOT, start_server

BLOG = ROOT / "schemas" / "blog.dbs"
LAUNCHER = ROOT / "dbsvc.py"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "PYTHON")) and k != "RUST_LOG"}
    env.update(extra)
    return env


def make_venv(directory: Path, *packages: str) -> Path:
    """The interpreter of a new virtual environment holding only `packages`, copied from this
    one (pure Python, as `dbsvc build` copies them)."""
    venv = directory / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-E", "-s", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name in packages:
        shutil.copytree(Path(importlib.util.find_spec(name).origin).parent, Path(purelib) / name)
    return python


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """The interpreter of a virtual environment holding no package at all."""
    python = make_venv(tmp_path_factory.mktemp("bare"))
    probe = subprocess.run([str(python), "-E", "-s", "-c", "import h11"], capture_output=True, text=True)
    assert probe.returncode != 0, "the bare environment can import h11"
    return python


def run_bare(python: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-E", "-s", str(LAUNCHER), *args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_without_h11_is_one_line_with_the_fix_and_exit_2(bare_python, tmp_path):
    data = tmp_path / "data"
    run = run_bare(bare_python, "serve", str(BLOG), cwd=tmp_path, SERVICE_DATA=str(data), SERVICE_PORT="0")
    assert run.returncode == 2, run
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("dbsvc: error: the package 'h11' is not installed")
    assert "python -m pip install h11 wsproto" in lines[0]
    assert "dbsvc build SCHEMA -o APP.pyz" in lines[0]
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert not data.exists()  # nothing was touched


def test_serve_without_wsproto_names_wsproto(tmp_path):
    python = make_venv(tmp_path, "h11")
    run = run_bare(python, "serve", str(BLOG), cwd=tmp_path, SERVICE_DATA=str(tmp_path / "data"), SERVICE_PORT="0")
    assert run.returncode == 2, run
    assert run.stderr.startswith("dbsvc: error: the package 'wsproto' is not installed")
    assert len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "data").exists()


def test_guarded_serve_without_cryptography_is_one_line_and_touches_nothing(tmp_path):
    python = make_venv(tmp_path, "h11", "wsproto")
    idp = TestIdp(tmp_path / "idp")
    data = idp.data_dir()
    run = run_bare(
        python, "serve", str(BLOG), cwd=tmp_path, SERVICE_DATA=str(data), SERVICE_PORT="0", **idp.server_env()
    )
    assert run.returncode == 2, run
    assert len(run.stderr.splitlines()) == 1, run.stderr
    # The guard's own check (dbsvc.auth.settings) says it, before anything is opened.
    assert run.stderr.startswith("dbsvc: error: ") and "'cryptography' package is not installed" in run.stderr
    assert "pip install" in run.stderr and "Traceback" not in run.stderr
    assert list((data / idp.tenant).iterdir()) == []  # the tenant was never opened


def test_commands_that_need_no_server_run_without_any_package(bare_python, tmp_path):
    run = run_bare(bare_python, "init", "shop", cwd=tmp_path)
    assert run.returncode == 0, run
    run = run_bare(bare_python, "check", "shop.dbs", cwd=tmp_path)
    assert run.returncode == 0 and run.stdout == "shop.dbs: ok (2 models)\n", run


# ---------------------------------------------------------------- dbsvc init


def dbsvc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=120
    )


def test_init_writes_a_starter_schema_that_checks_and_serves(tmp_path):
    run = dbsvc("init", "shop", cwd=tmp_path)
    assert run.returncode == 0, run
    assert run.stdout == (
        "wrote shop.dbs (2 models: Project, Task)\nnext: dbsvc check shop.dbs && dbsvc serve shop.dbs\n"
    )
    text = (tmp_path / "shop.dbs").read_text()
    assert text.startswith("# shop: a starter schema written by `dbsvc init`")
    assert "[runtime]" in text and "@ref(Project)" in text and "@projection(" in text
    assert dbsvc("check", "shop.dbs", cwd=tmp_path).returncode == 0

    schema = load_schema(str(tmp_path / "shop.dbs"))
    task = next(m for m in schema.models if m.name == "Task")
    assert [f.name for f in task.fields if f.filterable] == ["project_id", "status", "priority"]
    assert [p.name for p in task.projections] == ["summary"]

    server = start_server(tmp_path / "shop.dbs", tmp_path / "data")
    try:
        project = server.post("/api/project", {"name": "Launch"}).json["id"]
        assert server.post("/api/task", {"project_id": project, "title": "Write docs"}).status == 201
        assert server.post("/api/task", {"project_id": 999, "title": "Orphan"}).json["code"] == "foreign_key_violation"
        listed = server.get(f"/api/task?project_id={project}&status=todo&projection=summary").json
        assert listed["data"] == [{"id": 1, "title": "Write docs", "status": "todo"}]
        assert server.get("/_/").status == 200
    finally:
        server.stop()


def test_init_never_overwrites_and_refuses_a_nameless_file(tmp_path):
    assert dbsvc("init", cwd=tmp_path).returncode == 0  # app.dbs
    (tmp_path / "app.dbs").write_text("# mine\n")
    run = dbsvc("init", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr == "dbsvc: error: app.dbs already exists: choose another NAME, or remove it first\n"
    assert (tmp_path / "app.dbs").read_text() == "# mine\n"
    run = dbsvc("init", ".dbs", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr == (
        "dbsvc: error: '.dbs' is not a schema name: expected a file name such as 'shop' or 'shop.dbs'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.dbs"]


# ---------------------------------------------------------------- the ready print


def read_ready(proc: subprocess.Popen, timeout: float = 60) -> list[str]:
    """The four lines `serve` prints on standard output once it listens."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while len(lines) < 4 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
    return lines


@pytest.mark.parametrize("explorer", ["", "off"])
def test_serve_prints_the_urls_on_stdout_even_when_logs_are_quiet(tmp_path, explorer):
    env = clean_env(SERVICE_DATA=str(tmp_path / "data"), SERVICE_PORT="0", RUST_LOG="warn", SERVICE_EXPLORER=explorer)
    proc = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "serve", str(BLOG)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = read_ready(proc)
        assert lines[0] == "dbsvc: ready", lines
        port = int(re.fullmatch(r"  API       http://127\.0\.0\.1:(\d+)/api/", lines[1]).group(1))
        assert lines[2] == f"  OpenAPI   http://127.0.0.1:{port}/openapi.json"
        if explorer == "off":
            assert lines[3] == "  Explorer  off (SERVICE_EXPLORER=on serves it; docs/explorer.md)"
        else:
            assert lines[3] == f"  Explorer  http://127.0.0.1:{port}/_/"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/openapi.json")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "listening on" not in err  # hidden at warn; the print is not


# ---------------------------------------------------------------- the zipapp


def test_a_built_zipapp_serves_the_explorer_with_nothing_installed(tmp_path):
    app = build_zipapp(load_schema(str(BLOG)), tmp_path / "blog.pyz")
    env = clean_env(SERVICE_PORT="0", SERVICE_DATA=str(tmp_path / "data"))
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(app)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = read_ready(proc)
        assert lines[0] == "dbsvc: ready", (lines, proc.stderr.read() if proc.poll() is not None else "")
        port = int(lines[3].rsplit(":", 1)[1].split("/")[0])
        for name, (filename, _kind) in ASSETS.items():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", f"/_/{name}")
            reply = conn.getresponse()
            assert reply.status == 200, name
            assert reply.read() == (ROOT / "dbsvc" / "explorer" / filename).read_bytes()
            conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("name", "package"), [("h11", "h11"), ("wsproto.events", "wsproto"), ("cryptography.hazmat", "cryptography")]
)
def test_an_import_error_of_a_runtime_package_becomes_the_one_line_message(name, package):
    from dbsvc.deps import translate_import_error

    error = translate_import_error(ModuleNotFoundError(f"No module named {name!r}", name=name))
    assert error is not None and f"the package {package!r} is not installed" in str(error)
    assert "\n" not in str(error) and "pip install" in str(error)


def test_an_import_error_of_anything_else_stays_a_bug():
    from dbsvc.deps import translate_import_error

    assert translate_import_error(ModuleNotFoundError("No module named 'dbsvc.nope'", name="dbsvc.nope")) is None
