"""The xdist workers split pytest's assertion rewrite of the test files between them.

Every xdist worker collects the whole suite, and pytest rewrites each test module's `assert`
statements (parse, rewrite, compile) as it imports it, keeping the result as a pyc in its
cache (under PYTHONPYCACHEPREFIX, which tests/conftest.py sets on hosts that write no
bytecode). On a host with no cache yet (a fresh CI machine), both workers rewrote all ~350
test files at the same moment: about 27 s of CPU each, half of a cold collection's 47 s
(bench/README.md, "... session 14, wt-suite3"). Here, before it collects, worker k of n
rewrites files k, k + n, k + 2n, ... of the run's paths that have no current pyc, writes
them exactly as pytest's import hook does (its own functions, the same file, an atomic
rename), then waits for the other workers' pycs (at most 120 s, and 30 s after the last
one appeared); the collection that follows reads them all from the cache. A warm cache costs a stat and a 16-byte read a file.

Nothing depends on the split but time: a pyc is checked against its source's mtime and size
when it is read, as always, and a file still missing when the wait ends is rewritten at its
import, as before. The rewritten code is pytest's, so assertion messages are unchanged.

Steps aside when not under xdist, when asserts are not rewritten (`--assert=plain`), when
no bytecode is written, or when pytest lacks the private helpers used (checked at import).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import struct
import sys
import time
from pathlib import Path

import pytest

try:
    from _pytest.assertion import rewrite
    from _pytest.assertion.rewrite import PYC_TAIL, assertstate_key, get_cache_dir, try_makedirs
except ImportError:  # another pytest's privates: collection rewrites as it always did
    rewrite = None

WAIT = 120.0  # seconds a worker waits for the others' halves before collecting anyway
STALL = 30.0  # ... or since the last of their pycs appeared (a file that does not parse has none)
POLL = 0.05


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    worker = getattr(config, "workerinput", None)
    if rewrite is None or worker is None or sys.dont_write_bytecode:
        return
    if config.getoption("assertmode") != "rewrite":
        return
    index, count = int(str(worker["workerid"]).removeprefix("gw")), int(worker["workercount"])
    files = rewritten_files(config)
    for path in files[index::count]:
        if not current(path) and not write_rewritten(config, path):
            return  # an unwritable cache: the others cannot write theirs either
    # The others write in this same order, so a poll looks at the first one not seen yet.
    others = [path for number, path in enumerate(files) if number % count != index]
    start = progress = time.monotonic()
    while others and time.monotonic() - start < WAIT and time.monotonic() - progress < STALL:
        if current(others[0]):
            others.pop(0)
            progress = time.monotonic()
        else:
            time.sleep(POLL)


def rewritten_files(config: pytest.Config) -> list[Path]:
    """The files of the run's paths that pytest would rewrite as test modules, sorted."""
    patterns = [*config.getini("python_files"), "conftest.py"]
    skipped = config.getini("norecursedirs")
    found: set[Path] = set()
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path.is_file():
            found.add(path)
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = [name for name in subfolders if not any(fnmatch.fnmatch(name, p) for p in skipped)]
            found.update(Path(folder, name) for name in names if any(fnmatch.fnmatch(name, p) for p in patterns))
    return sorted(found)


def pyc_of(path: Path) -> Path:
    return get_cache_dir(path) / (path.name[:-3] + PYC_TAIL)


def current(path: Path) -> bool:
    """Whether `path` has a pyc that pytest's hook will take: its header's magic, flags,
    mtime and size (the checks of the hook's own reader) match the source."""
    try:
        stat = path.stat()
        with open(pyc_of(path), "rb") as pyc:
            header = pyc.read(16)
    except OSError:
        return False
    expected = struct.pack("<LL", int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
    return header == importlib.util.MAGIC_NUMBER + b"\x00\x00\x00\x00" + expected


def write_rewritten(config: pytest.Config, path: Path) -> bool:
    """Rewrite and cache `path` as the import hook would (its `exec_module`, less the exec);
    False when the cache cannot be written."""
    if not try_makedirs(get_cache_dir(path)):
        return False
    try:
        source_stat, code = rewrite._rewrite_test(path, config)
    except SyntaxError:  # its import reports it, as before
        return True
    return bool(rewrite._write_pyc(config.stash[assertstate_key], code, source_stat, pyc_of(path)))
