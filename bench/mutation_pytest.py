"""Every mutant of `mutants/` against some tests under pytest, fixtures and all, in one process.

Usage (from the repository root, after `mutants/` holds the mutated modules)::

    python bench/mutation_pytest.py --prefix dbsvc.storage.commit.xǁCommitQueueǁsubmit__mutmut_ \
        tests/storage/test_storage_commit_failures.py tests/storage/test_storage_group_write.py

`--only NAME` is one mutant, by its whole name (repeatable: `--only ..._5` is mutant 5, never
50-59 too; a name that is no mutant is refused before anything runs); `--prefix P` every
mutant whose name starts with P. One of them at least.

`bench/mutation_inprocess.py` calls plain test functions only; the commit path's tests need
pytest's fixtures (`tenant`, `monkeypatch`, `caplog`), and a mutmut run pays a forked
worker and the selection's stats per mutant (docs/mutation.md, "Cost"). This is a pytest
plugin: pytest collects the named tests once, in `mutants/`, and `pytest_runtestloop` runs
them unmutated (every one must pass), then, for each mutant, sets `MUTANT_UNDER_TEST` (the
trampolines read it at every call) and runs the tests one by one with `runtestprotocol`
(each test's fixtures set up and torn down afresh) until one fails: the mutant is killed by
it. A test that outlasts `--seconds` (SIGALRM) fails the same way, recorded as a timeout.

At that limit every process the run started is ended first (SIGKILL), however deep and in
whatever process group or session: the runner is its tree's subreaper (PR_SET_CHILD_SUBREAPER),
so an orphan of a killed child comes back to it instead of init and is still found. The alarm
is raised again every few seconds until the phase ends, in case the test swallowed it. (A
supervisor mutant that ran the test runner's own command line as its workers, session 19,
kept copies of the runner running for 12 minutes: each copy was its own process group,
and the alarm reached the runner alone.) A runner started by another one, a mutant's doing,
refuses to run, and so does a second run of one label while the first goes on. (To stop a
run, SIGKILL it or Ctrl-C it between mutants: a SIGTERM or SIGINT that lands inside
`supervise` under test is the supervisor's to handle, and the run goes on.)

Failures are reported with `--tb=line` unless told otherwise (`--tb`): pytest's long report
reads the source of every frame, and a mutated module holds every mutant's copy of every
function, so a mutant killed by an exception raised inside app.py took 100-250 s under load
where the test takes well under one (docs/mutation.md, session 11, wt-mpo). The line style
still names the exception's class, which is how a timeout is told from a kill.

Fewer tests can only add survivors, never false kills; a mutant that leaves state behind
(a global, a thread) could change the next one's verdict, so a survivor or a surprising kill
is rerun alone (`--only` its full name). Writes `mutants/pytest-<label>.json` (mutant ->
"killed: <test id>", "timeout: <test id>" or "survived") as it goes, and prints one line a
mutant and the counts per function at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36
AGAIN_SECONDS = 5  # the alarm again, while a test that swallowed it runs on


class MutantTimeout(BaseException):
    """A test outlasted its bound under a mutant (a write that never settles). A BaseException,
    so a mutant looping inside the product's own `except Exception` (writeroutes' step) cannot
    swallow it and hang the runner; pytest still reports it as the test's failure."""


def _alarm(signum: int, frame: object) -> None:
    end_descendants()
    signal.alarm(AGAIN_SECONDS)  # cancelled by `_bounded` once the phase has ended
    raise MutantTimeout


