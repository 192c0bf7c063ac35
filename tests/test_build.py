"""`dbsvc build`: the zipapp's contents, its atomic write, the same bytes from the same inputs,
the unpacking of embedded packages, and that it runs with nothing but Python.

Every archive run uses `python -I -S` from a temporary directory with PYTHONPATH unset: no
site-packages, no checkout on the path, so each import must come from the archive itself.
(tests/test_zipapp_empty_venv.py runs the apps in a virtual environment with no packages.)
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

import dbsvc.build
from dbsvc import __version__
from dbsvc.build import BuildError, build_zipapp, required_names, write_zipapp
from dbsvc.compiler import generate_source
from dbsvc.errors import ConfigError
from dbsvc.schema import load_schema
from dbsvc.schema.describe import describe_schema, schema_fingerprint
from dbsvc.zipapp import EmbeddedPackages, unpack

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
    return subprocess.run(
        [sys.executable, "-I", "-S", str(app), *args],
        cwd=cwd,
        env=_bare_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _probe(archive: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in an isolated interpreter with `archive` first on sys.path (as `sys.argv[1]`)."""
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(archive)],
        cwd=cwd,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_archive_holds_entry_point_generated_module_runtime_and_dependencies(app: Path) -> None:
    names = set(zipfile.ZipFile(app).namelist())
    for required in (
        "__main__.py",
        "_dbsvc_app/__init__.py",
        "dbsvc/zipapp.py",
        "dbsvc/__init__.py",
        "dbsvc/cli.py",
        "dbsvc/build.py",
        "dbsvc/errors.py",
        "dbsvc/compiler/openapi.py",
        "h11/__init__.py",
        "h11/_connection.py",
        "wsproto/__init__.py",
        "wsproto/handshake.py",
    ):
        assert required in names, required
    assert not [n for n in names if "__pycache__" in n or n.endswith(".so")]
    # bytecode beside each module, none without its source
    assert {n for n in names if n.endswith(".py")} - {"__main__.py"} == {n[:-1] for n in names if n.endswith(".pyc")}
    assert not [n for n in names if n.startswith(("tests/", "bench/", "dbsvc/tests/", "_dbsvc_embedded/"))]
    # dbsvc's code, plus the explorer's static page (served at /_/) and the TypeScript
    # client's fixed parts (`dbsvc client --lang typescript` reads them)
    assert not [
        n
        for n in names
        if n.startswith("dbsvc/")
        and not n.endswith((".py", ".pyc", "/"))
        and not n.startswith("dbsvc/explorer/")
        and n not in ("dbsvc/clients/ts_rest.ts", "dbsvc/clients/ts_feeds.ts")
    ]
    assert {
        "dbsvc/explorer/index.html",
        "dbsvc/explorer/explorer.css",
        "dbsvc/explorer/explorer.js",
        "dbsvc/explorer/explorer-edit.js",
        "dbsvc/explorer/explorer-record.js",
        "dbsvc/explorer/explorer-live.js",
        "dbsvc/explorer/favicon.svg",
    } <= names


def test_archive_carries_every_module_of_the_dbsvc_package(app: Path) -> None:
    names = set(zipfile.ZipFile(app).namelist())
    package = ROOT / "dbsvc"
    expected = {
        f"dbsvc/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py") if "__pycache__" not in p.parts
    }
    assert expected <= names


def test_archive_main_module_is_the_generated_source(app: Path) -> None:
    with zipfile.ZipFile(app) as archive:
        generated = archive.read("_dbsvc_app/__init__.py").decode("utf-8")
        main = archive.read("__main__.py").decode("utf-8")
    assert generated == generate_source(load_schema(str(BLOG)))
    assert "from dbsvc.zipapp import main" in main and "dbsvc.build" not in main


def test_archive_starts_with_a_shebang_and_is_executable(app: Path) -> None:
    assert app.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert os.access(app, os.X_OK)


