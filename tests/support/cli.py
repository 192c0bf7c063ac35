"""The command line as a user runs it: `python dbsvc.py ARGS` in a child process.

The child gets the test's environment without any `SERVICE_*`, `RUST_LOG` or `DBSVC_FAULT`
of its own, plus exactly the variables the test names, so a setting leaking from the
developer's shell or from another test can never change what a command does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "dbsvc.py"


def clean_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ minus dbsvc's own variables, plus `env`."""
    full = {
        k: v for k, v in os.environ.items() if not k.startswith("SERVICE_") and k not in ("RUST_LOG", "DBSVC_FAULT")
    }
    full.update(env or {})
    return full


def run_dbsvc(
    *args: str, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run `dbsvc ARGS` to completion; stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_on_tenant(
    data: str | os.PathLike[str], *args: str, tenant: str = "t", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`run_dbsvc` with SERVICE_DATA and SERVICE_TENANT naming one tenant (the data tools'
    tests), plus `env`."""
    return run_dbsvc(*args, env={"SERVICE_DATA": str(data), "SERVICE_TENANT": tenant, **(env or {})})
