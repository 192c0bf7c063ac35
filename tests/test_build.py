"""`dbsvc build`: the zipapp's contents, its atomic write, and that it runs with nothing but Python.

Every archive run uses `python -I -S` from a temporary directory with PYTHONPATH unset: no
site-packages, no checkout on the path, so each import must come from the archive itself.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import dbsvc.build
from dbsvc.build import BuildError, build_zipapp, write_zipapp
from dbsvc.compiler import generate_source
from dbsvc.compiler.openapi import build_openapi
from dbsvc.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]
BLOG = ROOT / "schemas" / "blog.dbs"


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("build") / "blog.pyz"
    build_zipapp(load_schema(str(BLOG)), output)
    return output


def _bare_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env


def _run_app(app: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-S", str(app), *args], cwd=cwd,
                          env=_bare_env(**env), capture_output=True, text=True, timeout=60)


def test_archive_holds_entry_point_generated_module_runtime_and_dependencies(app: Path) -> None:
    names = set(zipfile.ZipFile(app).namelist())
    for required in ("__main__.py", "_dbsvc_app/__init__.py", "_dbsvc_app/openapi.json",
                     "dbsvc/__init__.py", "dbsvc/cli.py", "dbsvc/build.py", "dbsvc/errors.py",
                     "dbsvc/compiler/openapi.py", "h11/__init__.py", "h11/_connection.py",
                     "wsproto/__init__.py", "wsproto/handshake.py"):
        assert required in names, required
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so"))]
    assert not [n for n in names if n.startswith(("tests/", "bench/", "dbsvc/tests/"))]
    assert not [n for n in names if n.startswith("dbsvc/") and not n.endswith((".py", "/"))]


def test_archive_carries_every_module_of_the_dbsvc_package(app: Path) -> None:
    names = set(zipfile.ZipFile(app).namelist())
    package = ROOT / "dbsvc"
    expected = {f"dbsvc/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")
                if "__pycache__" not in p.parts}
    assert expected <= names


def test_archive_main_module_is_the_generated_source(app: Path) -> None:
    with zipfile.ZipFile(app) as archive:
        generated = archive.read("_dbsvc_app/__init__.py").decode("utf-8")
        document = json.loads(archive.read("_dbsvc_app/openapi.json"))
    schema = load_schema(str(BLOG))
    assert generated == generate_source(schema)
    assert document == json.loads(json.dumps(build_openapi(schema)))


def test_archive_starts_with_a_shebang_and_is_executable(app: Path) -> None:
    assert app.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert os.access(app, os.X_OK)


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.pyz", tmp_path / "b.pyz"
    write_zipapp(first, "X = 1\n", "{}\n", schema_name="x.dbs")
    write_zipapp(second, "X = 1\n", "{}\n", schema_name="x.dbs")
    assert first.read_bytes() == second.read_bytes()


def test_write_replaces_the_output_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    output = tmp_path / "app.pyz"
    output.write_bytes(b"old")
    write_zipapp(output, "X = 1\n", "{}\n")
    assert zipfile.is_zipfile(output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.pyz"]


def test_missing_dependency_is_refused_and_the_old_output_kept(tmp_path: Path, monkeypatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args):
        return None if name == "wsproto" else real_find_spec(name, *args)

    monkeypatch.setattr(dbsvc.build.importlib.util, "find_spec", find_spec)
    output = tmp_path / "app.pyz"
    output.write_bytes(b"old")
    with pytest.raises(BuildError, match=r"'wsproto' is not installed.*pip install wsproto"):
        write_zipapp(output, "X = 1\n", "{}\n")
    assert output.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.pyz"]


def test_cli_build_writes_the_archive(tmp_path: Path) -> None:
    output = tmp_path / "out.pyz"
    done = subprocess.run([sys.executable, str(ROOT / "dbsvc.py"), "build", str(BLOG), "-o", str(output)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert zipfile.is_zipfile(output)


def test_help_runs_from_the_archive_alone(app: Path, tmp_path: Path) -> None:
    done = _run_app(app, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage: python APP.pyz" in done.stdout and "blog.dbs" in done.stdout


def test_unknown_command_is_a_usage_error(app: Path, tmp_path: Path) -> None:
    done = _run_app(app, "frobnicate", cwd=tmp_path)
    assert done.returncode == 2
    assert "unexpected arguments ['frobnicate']" in done.stderr


def test_openapi_command_prints_the_embedded_document(app: Path, tmp_path: Path) -> None:
    done = _run_app(app, "openapi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["info"]["title"] == "blog"


def test_imports_resolve_inside_the_archive(app: Path, tmp_path: Path) -> None:
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import dbsvc, dbsvc.compiler.openapi, "
             "h11, wsproto, _dbsvc_app; print('\\n'.join(m.__file__ for m in "
             "(dbsvc, dbsvc.compiler.openapi, h11, wsproto, _dbsvc_app)))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(app)], cwd=tmp_path,
                          env=_bare_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        assert line.startswith(str(app) + os.sep), line


def test_default_command_serves_the_generated_module(app: Path, tmp_path: Path) -> None:
    # The real server needs storage; here serve_generated is replaced to see what it gets.
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import dbsvc.cli, dbsvc.build; "
             "dbsvc.cli.serve_generated = lambda m: print(m.__name__, m.SCHEMA_PATH, "
             "sorted(m.BY_NAME)) or 0; raise SystemExit(dbsvc.build.run_zipapp([]))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(app)], cwd=tmp_path,
                          env=_bare_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    module, schema_path, models = done.stdout.split(" ", 2)
    assert module == "_dbsvc_app" and schema_path.endswith("blog.dbs")
    assert models.strip() == "['BlogPost', 'Comment', 'User']"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(not _has("dbsvc.storage.tenants"),
                    reason="dbsvc.storage.tenants (the tenant tool) is not written yet")
def test_tenant_commands_run_from_the_archive(app: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = _run_app(app, "tenant", "create", "acme", cwd=tmp_path, SERVICE_DATA=str(data))
    assert created.returncode == 0, created.stderr
    listed = _run_app(app, "tenant", "list", cwd=tmp_path, SERVICE_DATA=str(data))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split("\t")[0] == "acme"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn.request(method, path, body=payload, headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def _storage_ready() -> bool:
    try:
        import dbsvc.storage
    except ImportError:
        return False
    return hasattr(dbsvc.storage, "Store")


@pytest.mark.skipif(not (ROOT / "dbsvc" / "app.py").exists() or not _storage_ready(),
                    reason="serving needs dbsvc/app.py and the storage engine (dbsvc.storage.Store)")
def test_archive_serves_health_and_records_on_service_port(app: Path, tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(app)], cwd=tmp_path,
                            env=_bare_env(SERVICE_PORT=str(port), SERVICE_DATA=str(tmp_path / "data")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            with contextlib.suppress(OSError):
                status, body = _get(port, "/health")
                break
            assert time.monotonic() < deadline, "server did not answer /health within 30 s"
            time.sleep(0.05)
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        status, body = _get(port, "/api/user", "POST", {"email": "a@example.com", "name": "Ada"})
        assert status == 201, body
        status, body = _get(port, f"/api/user/{json.loads(body)['id']}")
        assert status == 200 and json.loads(body)["name"] == "Ada"
        # wsproto travels in the archive too: a change feed replays the insert.
        from websockets.sync.client import connect
        with connect(f"ws://127.0.0.1:{port}/subscribe/user?after=0", open_timeout=10) as ws:
            event = json.loads(ws.recv(timeout=10))
        assert (event["kind"], event["record"]["name"]) == ("insert", "Ada")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
