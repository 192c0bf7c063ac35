"""Mutation testing, bounded and incremental: `mutmut run` on the changed modules only, then
killed / survived / timeout per module.

Usage (from the repository root; docs/mutation.md has the why and the last figures)::

    python bench/mutation.py                        # modules changed since the last recorded run
    python bench/mutation.py --since origin/main    # modules changed since a git revision
    python bench/mutation.py dbsvc/auth/jwt.py      # these modules, whatever changed
    python bench/mutation.py --report               # print the table of the last results only
    python bench/mutation.py --survivors dbsvc/storage/commit.py   # also list what survived
    python bench/mutation.py --recheck dbsvc/auth/guard.py   # only what is not killed yet
    python bench/mutation.py --restat --recheck dbsvc/http/connection.py   # tests changed how they run

What it mutates and which tests it runs is the `[mutmut]` section of setup.cfg (mutmut 3,
`pip install -e '.[mutation]'`). mutmut copies the tree to `mutants/`, records which test
calls which function (in its own process only: a test whose server runs in a child process
covers nothing there), and runs each mutant against just those tests.

Bounds: every run is `nice -n 15`, `--max-children` workers (default 1; the machine has two
cores shared with everything else) and `--time-limit` seconds of wall clock (default 1800).
A run cut short keeps every verdict it reached: the next run of an unchanged module only
runs its mutants that have no verdict yet. `mutants/dbsvc-mutation.json` records, per
module, the source hash the verdicts belong to and whether every mutant has one.
"""

from __future__ import annotations

import argparse
import configparser
import fnmatch
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = "mutants"
RECORD = "dbsvc-mutation.json"
STATS = "mutmut-stats.json"  # mutmut's record of which test calls which function

# mutmut's exit codes per mutant (mutmut/stats.py), folded into the columns we print.
STATUS = {
    1: "killed",
    3: "killed",
    37: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    34: "skipped",
}
COLUMNS = ("killed", "survived", "timeout", "no tests", "other", "unchecked")


