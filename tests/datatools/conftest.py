"""Fixtures shared by the data tools' tests; `tenant` is the backup tests' (three users,
tests/datatools/test_backup_units.py and test_restore_units.py): a file that needs another
tenant defines its own, which wins in that file."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbsvc.storage.tenants import create_tenant
from support.backupkit import write


@pytest.fixture
def data(tmp_path) -> Path:
    """The SERVICE_DATA directory of a test (tenants are created in it)."""
    return tmp_path / "data"


@pytest.fixture
def tenant(data) -> str:
    directory = create_tenant(str(data), "t")
    write(directory, 1, 2, 3)
    return directory


@pytest.fixture
def cli_in_process(monkeypatch, capsys):
    """`support.cli.run_on_tenant` in the test process: `dbsvc.cli.main` with SERVICE_DATA and
    SERVICE_TENANT set (every other SERVICE_* variable removed), standard output and error
    captured; a CompletedProcess as the subprocess form returns. The parser, command bodies
    and exit mapping are the same, without a Python start per call (and mutmut sees them)."""
    import os
    import subprocess

    from dbsvc.cli import main

    def run(data, *args: str, tenant: str = "t") -> subprocess.CompletedProcess[str]:
        with monkeypatch.context() as env:
            for name in list(os.environ):
                if name.startswith("SERVICE_"):
                    env.delenv(name)
            env.setenv("SERVICE_DATA", str(data))
            env.setenv("SERVICE_TENANT", tenant)
            capsys.readouterr()
            code = main(list(args))
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["dbsvc", *args], code, out, err)

    return run


@pytest.fixture(autouse=True)
def empty_working_directory(monkeypatch, tmp_path_factory):
    """Each test runs in an empty working directory of its own: a file a tool writes to a
    relative path by mistake lands there, not in the checkout (or mutmut's `mutants/`, where
    a stray `schema.json` once let a mutant that re-read the schema by a relative path pass)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
