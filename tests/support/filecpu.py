"""Where the suite's time goes, per test file: CPU of the test process and of the children it
waited for, beside wall time (opt-in: `DBSVC_TEST_FILE_CPU=PATH python -m pytest ...`;
tests/conftest.py loads this plugin only then).

On this project's shared 2-core hosts a test's wall time is mostly time spent runnable but
not running (at load 24, 25.0 s of a 27.8 s power-loss run waited in the run queue:
/proc/self/schedstat), so `--durations` ranks files by the load they met, not by their cost.
CPU does not move with the load: the suite's wall on 2 workers is at least its CPU over 2.

Each process (the xdist controller and each worker) appends one line per test file to PATH
at its end: total CPU, own CPU, children's CPU (RUSAGE_CHILDREN: every server, CLI and crash
child the file's tests waited for), wall, test count, file. Fixture setup and teardown count
for the test that ran them, so a module-scoped server counts for its file. Sum a file's lines
across workers; `sort -rn PATH` ranks them.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator

import pytest

_PER_FILE: dict[str, list[float]] = {}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    wall, own, children = time.perf_counter(), time.process_time(), _children_cpu()
    yield
    row = _PER_FILE.setdefault(item.nodeid.split("::")[0], [0.0, 0.0, 0.0, 0])
    row[0] += time.process_time() - own
    row[1] += _children_cpu() - children
    row[2] += time.perf_counter() - wall
    row[3] += 1


def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get("DBSVC_TEST_FILE_CPU")
    if not path or not _PER_FILE:
        return
    rows = sorted(_PER_FILE.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    with open(path, "a", encoding="utf-8") as out:
        for name, (own, children, wall, count) in rows:
            out.write(f"{own + children:8.1f} {own:8.1f} {children:8.1f} {wall:8.1f} {int(count):5d} {name}\n")