@dataclass
class Tally:
    module: str
    counts: dict[str, int]
    survivors: list[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def configured_patterns(root: Path) -> list[str]:
    """The `only_mutate` globs of setup.cfg's [mutmut] section."""
    parser = configparser.ConfigParser()
    parser.read(root / "setup.cfg")
    raw = parser.get("mutmut", "only_mutate", fallback="")
    return [line.strip() for line in raw.splitlines() if line.strip()]


def target_modules(root: Path) -> list[str]:
    """Every module mutmut would mutate, as repository-relative paths."""
    patterns = configured_patterns(root)
    found = []
    for path in sorted((root / "dbsvc").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(fnmatch.fnmatch(rel, p) for p in patterns):
            found.append(rel)
    return found


def source_hash(root: Path, module: str) -> str:
    return hashlib.sha256((root / module).read_bytes()).hexdigest()[:16]


def dotted(module: str) -> str:
    """dbsvc/storage/commit.py -> dbsvc.storage.commit (the prefix of its mutant names)."""
    return module[: -len(".py")].replace("/", ".")


def load_record(root: Path) -> dict[str, dict]:
    try:
        return json.loads((root / MUTANTS / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def save_record(root: Path, record: dict[str, dict]) -> None:
    (root / MUTANTS).mkdir(exist_ok=True)
    (root / MUTANTS / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def changed_since(root: Path, rev: str, targets: list[str]) -> list[str]:
    """Targets that differ from `rev` in the work tree (committed or not) or are untracked."""
    diff = subprocess.run(
        ["git", "diff", "--name-only", rev, "--", "dbsvc"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--", "dbsvc"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    changed = set(diff) | set(untracked)
    return [m for m in targets if m in changed]


def changed_since_record(root: Path, targets: list[str]) -> list[str]:
    """Targets whose source is not the one of a finished recorded run."""
    record = load_record(root)
    return [
        m for m in targets if record.get(m, {}).get("hash") != source_hash(root, m) or not record[m].get("complete")
    ]


def verdicts(root: Path, module: str) -> dict[str, int | None]:
    """mutant name -> mutmut exit code (None: not run yet) from mutmut's per-file meta."""
    try:
        meta = json.loads((root / MUTANTS / (module + ".meta")).read_text())
    except (OSError, ValueError):
        return {}
    return dict(meta.get("exit_code_by_key", {}))


def tally(root: Path, module: str) -> Tally:
    counts = dict.fromkeys(COLUMNS, 0)
    survivors = []
    for name, code in sorted(verdicts(root, module).items()):
        status = "unchecked" if code is None else STATUS.get(code, "other")
        counts[status] += 1
        if status == "survived":
            survivors.append(name)
    return Tally(module, counts, survivors)


def mutant_selection(root: Path, module: str, record: dict[str, dict]) -> list[str]:
    """What to hand `mutmut run` for one module: every mutant when its source changed since
    the verdicts were reached, else only the ones a cut-short run left without a verdict."""
    entry = record.get(module, {})
    if entry.get("hash") == source_hash(root, module):
        pending = [name for name, code in verdicts(root, module).items() if code is None]
        if pending:
            return pending
        if entry.get("complete"):
            return []
    return [dotted(module) + ".*"]


def recheck_selection(root: Path, module: str) -> list[str]:
    """The mutants of `module` without a final verdict: survivors, "no tests" (new tests may
    kill them now) and unchecked. Killed and timed-out verdicts stand: adding tests cannot
    revive them, and mutmut itself resets the verdicts of a function whose source changed
    (they show as unchecked from its next run on, which a plain run then picks up)."""
    return [
        name
        for name, code in verdicts(root, module).items()
        if code is None or STATUS.get(code) in ("survived", "no tests")
    ]


def run_mutmut(root: Path, selection: list[str], max_children: int, deadline: float, log_path: Path) -> int | None:
    """One `mutmut run`, niced, killed at `deadline` (monotonic). None when it was cut."""
    remaining = deadline - time.monotonic()
    if remaining < 30:
        return None
    # Not `python -m mutmut`: that would run mutmut.__main__ a second time under another name
    # (mutmut warns); this calls the CLI as the console script does.
    command = [
        "nice",
        "-n",
        "15",
        sys.executable,
        "-c",
        "from mutmut.__main__ import cli; cli()",
        "run",
        "--max-children",
        str(max_children),
        *selection,
    ]
    with open(log_path, "ab") as log:
        log.write(f"\n$ mutmut run --max-children {max_children} ... ({len(selection)} selectors)\n".encode())
        log.flush()
        process = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            stop(process)
            return None
        except BaseException:
            stop(process)  # Ctrl-C or SIGTERM: take mutmut's workers along
            raise


def stop(process: subprocess.Popen) -> None:
    """End mutmut and the workers it forked (its own process group)."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def print_table(tallies: list[Tally], show_survivors: bool) -> None:
    width = max([len(t.module) for t in tallies] + [6])
    head = "module".ljust(width) + "".join(c.rjust(10) for c in COLUMNS) + "     total"
    print(head)
    print("-" * len(head))
    sums = dict.fromkeys(COLUMNS, 0)
    for t in tallies:
        print(t.module.ljust(width) + "".join(str(t.counts[c]).rjust(10) for c in COLUMNS) + str(t.total).rjust(10))
        for c in COLUMNS:
            sums[c] += t.counts[c]
    print("-" * len(head))
    print("all".ljust(width) + "".join(str(sums[c]).rjust(10) for c in COLUMNS) + str(sum(sums.values())).rjust(10))
    if show_survivors:
        for t in tallies:
            for name in t.survivors:
                print(f"survived: {name}")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (paths such as dbsvc/auth/jwt.py)")
    parser.add_argument("--since", metavar="REV", help="mutate the modules changed since this git revision")
    parser.add_argument("--report", action="store_true", help="run nothing; print the recorded results")
    parser.add_argument("--survivors", action="store_true", help="also list every surviving mutant")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="run only the survivors, 'no tests' and unchecked mutants of the named modules",
    )
    parser.add_argument(
        "--restat",
        action="store_true",
        help="forget which test calls which function and record it again (mutmut only "
        "records new tests by itself; use this when existing tests changed what they call)",
    )
    parser.add_argument("--max-children", type=int, default=1, help="mutmut workers (default 1)")
    parser.add_argument("--time-limit", type=float, default=1800, help="seconds of wall clock (default 1800)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root.resolve()

    targets = target_modules(root)
    unknown = [m for m in args.modules if m not in targets]
    if unknown:
        parser.error(f"not in setup.cfg [mutmut] only_mutate: {', '.join(unknown)}")
    if args.modules:
        chosen = list(args.modules)
    elif args.since:
        chosen = changed_since(root, args.since, targets)
    else:
        chosen = changed_since_record(root, targets)

    if args.report:
        shown = (
            chosen
            if args.modules
            else [m for m in targets if any(code is not None for code in verdicts(root, m).values())]
        )
        print_table([tally(root, m) for m in shown], args.survivors)
        return 0
    if not chosen:
        print("no module changed since the last recorded run; nothing to mutate")
        return 0
    if args.recheck and not args.modules:
        parser.error("--recheck needs the modules to recheck")

    deadline = time.monotonic() + args.time_limit
    record = load_record(root)
    if args.modules and not args.recheck:
        # Named explicitly: run them afresh even if a finished run is on record.
        for m in chosen:
            record.pop(m, None)
    log_path = root / MUTANTS / "mutation-run.log"
    (root / MUTANTS).mkdir(exist_ok=True)
    if args.restat:
        (root / MUTANTS / STATS).unlink(missing_ok=True)
    cut = False
    for module in chosen:
        if args.recheck:
            selection = recheck_selection(root, module)
        else:
            selection = mutant_selection(root, module, record)
        if not selection:
            continue
        print(f"mutating {module} ({len(selection)} selector(s)); log: {log_path.relative_to(root)}", flush=True)
        before = source_hash(root, module)
        code = run_mutmut(root, selection, args.max_children, deadline, log_path)
        if code is None:
            cut = True
        elif code != 0:
            print(f"mutmut failed on {module} (exit {code}); see {log_path}", file=sys.stderr)
            return 2
        # The verdicts belong to the source as it was when the run started.
        done = tally(root, module)
        record[module] = {
            "hash": before,
            "complete": done.counts["unchecked"] == 0 and done.total > 0,
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        save_record(root, record)
        if cut:
            break
    print_table([tally(root, m) for m in chosen], args.survivors)
    if cut:
        print(f"time limit of {args.time_limit:g} s reached: run again to go on where it stopped")
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