@pytest.fixture(scope="module")
def cli_builds(tmp_path_factory) -> dict[str, list[Path]]:
    """Both archives `dbsvc build` writes, each built twice by the command line: two processes,
    other hash seeds, other working and output directories, only the inputs (the schema, the
    installed packages) the same. Built once for the module: the same-bytes test compares the
    pairs, the guard test reads what the command embedded (one guard build where there were
    three, and the command line's own build test was a twin of the plain pair)."""
    builds: dict[str, list[Path]] = {}
    for label, flags in (("plain", []), ("with-guard", ["--with-guard"])):
        builds[label] = []
        for seed in ("1", "2"):
            work = tmp_path_factory.mktemp(f"{label}-build{seed}")
            output = work / "app.pyz"
            done = subprocess.run(
                [sys.executable, str(ROOT / "dbsvc.py"), "build", str(BLOG), "-o", str(output), *flags],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=work,
                env={**os.environ, "PYTHONHASHSEED": seed},
            )
            assert done.returncode == 0, done.stderr
            builds[label].append(output)
    return builds


@pytest.mark.parametrize("label", ["plain", "with-guard"])
def test_two_builds_give_the_same_bytes(cli_builds: dict[str, list[Path]], label: str) -> None:
    first, second = cli_builds[label]
    assert zipfile.is_zipfile(first)
    assert first.read_bytes() == second.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert names == sorted(names)
    assert ("_dbsvc_embedded/MANIFEST.json" in names) == (label == "with-guard")


def test_write_replaces_the_output_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    output = tmp_path / "app.pyz"
    output.write_bytes(b"old")
    write_zipapp(output, "X = 1\n")
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
        write_zipapp(output, "X = 1\n")
    assert output.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.pyz"]


