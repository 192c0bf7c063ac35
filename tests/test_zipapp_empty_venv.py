"""A built app in a virtual environment holding no package at all, run as `python -I APP.pyz`.

`python -m venv --without-pip` gives an interpreter whose site-packages is empty; `-I`
(isolated mode) drops PYTHON* variables, the user site and the script's directory from the
path. So h11, wsproto, dbsvc and, in a `--with-guard` app, cryptography can only come out of
the archive. Every run gets its own HOME, so the default cache (~/.cache/dbsvc) is the test's.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from dbsvc import __version__  # noqa: E402
from dbsvc.build import build_zipapp  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.schema.describe import describe_schema, schema_fingerprint  # noqa: E402
from support.idp import TestIdp  # noqa: E402

BLOG = ROOT / "schemas" / "blog.dbs"


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """The interpreter of a virtual environment with no packages."""
    venv = tmp_path_factory.mktemp("venv") / "empty"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    interpreter = venv / "bin" / "python"
    for name in ("h11", "wsproto", "cryptography", "dbsvc"):
        probe = subprocess.run(
            [str(interpreter), "-I", "-c", f"import {name}"], capture_output=True, cwd=venv, timeout=60
        )
        assert probe.returncode != 0, f"the empty environment can import {name}"
    return interpreter


@pytest.fixture(scope="module")
def plain_app(tmp_path_factory) -> Path:
    return build_zipapp(load_schema(str(BLOG)), tmp_path_factory.mktemp("plain") / "blog.pyz")


@pytest.fixture(scope="module")
def guard_app(tmp_path_factory) -> Path:
    return build_zipapp(load_schema(str(BLOG)), tmp_path_factory.mktemp("guard") / "blog.pyz", with_guard=True)


def app_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SERVICE_", "PYTHON", "XDG_")) and k not in ("RUST_LOG", "HOME")
    }
    env.update(HOME=str(home), SERVICE_PORT="0", SERVICE_EXPLORER="off", **extra)
    return env


def run(python: Path, app: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-I", str(app), *args],
        cwd=cwd,
        env=app_env(cwd / "home", **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


class Served:
    """`python -I APP.pyz` serving on port 0; the port from the lines it prints when ready."""

    def __init__(self, python: Path, app: Path, cwd: Path, **env: str) -> None:
        self.proc = subprocess.Popen(
            [str(python), "-I", str(app)],
            cwd=cwd,
            env=app_env(cwd / "home", **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = self.proc.stdout.readline() if self.proc.stdout else ""
        api = self.proc.stdout.readline() if self.proc.stdout else ""
        if first != "dbsvc: ready\n":
            self.proc.kill()
            _out, err = self.proc.communicate(timeout=60)
            raise AssertionError(f"the app did not start: {first!r} {err}")
        self.port = int(re.fullmatch(r"  API       http://127\.0\.0\.1:(\d+)/api/\n", api).group(1))

    def request(self, method: str, path: str, body: dict | None = None, token: str | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read()
        finally:
            conn.close()

    def stop(self) -> str:
        """SIGTERM, a clean exit, and what it logged."""
        self.proc.send_signal(signal.SIGTERM)
        _out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return err


@contextlib.contextmanager
def served(python: Path, app: Path, cwd: Path, **env: str):
    server = Served(python, app, cwd, **env)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.stop()


def blog_fingerprint() -> str:
    return schema_fingerprint(describe_schema(load_schema(str(BLOG))))


# ---------------------------------------------------------------- a plain app


def test_a_plain_app_serves_in_an_empty_venv(python, plain_app, tmp_path):
    with served(python, plain_app, tmp_path, SERVICE_DATA=str(tmp_path / "data")) as server:
        status, body = server.request("GET", "/health")
        assert (status, json.loads(body)) == (
            200,
            {"status": "ok", "version": __version__, "schema": blog_fingerprint()},
        )
        status, body = server.request("POST", "/api/user", {"email": "ada@example.com", "name": "Ada"})
        assert status == 201, body
        status, body = server.request("GET", f"/api/user/{json.loads(body)['id']}")
        assert status == 200 and json.loads(body)["name"] == "Ada"
        from websockets.sync.client import connect  # wsproto answers from inside the app

        with connect(f"ws://127.0.0.1:{server.port}/subscribe/user?after=0", open_timeout=60) as ws:
            event = json.loads(ws.recv(timeout=60))
        assert (event["kind"], event["record"]["name"]) == ("insert", "Ada")
    assert (tmp_path / "data" / "default").is_dir()
    assert not (tmp_path / "home").exists()  # no cache: nothing is embedded


def read_frames(path: Path) -> list[dict]:
    """The events of a `replicate --out` file: u64 offset | u32 crc | u32 length | payload."""
    data, frames, at = path.read_bytes() if path.exists() else b"", [], 0
    while at + 16 <= len(data):
        _offset, _crc, length = struct.unpack(">QII", data[at : at + 16])
        if at + 16 + length > len(data):
            break
        frames.append(json.loads(data[at + 16 : at + 16 + length]))
        at += 16 + length
    return frames


def test_every_companion_command_runs_from_a_plain_app(python, plain_app, tmp_path):
    data = tmp_path / "data"
    env = {"SERVICE_DATA": str(data), "SERVICE_TENANT": "acme"}

    def app(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        done = run(python, plain_app, *args, cwd=tmp_path, **{**env, **extra})
        assert done.returncode == 0, (args, done.stderr)
        return done

    assert "created tenant 'acme'" in app("tenant", "create", "acme").stdout
    records = [
        {
            "model": "User",
            "record": {
                "id": 1,
                "email": "ada@example.com",
                "name": "Ada",
                "age": None,
                "role": "admin",
                "joined": "2024-01-02T03:04:05Z",
                "profile": None,
            },
        },
        {
            "model": "User",
            "record": {
                "id": 2,
                "email": "bob@example.com",
                "name": "Bob",
                "age": 40,
                "role": "reader",
                "joined": "2024-01-02T03:04:06Z",
                "profile": {"a": 1},
            },
        },
    ]
    source = tmp_path / "records.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    app("import", str(source), "-q")
    exported = app("export", "User", "-q").stdout
    assert [json.loads(line) for line in exported.splitlines()] == records
    app("backup", str(tmp_path / "backup"))
    app("tenant", "create", "copy", "--from", str(tmp_path / "backup"))
    assert app("export", "-q", SERVICE_TENANT="copy").stdout == exported
    app("compact")
    listed = app("tenant", "list").stdout
    assert [line.split("\t")[0] for line in listed.splitlines()] == ["acme", "copy"]
    app("tenant", "drop", "copy", "--yes")
    assert json.loads(app("openapi").stdout)["info"]["title"] == "blog"
    assert json.loads(app("asyncapi").stdout)["asyncapi"].startswith("3.")

    with served(python, plain_app, tmp_path, **env) as server:
        out = tmp_path / "frames.bin"
        follower = subprocess.Popen(
            [str(python), "-I", str(plain_app), "replicate", f"http://127.0.0.1:{server.port}", "--out", str(out)],
            cwd=tmp_path,
            env=app_env(tmp_path / "home", **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while len(read_frames(out)) < len(records) and time.monotonic() < deadline:
                assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
                time.sleep(0.05)
        finally:
            follower.send_signal(signal.SIGTERM)
            _out, err = follower.communicate(timeout=60)
        assert follower.returncode == 0, err
    assert [(f["kind"], f["record"]["name"]) for f in read_frames(out)] == [("insert", "Ada"), ("insert", "Bob")]


def test_a_guarded_schema_in_a_plain_app_fails_at_start_with_the_fix(python, plain_app, tmp_path):
    idp = TestIdp(tmp_path / "idp")
    data = idp.data_dir()
    done = run(python, plain_app, cwd=tmp_path, SERVICE_DATA=str(data), **idp.server_env())
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith("dbsvc: error: SERVICE_JWT_PUBKEY is set but the 'cryptography' package is not installed")
    assert "rebuild it with `dbsvc build SCHEMA -o APP.pyz --with-guard`" in line
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert list((data / idp.tenant).iterdir()) == []  # the tenant was never opened


# ---------------------------------------------------------------- a --with-guard app


def test_a_guard_app_runs_the_guard_with_nothing_installed(python, guard_app, tmp_path):
    idp = TestIdp(tmp_path / "idp")
    env = {"SERVICE_DATA": str(idp.data_dir()), **idp.server_env()}
    cache = tmp_path / "home" / ".cache" / "dbsvc"
    with served(python, guard_app, tmp_path, **env) as server:
        assert server.request("GET", "/api/user")[0] == 401
        assert server.request("GET", "/api/user", token=idp.token(tenant="other"))[0] == 403
        status, body = server.request("POST", "/api/user", {"email": "a@example.com", "name": "Ada"}, token=idp.token())
        assert status == 201, body
        assert server.request("GET", "/api/user/1", token=idp.token())[0] == 200
    (unpacked,) = cache.iterdir()  # one directory; no scratch left
    assert (unpacked / "cryptography" / "__init__.py").is_file() and (unpacked / "MANIFEST.json").is_file()
    inode = (unpacked / "MANIFEST.json").stat().st_ino

    with served(python, guard_app, tmp_path, **env) as server:  # the second run unpacks nothing
        assert server.request("GET", "/api/user/1", token=idp.token())[0] == 200
    assert [p.name for p in cache.iterdir()] == [unpacked.name]
    assert (unpacked / "MANIFEST.json").stat().st_ino == inode


def test_a_guard_app_unpacks_nothing_until_the_guard_is_used(python, guard_app, tmp_path):
    with served(python, guard_app, tmp_path, SERVICE_DATA=str(tmp_path / "data")) as server:
        assert server.request("GET", "/api/user")[0] == 200  # no key set: the guard is off
    assert run(python, guard_app, "tenant", "list", cwd=tmp_path, SERVICE_DATA=str(tmp_path / "data")).returncode == 0
    assert not (tmp_path / "home").exists()


def test_the_cache_moves_with_its_variable_and_a_shared_one_is_refused(python, guard_app, tmp_path):
    idp = TestIdp(tmp_path / "idp")
    env = {"SERVICE_DATA": str(idp.data_dir()), **idp.server_env()}
    elsewhere = tmp_path / "elsewhere"
    with served(python, guard_app, tmp_path, SERVICE_ZIPAPP_CACHE=str(elsewhere), **env) as server:
        assert server.request("GET", "/api/user", token=idp.token())[0] == 200
    assert len(list(elsewhere.iterdir())) == 1 and not (tmp_path / "home").exists()

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    tenant = idp.data_dir() / idp.tenant
    before = {p.name: p.read_bytes() for p in tenant.iterdir() if p.is_file()}
    done = run(python, guard_app, cwd=tmp_path, SERVICE_ZIPAPP_CACHE=str(shared), **env)
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dbsvc: error: the cache directory {str(shared)!r} is owned or writable by another user")
    assert list(shared.iterdir()) == []
    assert {p.name: p.read_bytes() for p in tenant.iterdir() if p.is_file()} == before


def test_first_runs_at_once_share_one_unpacked_directory(python, guard_app, tmp_path):
    # Four processes import cryptography through the app's finder at the same moment: each
    # unpacks into its own scratch directory, one rename wins, all use the same directory.
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dbsvc.zipapp as z; "
        "z.install_embedded(z.__spec__.loader, sys.argv[1]); "
        "from cryptography.hazmat.primitives.asymmetric import ec; "
        "from cryptography.hazmat.primitives import hashes; "
        "key = ec.generate_private_key(ec.SECP256R1()); "
        "key.public_key().verify(key.sign(b'x', ec.ECDSA(hashes.SHA256())), b'x', ec.ECDSA(hashes.SHA256())); "
        "import cryptography; print(cryptography.__file__)"
    )
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [str(python), "-I", "-c", probe, str(guard_app)],
            cwd=tmp_path,
            env=app_env(tmp_path / "home", SERVICE_ZIPAPP_CACHE=str(cache)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], results
    (unpacked,) = cache.iterdir()
    assert {out.strip() for out, _err in results} == {str(unpacked / "cryptography" / "__init__.py")}


# ---------------------------------------------------------------- a damaged cache (issue 30, item 6)


def _rust_extension(unpacked: Path) -> Path:
    (found,) = (unpacked / "cryptography" / "hazmat" / "bindings").glob("_rust*.so")
    return found


def _truncate_so(unpacked: Path) -> str:
    so = _rust_extension(unpacked)
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    return so.relative_to(unpacked).as_posix()


def _modify_py(unpacked: Path) -> str:
    # Same size, so only its mtime tells: its first line (a comment) becomes a raise.
    init = unpacked / "cryptography" / "__init__.py"
    first, rest = init.read_bytes().split(b"\n", 1)
    init.write_bytes(b"raise ImportError('tampered') #".ljust(len(first), b"#") + b"\n" + rest)
    return "cryptography/__init__.py"


def _delete_file(unpacked: Path) -> str:
    (unpacked / "cryptography" / "fernet.py").unlink()
    return "cryptography/fernet.py"


def _file_to_directory(unpacked: Path) -> str:
    so = _rust_extension(unpacked)
    so.unlink()
    so.mkdir()
    return so.relative_to(unpacked).as_posix()


@pytest.fixture(scope="module")
def warm_cache(python, guard_app, tmp_path_factory) -> Path:
    """A cache the guard app filled on a first start, to be copied per test (mtimes kept)."""
    cwd = tmp_path_factory.mktemp("warm")
    idp = TestIdp(cwd / "idp")
    with served(
        python,
        guard_app,
        cwd,
        SERVICE_DATA=str(idp.data_dir()),
        SERVICE_ZIPAPP_CACHE=str(cwd / "cache"),
        **idp.server_env(),
    ) as server:
        assert server.request("GET", "/api/user", token=idp.token())[0] == 200
    return cwd / "cache"


# The default run serves two damages, each one a file the guard imports at its first request (a
# half .so, a same-size .py that raises if it is not replaced): the repair is what makes them
# load. A deleted file and a file turned into a directory take the same served path (found at
# the start, unpacked again, one warning, the next start quiet); they run in the slow set,
# and each kind's detection and repair stays in the default run in process
# (tests/test_build.py's test_a_damaged_unpacked_directory_is_unpacked_again_with_one_warning,
# its "deleted" and "directory" cases). Two servers a case: about 12 s of the file at load.
@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_truncate_so, "bytes, expected"),
        (_modify_py, "was modified"),
        pytest.param(_delete_file, "is missing", marks=pytest.mark.slow),
        pytest.param(_file_to_directory, "is a directory, expected a file", marks=pytest.mark.slow),
    ],
    ids=["truncated-so", "modified-py", "deleted", "directory"],
)
def test_a_damaged_cache_is_unpacked_again_and_says_so(python, guard_app, warm_cache, tmp_path, damage, said):
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    (unpacked,) = cache.iterdir()
    name = damage(unpacked)
    idp = TestIdp(tmp_path / "idp")
    env = {"SERVICE_DATA": str(idp.data_dir()), "SERVICE_ZIPAPP_CACHE": str(cache), **idp.server_env()}
    with served(python, guard_app, tmp_path, **env) as server:
        assert server.request("GET", "/api/user")[0] == 401
        status, body = server.request("POST", "/api/user", {"email": "a@example.com", "name": "Ada"}, token=idp.token())
        assert status == 201, body
        err = server.stop()  # exit 0
    repaired = [line for line in err.splitlines() if "unpacking them again" in line]
    assert len(repaired) == 1, err
    assert f"{name!r}" in repaired[0] and said in repaired[0], repaired[0]
    assert [p.name for p in cache.iterdir()] == [unpacked.name]  # repaired in place, nothing left over

    with served(python, guard_app, tmp_path, **env) as server:  # and the next start is quiet
        assert server.request("GET", "/api/user/1", token=idp.token())[0] == 200
        err = server.stop()
    assert "unpacking them again" not in err
