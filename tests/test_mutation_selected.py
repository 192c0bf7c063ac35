"""bench/mutation_selected.py's own decisions, in process: which cases a test file gives
(the fixtures it can hand over made fresh for each call and undone after it, an `async
def` case run to its end, a `slow` case or one asking for another fixture left out) and
the dict `--clear` empties before each case. A coroutine called without being run would
pass every mutant: the async case here fails when run, so it must count as a failure."""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("mutation_selected", ROOT / "bench" / "mutation_selected.py")
assert spec is not None and spec.loader is not None
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)

SAMPLE = """
import asyncio
import os

import pytest
import sample_held
from sample_held import HELD, SEEN


def test_plain():
    SEEN.append(("plain", dict(HELD)))
    HELD["kept"] = 1


@pytest.mark.parametrize("x", [1, 2])
def test_dir(x, tmp_path):
    assert tmp_path.is_dir() and not any(tmp_path.iterdir())
    (tmp_path / "f").write_text("x")
    SEEN.append(("dir", x, str(tmp_path)))


def test_patched(monkeypatch):
    monkeypatch.setenv("MUTATION_SELECTED_PROBE", "set")
    SEEN.append(("patched", os.environ["MUTATION_SELECTED_PROBE"]))


async def test_async_fails():
    await asyncio.sleep(0)
    raise AssertionError("ran")


@pytest.mark.slow
def test_slow():
    pass


def test_other_fixture(capsys):
    pass
"""


def test_a_files_cases_get_fresh_fixtures_async_runs_and_slow_or_unknown_ones_are_left_out(tmp_path, capsys):
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(SAMPLE))
    module_name = "sample_held"
    held = type(sys)(module_name)
    held.HELD, held.SEEN = {}, []
    sys.modules[module_name] = held
    try:
        cases = dict(runner._cases([str(path)], [f"{module_name}:HELD"]))
        said = capsys.readouterr().out
        assert "left out (slow)" in said and "test_slow" in said
        assert "needs fixtures ['capsys']" in said
        assert sorted(cases) == sorted(
            f"{path}::{name}"
            for name in ("test_plain", "test_dir[1]", "test_dir[2]", "test_patched", "test_async_fails")
        )
        held.HELD["left"] = 1
        cases[f"{path}::test_plain"]()
        assert held.SEEN == [("plain", {})]  # HELD emptied before the case
        for label in ("1", "2"):
            cases[f"{path}::test_dir[{label}]"]()
        directories = [entry[2] for entry in held.SEEN if entry[0] == "dir"]
        assert len(set(directories)) == 2 and not any(Path(d).exists() for d in directories)
        cases[f"{path}::test_patched"]()
        assert ("patched", "set") in held.SEEN and "MUTATION_SELECTED_PROBE" not in os.environ  # undone after
        with pytest.raises(AssertionError, match="ran"):
            cases[f"{path}::test_async_fails"]()
    finally:
        del sys.modules[module_name]