def test_help_runs_from_the_archive_alone(app: Path, tmp_path: Path) -> None:
    done = _run_app(app, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python blog.pyz") and "blog.dbs" in done.stdout
    for command in ("serve", "openapi", "tenant", "compact", "export", "import", "backup", "replicate"):
        assert f"    {command}" in done.stdout, command
    for absent in ("init", "check", "generate", "build"):  # schema-making commands: dbsvc only
        assert f"    {absent} " not in done.stdout, absent


def test_version_names_dbsvc_and_the_schema_fingerprint(app: Path, tmp_path: Path) -> None:
    done = _run_app(app, "--version", cwd=tmp_path)
    fingerprint = schema_fingerprint(describe_schema(load_schema(str(BLOG))))
    assert (done.returncode, done.stdout) == (0, f"dbsvc {__version__} (schema blog.dbs, fingerprint {fingerprint})\n")


@pytest.mark.parametrize(
    "args", [["frobnicate"], ["check", str(BLOG)], ["serve", str(BLOG)], ["import", str(BLOG), "records.jsonl"]]
)
def test_an_unknown_command_or_a_schema_argument_is_a_usage_error(app: Path, tmp_path: Path, args) -> None:
    # The app carries its schema: `serve SCHEMA` and `import SCHEMA FILE` take none there.
    done = _run_app(app, *args, cwd=tmp_path, SERVICE_DATA=str(tmp_path / "data"))
    assert done.returncode == 2
    assert done.stderr.startswith("usage: python blog.pyz") and "error: " in done.stderr
    assert not (tmp_path / "data").exists()


def test_openapi_command_prints_the_embedded_document(app: Path, tmp_path: Path) -> None:
    done = _run_app(app, "openapi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["info"]["title"] == "blog"


def test_modules_load_from_the_archives_bytecode(app: Path, tmp_path: Path) -> None:
    # zipimport compiles a module from source only when no .pyc of this Python is beside it;
    # code from the archive's .pyc carries the name it was compiled under, without the path.
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dbsvc.cli, h11._connection, _dbsvc_app; "
        "print(dbsvc.cli.main.__code__.co_filename, h11._connection.Connection.send.__code__.co_filename, "
        "_dbsvc_app.validate_create_user.__code__.co_filename)"
    )
    done = _probe(app, probe, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["dbsvc/cli.py", "h11/_connection.py", "_dbsvc_app/__init__.py"]


def test_bytecode_that_does_not_match_its_source_gives_way_to_the_source(tmp_path: Path) -> None:
    app = write_zipapp(tmp_path / "app.pyz", "X = 1\n")
    with zipfile.ZipFile(app) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    entries["_dbsvc_app/__init__.py"] = b"X = 2\n"  # edited after the build
    tampered = tmp_path / "tampered.pyz"
    with zipfile.ZipFile(tampered, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import _dbsvc_app; print(_dbsvc_app.X)"
    done = _probe(tampered, probe, tmp_path)
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr  # the checked hash at work


def test_imports_resolve_inside_the_archive(app: Path, tmp_path: Path) -> None:
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dbsvc, dbsvc.compiler.openapi, "
        "h11, wsproto, _dbsvc_app; print('\\n'.join(m.__file__ for m in "
        "(dbsvc, dbsvc.compiler.openapi, h11, wsproto, _dbsvc_app)))"
    )
    done = _probe(app, probe, tmp_path)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        assert line.startswith(str(app) + os.sep), line


def test_default_command_serves_the_generated_module(app: Path, tmp_path: Path) -> None:
    # The real server needs storage; here dbsvc.service.serve is replaced to see what it gets.
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dbsvc.service, dbsvc.zipapp; "
        "dbsvc.service.serve = lambda m, environ, follow=None: print(m.__name__, m.SCHEMA_PATH, "
        "sorted(m.BY_NAME)) or 0; raise SystemExit(dbsvc.zipapp.main([]))"
    )
    done = _probe(app, probe, tmp_path)
    assert done.returncode == 0, done.stderr
    module, schema_path, models = done.stdout.split(" ", 2)
    assert module == "_dbsvc_app" and schema_path.endswith("blog.dbs")
    assert models.strip() == "['BlogPost', 'Comment', 'User']"


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
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn.request(method, path, body=payload, headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_archive_serves_health_and_records_on_service_port(app: Path, tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(app)],
        cwd=tmp_path,
        env=_bare_env(SERVICE_PORT=str(port), SERVICE_DATA=str(tmp_path / "data")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            with contextlib.suppress(OSError):
                status, body = _get(port, "/health")
                break
            assert time.monotonic() < deadline, "server did not answer /health within 30 s"
            time.sleep(0.05)
        fingerprint = schema_fingerprint(describe_schema(load_schema(str(BLOG))))
        assert (status, json.loads(body)) == (200, {"status": "ok", "version": __version__, "schema": fingerprint})
        status, body = _get(port, "/api/user", "POST", {"email": "a@example.com", "name": "Ada"})
        assert status == 201, body
        status, body = _get(port, f"/api/user/{json.loads(body)['id']}")
        assert status == 200 and json.loads(body)["name"] == "Ada"
        # wsproto travels in the archive too: a change feed replays the insert.
        from websockets.sync.client import connect

        with connect(f"ws://127.0.0.1:{port}/subscribe/user?after=0", open_timeout=30) as ws:
            event = json.loads(ws.recv(timeout=30))
        assert (event["kind"], event["record"]["name"]) == ("insert", "Ada")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


# ---------------------------------------------------------------- --with-guard: embedded packages


def test_the_guard_build_embeds_cryptography_and_what_it_requires(cli_builds: dict[str, list[Path]]) -> None:
    with zipfile.ZipFile(cli_builds["with-guard"][0]) as archive:
        manifest = json.loads(archive.read("_dbsvc_embedded/MANIFEST.json"))
        names = set(archive.namelist())
    assert set(manifest["distributions"]) == {"cryptography", "cffi", "pycparser"}
    assert {"cryptography", "cffi", "pycparser", "_cffi_backend"} <= set(manifest["top_level"])
    assert manifest["ext_suffix"] == sysconfig.get_config_var("EXT_SUFFIX")
    for name in manifest["files"]:
        assert f"_dbsvc_embedded/{name}" in names
        assert "__pycache__" not in name and not name.endswith(("/RECORD", "/INSTALLER"))
    assert any(n.startswith("cryptography/hazmat/bindings/_rust") and n.endswith(".so") for n in manifest["files"])
    assert any(n.startswith("cryptography-") and "/licenses/" in n for n in manifest["files"])


@pytest.mark.parametrize(
    ("requirements", "expected"),
    [
        (["cffi>=2.0.0 ; platform_python_implementation != 'PyPy'"], ["cffi"]),
        (["typing-extensions>=4.13.2 ; python_full_version < '3.11'"], []),
        (["bcrypt>=3.1.5 ; extra == 'ssh'"], []),
        (["pycparser", "a.b_c-d (>=1)"], ["pycparser", "a.b_c-d"]),
    ],
)
def test_required_names_keep_what_this_python_needs(requirements: list[str], expected: list[str]) -> None:
    assert required_names(requirements) == expected


def _embedding_archive(
    path: Path, files: dict[str, bytes], *, digests: dict[str, str] | None = None, ext_suffix: str | None = None
) -> tuple[str, bytes]:
    """A zip file shaped like a --with-guard app's embedded part, and its manifest."""
    manifest = json.dumps(
        {
            "ext_suffix": ext_suffix or sysconfig.get_config_var("EXT_SUFFIX"),
            "distributions": {"probe": "1"},
            "top_level": sorted({name.split("/")[0] for name in files}),
            "files": digests or {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        },
        sort_keys=True,
    ).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(f"_dbsvc_embedded/{name}", data)
        archive.writestr("_dbsvc_embedded/MANIFEST.json", manifest)
    return str(path), manifest


PROBE = {
    "dbsvc_embedded_probe/__init__.py": b"from dbsvc_embedded_probe.part import VALUE\n",
    "dbsvc_embedded_probe/part.py": b"VALUE = 42\n",
}


def test_embedded_packages_unpack_on_first_import_only_and_once(tmp_path: Path, monkeypatch) -> None:
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("SERVICE_ZIPAPP_CACHE", str(cache))
    finder = EmbeddedPackages(archive, manifest)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert importlib.util.find_spec("json") is not None and not cache.exists()  # other names: nothing
    try:
        import dbsvc_embedded_probe  # type: ignore[import-not-found]

        assert dbsvc_embedded_probe.VALUE == 42
    finally:
        sys.modules.pop("dbsvc_embedded_probe", None)
        sys.modules.pop("dbsvc_embedded_probe.part", None)
    (directory,) = cache.iterdir()  # one directory, no scratch left behind
    assert dbsvc_embedded_probe.__file__ == str(directory / "dbsvc_embedded_probe" / "__init__.py")
    assert (directory / "MANIFEST.json").read_bytes() == manifest
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    inode = (directory / "MANIFEST.json").stat().st_ino
    assert unpack(archive, manifest, str(cache)) == str(directory)  # the next run: as it is
    assert (directory / "MANIFEST.json").stat().st_ino == inode


def test_an_incomplete_unpacked_directory_is_replaced(tmp_path: Path) -> None:
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE)
    cache = tmp_path / "cache"
    directory = Path(unpack(archive, manifest, str(cache)))
    (directory / "MANIFEST.json").unlink()  # as if something cut it short
    (directory / "dbsvc_embedded_probe" / "part.py").write_bytes(b"VALUE = 0\n")
    assert unpack(archive, manifest, str(cache)) == str(directory)
    assert (directory / "dbsvc_embedded_probe" / "part.py").read_bytes() == b"VALUE = 42\n"
    assert [p.name for p in cache.iterdir()] == [directory.name]


def test_a_damaged_embedded_file_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in PROBE.items()}
    digests["dbsvc_embedded_probe/part.py"] = "0" * 64
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE, digests=digests)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"the app is damaged: embedded file 'dbsvc_embedded_probe/part.py'"):
        unpack(archive, manifest, str(cache))
    assert list(cache.iterdir()) == []


