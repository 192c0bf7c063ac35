"""The `stores` fixture (tests/support/store_fixtures.py) closes a store whose test failed.

Run in a pytest of its own (a subprocess, so its failure is its own): the first test opens a
store through `stores`, writes, and fails on an assertion before any close of its own; the
second, in the same process, opens that tenant again. A store left open by the first would
still hold the tenant's lock (a flock conflicts between two opens in one process too), and
the second open would be refused with TenantLocked; the leftover's committer thread would
still run. The same two tests with `open_store` and a close as the test's last line (how
tests/storage and tests/replica closed most stores before) give that refusal: the second test
below, the case the fixture is for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

INNER = '''
import threading

from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, run, user

DATA = {data!r}


def test_a_store_opened_and_failed_before_its_close({fixture}):
    s = {opener}(create_tenant(DATA, "t"))
    run(s.insert("User", user(1)))
    assert s.live_counts()["User"] == 2, "failed on purpose"
    s.close()


def test_the_tenant_is_free_after_it(stores):
    before = {{t.name for t in threading.enumerate()}}
    s = stores(DATA + "/t")
    assert s.live_counts()["User"] == 1
    assert "dbsvc-fsync" not in before
'''


def run_inner(tmp_path: Path, opener: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(
        INNER.format(data=str(tmp_path / "data"), opener=opener, fixture="stores" if opener == "stores" else "")
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), str(TESTS), env.get("PYTHONPATH", "")])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the fixture's plugin alone: each run half as long (bench/README.md)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "support.store_fixtures",
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_store_from_the_fixture_is_closed_when_its_test_fails(tmp_path):
    done = run_inner(tmp_path, "stores")
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert "failed on purpose" in done.stdout


def test_a_store_closed_on_its_tests_last_line_is_left_open_by_a_failure(tmp_path):
    done = run_inner(tmp_path, "open_store")
    assert "2 failed" in done.stdout, done.stdout
    assert "TenantLocked" in done.stdout
