"""Every mutant of some modules against the plain test functions of some test files, in one process.

Usage (from the repository root, after `bench/mutation.py` has made `mutants/`)::

    python bench/mutation_inprocess.py dbsvc/compiler/openapi.py tests/compiler/test_openapi_mutants.py
    python bench/mutation_inprocess.py dbsvc/compiler/asyncapi.py tests/compiler/test_asyncapi_mutants.py \
        --prefix dbsvc.compiler.asyncapi.x__feed_query__mutmut_

`--only NAME` runs that mutant alone (its whole name, repeatable: `--only ..._5` is mutant 5,
never 50-59 too); `--prefix P` every mutant whose name starts with P; neither, every mutant.
A name that is no mutant of the modules is refused before anything runs.

mutmut's trampolines read `MUTANT_UNDER_TEST` at every call, so one process can set it mutant
after mutant and call the tests itself: no fork, no pytest collection per mutant. On the
document builders (pure functions, each test a few milliseconds) that is a hundred times
mutmut's pace on a loaded machine (docs/mutation.md, "compiler/openapi.py, ..."). It is the
hand check of docs/mutation.md ("killed by hand") at scale, not a replacement for mutmut:

- Only test functions without fixtures are called (`parametrize` marks are honoured: stacked,
  one name or several, plain values or `pytest.param` with its id); the rest are listed as
  skipped. A test that needs pytest's machinery belongs in a mutmut run.
- Fewer tests can only add survivors, never false kills; every survivor is to be read, and
  killed by a test or judged, as after a mutmut run.
- Pure code only: a mutant that leaves state behind (a cache, a global) could change the next
  one's verdict. Each test gets 20 s (SIGALRM, raised as a BaseException): a mutant that loops
  is reported as a timeout.

Writes `mutants/hand-<module>.json` (mutant -> "killed: <test>", "timeout: <test>" or
"survived") as each verdict is decided, so a run stopped part way (Ctrl-C, `timeout`, a
killed shell) keeps every verdict it reached; `--resume` keeps that file's verdicts and runs
only the mutants without one. Prints the count per module and each survivor.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PER_TEST_SECONDS = 20


def module_tests(test_files: list[str]) -> Iterator[tuple[str, str, Callable[..., object]]]:
    """(file, name, function) of every `test_` function of the files, each file imported
    as a module of its own (both runners' cases start here)."""
    for path in test_files:
        spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, fn in vars(module).items():
            if name.startswith("test_") and inspect.isfunction(fn):
                yield path, name, fn


def _cases(test_files: list[str]) -> list[tuple[str, Callable[[], object]]]:
    """(test id, a call of it) for every fixture-free test function of the files."""
    cases: list[tuple[str, Callable[[], object]]] = []
    for path, name, fn in module_tests(test_files):
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        if marks:
            params = _parameters(marks)
            if set(inspect.signature(fn).parameters) - set(params[0][1]):
                print(f"skipped (needs fixtures): {path}::{name}")
                continue
            for label, kwargs in params:
                cases.append((f"{path}::{name}[{label}]", functools.partial(fn, **kwargs)))
        elif inspect.signature(fn).parameters:
            print(f"skipped (needs fixtures): {path}::{name}")
        else:
            cases.append((f"{path}::{name}", fn))
    return cases


def _parameters(marks: list) -> list[tuple[str, dict[str, object]]]:
    """(a label, the arguments) of every combination of stacked `parametrize` marks."""
    combos: list[tuple[str, dict[str, object]]] = [("", {})]
    for mark in marks:
        step = []
        for label, given in _mark_cases(mark.args[0], mark.args[1]):
            step += [(f"{before}-{label}" if before else label, {**kwargs, **given}) for before, kwargs in combos]
        combos = step
    return combos


def _mark_cases(
    argnames: str | list[str] | tuple[str, ...], values: list[object]
) -> list[tuple[str, dict[str, object]]]:
    """(label, keyword arguments) per case of one `parametrize` mark: one name or several
    (`"a, b"` or a list), each value plain or a `pytest.param(...)` (its values, its id)."""
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
    out: list[tuple[str, dict[str, object]]] = []
    for value in values:
        label = None
        if type(value).__name__ == "ParameterSet":  # pytest.param
            label = value.id  # type: ignore[attr-defined]
            value = value.values  # type: ignore[attr-defined]
            if len(names) == 1:
                value = value[0]  # type: ignore[index]
        row = [value] if len(names) == 1 else list(value)  # type: ignore[call-overload]
        out.append((label or "-".join(map(str, row)), dict(zip(names, row, strict=True))))
    return out


def _mutants(module: str, only: list[str], prefixes: Sequence[str] = ()) -> list[str]:
    """The mutants of `module` (its `.meta`, from the current directory) in number order:
    those named whole in `only` and those starting with one of `prefixes`; all of them when
    both are empty."""
    meta = json.loads(Path(module + ".meta").read_text())
    names = sorted(meta["exit_code_by_key"], key=lambda k: (k.rsplit("__mutmut_", 1)[0], int(k.rsplit("_", 1)[1])))
    if not only and not prefixes:
        return names
    wanted = set(only)
    return [n for n in names if n in wanted or n.startswith(tuple(prefixes))]


def _verdict(cases: list[tuple[str, Callable[[], object]]]) -> str:
    for case_id, call in cases:
        signal.alarm(PER_TEST_SECONDS)
        try:
            call()
        except MutantTimeout:
            return f"timeout: {case_id}"
        except KeyboardInterrupt:  # the operator's Ctrl-C stops the run; it is no verdict
            raise
        except BaseException:  # an assertion, a crash, SystemExit: the mutant is seen
            return f"killed: {case_id}"
        finally:
            signal.alarm(0)
    return "survived"


def _save(out: Path, verdicts: dict[str, str]) -> None:
    """The verdicts so far, replacing the file whole (a stop during the write leaves the
    previous file, never half of one)."""
    part = out.with_name(out.name + ".part")
    part.write_text(json.dumps(verdicts, indent=1) + "\n")
    os.replace(part, out)


def run_module(
    module: str,
    cases: list[tuple[str, Callable[[], object]]],
    only: list[str],
    out: Path,
    resume: bool,
    prefixes: Sequence[str] = (),
) -> dict[str, str]:
    """The mutants of `module` chosen by `only` and `prefixes` (`_mutants`) against the cases,
    each verdict written to `out` as soon as it is decided; with `resume`, the verdicts
    already in `out` are kept and those mutants not run again."""
    verdicts: dict[str, str] = json.loads(out.read_text()) if resume and out.exists() else {}
    for name in _mutants(module, only, prefixes):
        if name in verdicts:
            continue
        os.environ["MUTANT_UNDER_TEST"] = name
        try:
            verdicts[name] = _verdict(cases)
        finally:
            os.environ["MUTANT_UNDER_TEST"] = ""
        _save(out, verdicts)
    return verdicts


class MutantTimeout(BaseException):
    """A case outlasted PER_TEST_SECONDS. Not TimeoutError: that is an OSError, which the
    code under test may catch (a store's `except OSError`) and turn into a failure of its
    own, so a slow case read as a kill (session 20: walks.py `_ascending_runs` 1 "killed" by
    the 905 s SQLite case)."""


def _alarm(signum: int, frame: object) -> None:
    raise MutantTimeout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="modules (dbsvc/...) and test files (tests/...)")
    parser.add_argument("--only", action="append", default=[], help="a mutant's whole name (repeatable)")
    parser.add_argument("--prefix", action="append", default=[], help="mutants whose names start so (repeatable)")
    parser.add_argument("--resume", action="store_true", help="keep the verdicts already written, run the others")
    args = parser.parse_args(argv)
    modules = [p for p in args.paths if p.startswith("dbsvc/")]
    test_files = [p for p in args.paths if p.startswith("tests/")]
    os.chdir(ROOT / "mutants")  # mutmut's copy: the mutated package and the copied tests
    sys.path[:0] = [str(ROOT / "mutants"), str(ROOT / "mutants" / "tests")]
    os.environ["MUTANT_UNDER_TEST"] = ""
    known = {name for module in modules for name in _mutants(module, [])}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        parser.error(
            f"--only takes a mutant's whole name (--prefix for a prefix); no such mutant: {', '.join(unknown)}"
        )
    cases = _cases(test_files)
    for _, call in cases:  # the clean run: every case passes unmutated
        call()
    print(f"{len(cases)} cases pass unmutated", flush=True)
    signal.signal(signal.SIGALRM, _alarm)
    for module in modules:
        started = time.monotonic()
        verdicts = run_module(
            module, cases, args.only, Path(f"hand-{Path(module).name}.json"), args.resume, args.prefix
        )
        survivors = [n for n, v in verdicts.items() if v == "survived"]
        timeouts = [n for n, v in verdicts.items() if v.startswith("timeout")]
        print(
            f"{module}: {len(verdicts)} mutants, {len(verdicts) - len(survivors) - len(timeouts)} killed, "
            f"{len(timeouts)} timeout, {len(survivors)} survived ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        for name in survivors + timeouts:
            print(f"  {verdicts[name]}: {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