def test_embedded_packages_of_another_python_are_refused_before_unpacking(tmp_path: Path) -> None:
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE, ext_suffix=".cpython-39-sparc-linux-gnu.so")
    with pytest.raises(
        ConfigError,
        match=r"built for '\.cpython-39-sparc-linux-gnu\.so'.*rebuild it with "
        r"`dbsvc build SCHEMA -o APP.pyz --with-guard`",
    ):
        unpack(archive, manifest, str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("mode", [0o777, 0o720])
def test_a_cache_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE)
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(ConfigError, match=r"is owned or writable by another user.*SERVICE_ZIPAPP_CACHE"):
        unpack(archive, manifest, str(cache))
    assert list(cache.iterdir()) == []


def _damage_part(directory: Path) -> None:
    part = directory / "dbsvc_embedded_probe" / "part.py"
    part.write_bytes(b"VALUE = 40\n")  # the same size: only its mtime differs
    os.utime(part, ns=(0, part.stat().st_mtime_ns + 1_000_000))


def _directory_for_part(directory: Path) -> None:
    part = directory / "dbsvc_embedded_probe" / "part.py"
    part.unlink()
    part.mkdir()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_damage_part, "'dbsvc_embedded_probe/part.py' was modified after it was unpacked (its mtime changed)"),
        (
            lambda d: (d / "dbsvc_embedded_probe" / "part.py").write_bytes(b"VALUE"),
            "'dbsvc_embedded_probe/part.py' is 5 bytes, expected 11",
        ),
        (lambda d: (d / "dbsvc_embedded_probe" / "part.py").unlink(), "'dbsvc_embedded_probe/part.py' is missing"),
        (_directory_for_part, "'dbsvc_embedded_probe/part.py' is a directory, expected a file"),
        (lambda d: (d / "UNPACKED.json").unlink(), "UNPACKED.json is missing"),  # unpacked by an older dbsvc
        (lambda d: (d / "UNPACKED.json").write_bytes(b"{"), "its record cannot be read"),
        (
            lambda d: (d / "UNPACKED.json").write_bytes(b'{"files": {"dbsvc_embedded_probe/part.py": 11}}'),
            "UNPACKED.json has no size and mtime for 'dbsvc_embedded_probe/",
        ),
    ],
    ids=["mtime", "size", "deleted", "directory", "no-record", "bad-record", "bad-entry"],
)
def test_a_damaged_unpacked_directory_is_unpacked_again_with_one_warning(
    tmp_path: Path, caplog, damage, said: str
) -> None:
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE)
    cache = tmp_path / "cache"
    directory = Path(unpack(archive, manifest, str(cache)))
    damage(directory)
    with caplog.at_level("WARNING", logger="dbsvc.zipapp"):
        assert unpack(archive, manifest, str(cache)) == str(directory)
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith(f"the app's unpacked packages in {str(directory)!r} are damaged: {said}")
    assert message.endswith("; unpacking them again")
    assert (directory / "dbsvc_embedded_probe" / "part.py").read_bytes() == b"VALUE = 42\n"
    assert [p.name for p in cache.iterdir()] == [directory.name]
    caplog.clear()
    inode = (directory / "MANIFEST.json").stat().st_ino
    assert unpack(archive, manifest, str(cache)) == str(directory)  # repaired: the next start is quiet
    assert caplog.records == [] and (directory / "MANIFEST.json").stat().st_ino == inode


def test_files_python_adds_beside_the_unpacked_ones_are_no_damage(tmp_path: Path) -> None:
    archive, manifest = _embedding_archive(tmp_path / "app.pyz", PROBE)
    cache = tmp_path / "cache"
    directory = Path(unpack(archive, manifest, str(cache)))
    (directory / "dbsvc_embedded_probe" / "__pycache__").mkdir()
    (directory / "dbsvc_embedded_probe" / "__pycache__" / "part.cpython-311.pyc").write_bytes(b"x")
    inode = (directory / "MANIFEST.json").stat().st_ino
    assert unpack(archive, manifest, str(cache)) == str(directory)
    assert (directory / "MANIFEST.json").stat().st_ino == inode
