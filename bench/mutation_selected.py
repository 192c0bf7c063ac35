"""bench/mutation_inprocess.py's loop, each mutant run only against the cases that call its function.

Usage (from the repository root, after `mutants/` holds the mutated modules)::

    python bench/mutation_selected.py --out /tmp/shown.json --module dbsvc/storage/shown.py \
        --prefix 'dbsvc.storage.shown.xǁShownDictsǁremember__mutmut_' \
        tests/storage/test_storage_shown_share.py tests/storage/test_storage_shown_units.py

A stats pass runs every case once unmutated with `MUTANT_UNDER_TEST=stats` and notes which
functions' trampolines each case went through (mutmut's own record, `state()._stats`); a
mutant then runs only the cases that called its function, fastest first. On storage
modules whose test files hold cases of many functions that is several times the plain
loop's pace. The stats are kept beside the verdicts (`<out>.stats.json`) and reused by a
later run with the same `--out`, so a new test file gets its own `--out`.

Beyond mutation_inprocess.py's cases, a case may ask for `tmp_path` (a fresh directory),
`tenant` (a fresh tenant in one) or `monkeypatch` (undone after the case); an `async def`
case runs under `asyncio.run`; `--clear MODULE:NAME` empties a module-level dict or list
before each case (cursors.py's `_READERS` keeps the cursor readers a mutant built, which
the next mutant would otherwise reuse). A case marked `slow`, or one asking for any other
fixture, is left out and listed; one that fails in the stats pass is left out and listed.

These are session 22-24's `/tmp` tools (docs/mutation.md, wt-mpo12, wt-mpo13, wt-mpo14) kept
in the tree. Verdicts are written as they come (`--resume` is implicit: a mutant with a
verdict in `--out` is not run again); `--names FILE` runs exactly the mutants listed there.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import importlib.util
import inspect
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import mutation_inprocess as mi  # noqa: E402

FIXTURES = {"tmp_path", "tenant", "monkeypatch"}


def _with_fixtures(fn: Callable, need: set[str]) -> Callable:
    """`fn` called with the fixtures it asks for, made fresh and undone after each call."""

    @functools.wraps(fn)
    def call(**kwargs: object) -> object:
        directory = tempfile.mkdtemp(prefix="mutation-selected-")
        patch = None
        try:
            extra: dict[str, object] = {}
            if "tmp_path" in need:
                extra["tmp_path"] = Path(directory)
            if "tenant" in need:
                from dbsvc.storage.tenants import create_tenant

                extra["tenant"] = create_tenant(str(Path(directory) / "data"), "t")
            if "monkeypatch" in need:
                from _pytest.monkeypatch import MonkeyPatch

                patch = extra["monkeypatch"] = MonkeyPatch()
            return fn(**extra, **kwargs)
        finally:
            if patch is not None:
                patch.undo()
            shutil.rmtree(directory, ignore_errors=True)

    return call


def _cases(test_files: list[str], clear: list[str]) -> list[tuple[str, Callable[[], object]]]:
    """(case id, a call of it) for every test function of the files this runner can call."""
    cases: list[tuple[str, Callable[[], object]]] = []
    for path, name, fn in mi.module_tests(test_files):
        marks = getattr(fn, "pytestmark", [])
        if any(m.name == "slow" for m in marks):
            print(f"left out (slow): {path}::{name}")
            continue
        parametrized = [m for m in marks if m.name == "parametrize"]
        combos = mi._parameters(parametrized) if parametrized else [("", {})]
        need = set(inspect.signature(fn).parameters) - set(combos[0][1])
        if need - FIXTURES:
            print(f"left out (needs fixtures {sorted(need - FIXTURES)}): {path}::{name}")
            continue
        if inspect.iscoroutinefunction(fn):
            fn = functools.wraps(fn)(lambda *a, _fn=fn, **k: asyncio.run(_fn(*a, **k)))
        made = _with_fixtures(fn, need) if need else fn
        for label, kwargs in combos:
            call = functools.partial(made, **kwargs)
            if clear:
                call = functools.partial(_cleared, clear, call)
            cases.append((f"{path}::{name}" + (f"[{label}]" if label else ""), call))
    return cases


def _cleared(clear: list[str], call: Callable[[], object]) -> object:
    for target in clear:
        module, _, name = target.partition(":")
        getattr(importlib.import_module(module), name).clear()
    return call()


def _stats(cases: list[tuple[str, Callable[[], object]]], path: Path) -> dict[str, dict]:
    """case id -> its seconds and the trampolined functions it called (read from `path` when
    a run with the same `--out` made it)."""
    if path.exists():
        return json.loads(path.read_text())
    from mutmut.__main__ import state

    stats: dict[str, dict] = {}
    os.environ["MUTANT_UNDER_TEST"] = "stats"
    for case_id, call in cases:
        state()._stats.clear()
        began = time.monotonic()
        try:
            call()
        except Exception as exc:  # fails unmutated (under the tracing): no verdict can rest on it
            print(f"left out, fails in the stats pass: {case_id}: {exc!r:.200}", flush=True)
            continue
        stats[case_id] = {"seconds": time.monotonic() - began, "hits": sorted(state()._stats)}
    os.environ["MUTANT_UNDER_TEST"] = ""
    path.write_text(json.dumps(stats, indent=1))
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="test files (tests/...)")
    parser.add_argument("--module", action="append", required=True, help="a mutated module (repeatable)")
    parser.add_argument("--out", required=True, type=Path, help="the verdict file (mutant -> verdict)")
    parser.add_argument("--prefix", action="append", default=[], help="mutants whose names start so (repeatable)")
    parser.add_argument("--names", type=Path, help="a file of whole mutant names, one a line")
    parser.add_argument("--clear", action="append", default=[], help="MODULE:NAME emptied before each case")
    parser.add_argument("--seconds", type=int, default=60, help="bound of one case (default 60)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    os.chdir(ROOT / "mutants")
    sys.path[:0] = [str(ROOT / "mutants"), str(ROOT / "mutants" / "tests")]
    cases = _cases(args.tests, args.clear)
    stats = _stats(cases, out.with_suffix(".stats.json"))
    print(f"{len(stats)} of {len(cases)} cases pass the stats pass", flush=True)
    signal.signal(signal.SIGALRM, mi._alarm)
    mi.PER_TEST_SECONDS = args.seconds
    verdicts = json.loads(out.read_text()) if out.exists() else {}
    listed = args.names.read_text().split() if args.names else []
    calls = dict(cases)
    for module in args.module:
        for name in mi._mutants(module, listed, args.prefix):
            if name in verdicts:
                continue
            function = name.rsplit("__mutmut_", 1)[0]
            chosen = sorted((c for c in stats if function in stats[c]["hits"]), key=lambda c: stats[c]["seconds"])
            began = time.monotonic()
            if chosen:
                os.environ["MUTANT_UNDER_TEST"] = name
                verdicts[name] = mi._verdict([(c, calls[c]) for c in chosen])
                os.environ["MUTANT_UNDER_TEST"] = ""
            else:
                verdicts[name] = "no tests"
            mi._save(out, verdicts)
            print(f"{time.monotonic() - began:6.1f} s {name} ({len(chosen)} cases): {verdicts[name]}", flush=True)
    survivors = [n for n, v in verdicts.items() if v == "survived"]
    print(f"{len(verdicts)} verdicts, {len(survivors)} survived", *survivors, sep="\n  ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