def become_subreaper() -> None:
    """Orphans of this process's descendants become its children, not init's (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (/proc/PID/stat's fourth field, after the name)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants() -> list[int]:
    """Every process below this one: children, theirs, and (as subreaper) their orphans."""
    parents = _parents()
    found: list[int] = []
    below = {os.getpid()}
    while True:
        step = [pid for pid, parent in parents.items() if parent in below and pid not in found]
        if not step:
            return found
        found += step
        below = set(step)


def end_descendants() -> None:
    """SIGKILL to every descendant, again until none is left (one may fork meanwhile); the
    orphans that came back to this process meanwhile are reaped. Its children of before are
    left to reap to their `Popen`, which the test or its teardown waits on."""
    own = {pid for pid, parent in _parents().items() if parent == os.getpid()}
    for _ in range(20):
        alive = [pid for pid in descendants() if not _zombie(pid)]
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    for pid in descendants():
        if pid not in own and _zombie(pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _zombie(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True  # gone


def inside_a_run() -> bool:
    """Whether an ancestor of this process is a runner of this script: a mutant started the
    runner's command line again (a supervisor's workers are its own command line)."""
    interpreter = os.path.realpath(sys.executable)
    pid = os.getppid()
    while pid > 1:
        proc = Path("/proc") / str(pid)
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            python = os.path.realpath(proc / "exe") == interpreter  # not `timeout ... python this`
            pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
        if python and any(arg.endswith(b"mutation_pytest.py") for arg in argv):
            return True
    return False


def _mutants(only: list[str], prefixes: list[str]) -> list[str]:
    """The mutants of every `.meta` under mutants/dbsvc named whole in `only` or starting
    with one of `prefixes`, in number order."""
    wanted, starts = set(only), tuple(prefixes)
    names: list[str] = []
    for meta in sorted((ROOT / "mutants" / "dbsvc").rglob("*.py.meta")):
        names += [n for n in json.loads(meta.read_text())["exit_code_by_key"] if n in wanted or n.startswith(starts)]
    return sorted(names, key=lambda k: (k.rsplit("__mutmut_", 1)[0], int(k.rsplit("_", 1)[1])))


class Runner:
    """The pytest plugin: `pytest_runtestloop` runs every mutant against the collected tests."""

    def __init__(self, mutants: list[str], seconds: int, out: Path, resume: bool) -> None:
        self.mutants, self.seconds, self.out = mutants, seconds, out
        self.verdicts: dict[str, str] = json.loads(out.read_text()) if resume and out.exists() else {}

    def _first_failure(self, session: pytest.Session) -> tuple[str, str] | None:
        """("killed" or "timeout", test id) of the first test that fails, or None. Module and
        session fixtures (tests/http's in-process server) stay up from one test to the next,
        as in a plain run; all are torn down after a failure, so a mutant that broke one
        leaves nothing behind for the next mutant."""
        items = session.items
        for at, item in enumerate(items):
            try:
                reports = runtestprotocol(item, log=False, nextitem=items[at + 1] if at + 1 < len(items) else None)
            except Exception as exc:  # pytest's own report of the failure broke (a mutant that
                # recursed without end leaves too little stack for its traceback's `ast.parse`)
                self._tear_down(session)
                return "killed", f"{item.nodeid} ({type(exc).__name__} in pytest's report)"
            failed = [r for r in reports if r.failed]
            if failed:
                self._tear_down(session)
                seen = "timeout" if any("MutantTimeout" in str(r.longrepr) for r in failed) else "killed"
                return seen, item.nodeid
        return None

    @staticmethod
    def _tear_down(session: pytest.Session) -> None:
        """Every fixture torn down; one that fails to (a server a mutant wedged) is dropped."""
        try:
            session._setupstate.teardown_exact(None)
        except Exception:  # noqa: BLE001 - the mutant is killed already
            session._setupstate.stack.clear()

    # The bound covers each phase's own work, never pytest's report of it: an alarm inside
    # the report's source formatting (`ast.parse`) breaks the session.
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._bounded())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._bounded())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._bounded())

    def _bounded(self) -> Generator[None, object, object]:
        signal.alarm(self.seconds)
        try:
            return (yield)
        finally:
            signal.alarm(0)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        signal.signal(signal.SIGALRM, _alarm)
        os.environ["MUTANT_UNDER_TEST"] = ""
        clean = self._first_failure(session)
        if clean:
            print(f"\nthe clean run failed: {clean}", flush=True)
            session.testsfailed = 1
            return True
        print(f"\n{len(session.items)} tests pass unmutated; {len(self.mutants)} mutants", flush=True)
        for name in self.mutants:
            if name in self.verdicts:
                continue
            started = time.monotonic()
            os.environ["MUTANT_UNDER_TEST"] = name
            failure = self._first_failure(session)
            verdict = "survived" if failure is None else ": ".join(failure)
            os.environ["MUTANT_UNDER_TEST"] = ""
            self.verdicts[name] = verdict
            self.out.write_text(json.dumps(self.verdicts, indent=1) + "\n")
            print(f"{time.monotonic() - started:6.1f} s {name}: {verdict}", flush=True)
        tally: Counter[tuple[str, str]] = Counter()
        for name, verdict in self.verdicts.items():
            tally[name.rsplit("__mutmut_", 1)[0], verdict.split(":")[0]] += 1
        for function in sorted({f for f, _ in tally}):
            counts = ", ".join(f"{v} {tally[function, v]}" for v in ("killed", "timeout", "survived"))
            print(f"{function}: {counts}")
        for name, verdict in self.verdicts.items():
            if verdict == "survived":
                print(f"  survived: {name}")
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="test files or ids (tests/...)")
    parser.add_argument("--only", action="append", default=[], help="a mutant's whole name (repeatable)")
    parser.add_argument("--prefix", action="append", default=[], help="mutants whose names start so (repeatable)")
    parser.add_argument("--seconds", type=int, default=30, help="bound of one test (default 30)")
    parser.add_argument("--label", default="run", help="names the verdict file mutants/pytest-<label>.json")
    parser.add_argument("--resume", action="store_true", help="keep the verdicts of that file, run the others")
    parser.add_argument(
        "--tb", default="line", choices=["line", "no", "short", "long", "auto"], help="pytest's --tb (default line)"
    )
    args = parser.parse_args(argv)
    if not args.only and not args.prefix:
        parser.error("name the mutants: --only NAME (a whole name) or --prefix P, each repeatable")
    if inside_a_run():
        print("mutation_pytest.py: started by a mutant under a mutation run: refusing", file=sys.stderr)
        return 3
    become_subreaper()
    out = ROOT / "mutants" / f"pytest-{args.label}.json"
    # Each run rewrites the whole file from its own verdicts: two runs of one label would
    # overwrite each other's (session 20: a SIGTERM meant to stop a run reached a supervisor
    # under test, whose handler took it, and the run went on beside its replacement).
    lock = open(out.with_name(out.name + ".lock"), "w")  # noqa: SIM115 - held until the run ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"mutation_pytest.py: another run writes {out.name}: refusing", file=sys.stderr)
        return 3
    mutants = _mutants(args.only, args.prefix)
    unknown = sorted(set(args.only) - set(mutants))
    if unknown:
        parser.error(
            f"--only takes a mutant's whole name (--prefix for a prefix); no such mutant: {', '.join(unknown)}"
        )
    os.chdir(ROOT / "mutants")  # mutmut's copy: the mutated package and the copied tests
    sys.path[:0] = [str(ROOT / "mutants")]
    os.environ["PYTHONPATH"] = str(ROOT / "mutants")  # a test's child process imports the copy too
    runner = Runner(mutants, args.seconds, out, args.resume)
    return pytest.main(
        ["-q", "-p", "no:randomly", "-p", "no:xdist", "--timeout=0", f"--tb={args.tb}", *args.tests], plugins=[runner]
    )


if __name__ == "__main__":
    raise SystemExit(main())
