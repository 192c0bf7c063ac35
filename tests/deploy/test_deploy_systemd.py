"""deploy/systemd/dbsvc@.service: `systemd-analyze verify` on the file as shipped, its offline
security exposure, and the real server started the way the unit starts it (its environment,
its ExecStart, its kill signal, a notify socket where systemd's would be).

There is no running systemd here, so `verify` works on an alternate root: a temporary tree
holding the host's own unit directory, the unit file copied byte for byte, and an executable
at the unit's ExecStart path (which is /opt/... on a real host)."""

from __future__ import annotations

import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.deploykit import UNIT, read_unit, receive_notification
from support.server import ROOT, start_server

ANALYZE = shutil.which("systemd-analyze")
HOST_UNITS = next((p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()), None)
needs_analyze = pytest.mark.skipif(
    ANALYZE is None or HOST_UNITS is None, reason="systemd-analyze and the host's unit directory are needed"
)
INSTANCE = "acme"


def alternate_root(directory: Path, unit_text: str) -> Path:
    """A file system root where `systemd-analyze --root` finds the unit and its ExecStart."""
    assert HOST_UNITS is not None
    shutil.copytree(HOST_UNITS, directory / "usr/lib/systemd/system", symlinks=True)
    (directory / "etc/systemd/system").mkdir(parents=True)
    (directory / "etc/systemd/system" / UNIT.name).write_text(unit_text)
    executable = directory / read_unit().value("ExecStart").split()[0].lstrip("/")
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    return directory


def analyze(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *args, f"--root={root}", f"dbsvc@{INSTANCE}.service"], capture_output=True, text=True, timeout=120
    )


@needs_analyze
def test_unit_verifies_without_a_single_warning(tmp_path):
    result = analyze(alternate_root(tmp_path, UNIT.read_text()), "verify", "--man=no", "--generators=no")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@needs_analyze
def test_verify_would_report_a_mistake_in_the_unit(tmp_path):
    """The check above means something: the same tree with one misspelt key is not silent."""
    broken = UNIT.read_text().replace("ProtectSystem=strict", "ProtectSytem=strict")
    result = analyze(alternate_root(tmp_path, broken), "verify", "--man=no", "--generators=no")
    assert "Unknown key" in result.stderr and "ProtectSytem" in result.stderr


@needs_analyze
def test_unit_exposure_is_at_most_two(tmp_path):
    """`systemd-analyze security` scores 0 (locked down) to 10 (no hardening); 20 is its 2.0."""
    result = analyze(alternate_root(tmp_path, UNIT.read_text()), "security", "--offline=true", "--threshold=20")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr


def test_unit_is_type_notify_and_writes_only_the_tenant_directory():
    unit = read_unit()
    env = unit.environment(INSTANCE)
    assert unit.value("Type") == "notify" and unit.value("NotifyAccess") == "main"
    assert unit.value("ProtectSystem") == "strict"
    assert unit.values("ReadWritePaths") == [f"-{env['SERVICE_DATA']}/%i"]
    assert env["SERVICE_TENANT"] == INSTANCE


def test_stop_timeout_exceeds_the_servers_shutdown_timeout():
    unit = read_unit()
    assert unit.value("KillSignal") == "SIGTERM"
    stop = int(unit.value("TimeoutStopSec"))
    assert stop > float(unit.environment(INSTANCE)["SERVICE_SHUTDOWN_TIMEOUT"])


@pytest.fixture
def host_root() -> Iterator[Path]:
    """The unit's absolute paths, under a temporary directory (short: it holds a socket)."""
    with tempfile.TemporaryDirectory(prefix="dbsvc-unit-") as directory:
        yield Path(directory)


def unit_command(root: Path, instance: str) -> tuple[Path, dict[str, str]]:
    """ExecStart and the environment of the unit, its paths moved under `root`: the schema
    file to serve, and the variables (Environment=, then the instance's EnvironmentFile=)."""
    unit = read_unit()
    argv = shlex.split(unit.value("ExecStart"))
    assert argv[1] == "serve" and len(argv) == 3, argv
    schema = root / argv[2].lstrip("/")
    schema.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "schemas" / "blog.dbs", schema)
    env = unit.environment(instance)
    env["SERVICE_DATA"] = str(root / env["SERVICE_DATA"].lstrip("/"))
    env_file = root / unit.value("EnvironmentFile").replace("%i", instance).lstrip("/")
    env_file.write_text("SERVICE_PORT=0\n")  # the one per-instance setting needed here
    for line in env_file.read_text().splitlines():
        name, _, value = line.partition("=")
        env[name] = value
    return schema, env


def create_tenant(env: dict[str, str], name: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "tenant", "create", name],
        env={"SERVICE_DATA": env["SERVICE_DATA"], "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_server_started_as_the_unit_starts_it_serves_its_tenant(host_root):
    schema, env = unit_command(host_root, INSTANCE)
    create_tenant(env, INSTANCE)
    notify_path = host_root / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify_socket:
        notify_socket.bind(str(notify_path))
        server = start_server(schema, Path(env["SERVICE_DATA"]), {**env, "NOTIFY_SOCKET": str(notify_path)})
        try:
            assert receive_notification(notify_socket)["READY"] == "1"
            created = server.post("/api/user", {"email": "u@x.io", "name": "U"})
            assert created.status == 201
            assert server.get(created.headers["location"]).json["email"] == "u@x.io"
        finally:
            status = server.stop(getattr(signal, read_unit().value("KillSignal")))
        assert receive_notification(notify_socket)["STOPPING"] == "1"
    assert status == 0
    tenant = Path(env["SERVICE_DATA"]) / INSTANCE  # the unit's only ReadWritePaths=
    assert sorted(p.name for p in tenant.iterdir()), "the tenant's files are in its directory"
    assert sorted(p.name for p in tenant.parent.iterdir()) == [INSTANCE], "nothing written beside it"


def test_instance_without_a_tenant_exits_with_the_status_the_unit_does_not_restart(host_root):
    schema, env = unit_command(host_root, "nosuch")
    Path(env["SERVICE_DATA"]).mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(schema)],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == int(read_unit().value("RestartPreventExitStatus")) == 2
    assert "dbsvc tenant create nosuch" in result.stderr
    assert list(Path(env["SERVICE_DATA"]).iterdir()) == [], "a missing tenant is never created"
