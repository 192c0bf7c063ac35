"""bench/mutation_inprocess.py's own decisions, in process: which cases a test file gives
(fixture-free functions, every `parametrize` form: one name, several, `pytest.param` with
an id) and the verdict a mutant gets (the first failing case kills it, a test past its
alarm is a timeout, none failing is a survivor)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("mutation_inprocess", ROOT / "bench" / "mutation_inprocess.py")
assert spec is not None and spec.loader is not None
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


def test_every_parametrize_form_gives_its_cases_with_their_labels():
    assert runner._mark_cases("a, b", [(1, 2), pytest.param(3, 4, id="x")]) == [
        ("1-2", {"a": 1, "b": 2}),
        ("x", {"a": 3, "b": 4}),
    ]
    assert runner._mark_cases("a", [1, pytest.param(5, id="five"), pytest.param((6, 7))]) == [
        ("1", {"a": 1}),
        ("five", {"a": 5}),
        ("(6, 7)", {"a": (6, 7)}),
    ]
    assert runner._mark_cases(["a", "b"], [[1, 2]]) == [("1-2", {"a": 1, "b": 2})]
    with pytest.raises(ValueError):
        runner._mark_cases("a, b", [(1, 2, 3)])  # a row that does not fit its names
    stacked = [pytest.mark.parametrize("a", [1, 2]).mark, pytest.mark.parametrize("b, c", [(3, 4)]).mark]
    assert runner._parameters(stacked) == [("1-3-4", {"a": 1, "b": 3, "c": 4}), ("2-3-4", {"a": 2, "b": 3, "c": 4})]


def test_a_files_cases_are_its_fixture_free_tests_and_each_parametrized_case(tmp_path, capsys):
    path = tmp_path / "test_sample.py"
    path.write_text(
        textwrap.dedent(
            """
            import pytest

            def test_plain():
                pass

            @pytest.mark.parametrize("x, y", [(1, 2), pytest.param(3, 4, id="three")])
            def test_pairs(x, y):
                assert y == x + 1

            def test_needs(tmp_path):
                pass

            @pytest.mark.parametrize("x", [1])
            def test_param_and_fixture(x, tmp_path):
                pass

            def helper():
                pass
            """
        )
    )
    cases = runner._cases([str(path)])
    assert [case_id for case_id, _ in cases] == [
        f"{path}::test_plain",
        f"{path}::test_pairs[1-2]",
        f"{path}::test_pairs[three]",
    ]
    for _, call in cases:
        call()
    out = capsys.readouterr().out
    assert f"skipped (needs fixtures): {path}::test_needs" in out
    assert f"skipped (needs fixtures): {path}::test_param_and_fixture" in out


def test_the_first_failing_case_kills_a_timeout_is_named_and_none_failing_survives(monkeypatch):
    def fails():
        raise AssertionError("seen")

    def hangs():
        raise runner.MutantTimeout  # what the alarm raises

    def swallows_the_alarm_as_an_oserror():
        try:
            signal.raise_signal(signal.SIGALRM)  # the alarm, inside code that catches OSError
        except OSError as exc:
            raise AssertionError("seen as a failure of its own") from exc

    previous = signal.signal(signal.SIGALRM, runner._alarm)
    try:
        assert runner._verdict([("a", lambda: None), ("b", fails), ("c", hangs)]) == "killed: b"
        assert runner._verdict([("a", lambda: None), ("c", hangs), ("b", fails)]) == "timeout: c"
        assert runner._verdict([("a", lambda: None)]) == "survived"
        assert runner._verdict([("d", swallows_the_alarm_as_an_oserror)]) == "timeout: d"
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_each_verdict_is_written_as_it_is_decided_and_a_resumed_run_keeps_them(tmp_path, monkeypatch):
    # A run stopped part way (here a Ctrl-C inside the second mutant's case) keeps the first
    # verdict on disk; `resume` runs only the mutants without one. Before the change, the
    # verdicts were written once the whole module had run, and the Ctrl-C counted as a kill.
    names = [f"dbsvc.m.x_f__mutmut_{n}" for n in (1, 2, 3)]
    (tmp_path / "dbsvc").mkdir()
    (tmp_path / "dbsvc" / "m.py.meta").write_text(json.dumps({"exit_code_by_key": dict.fromkeys(names)}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTANT_UNDER_TEST", "")
    seen: list[str] = []
    stop_at = [names[1]]

    def case() -> None:
        mutant = os.environ["MUTANT_UNDER_TEST"]
        seen.append(mutant)
        if mutant in stop_at:
            stop_at.clear()
            raise KeyboardInterrupt
        assert mutant != names[0]  # the first mutant is killed, the others survive

    out = tmp_path / "hand-m.py.json"
    with pytest.raises(KeyboardInterrupt):
        runner.run_module("dbsvc/m.py", [("t::case", case)], [], out, resume=False)
    assert json.loads(out.read_text()) == {names[0]: "killed: t::case"}
    assert os.environ["MUTANT_UNDER_TEST"] == ""
    seen.clear()
    verdicts = runner.run_module("dbsvc/m.py", [("t::case", case)], [], out, resume=True)
    assert seen == names[1:]  # the first mutant is not run again
    assert (
        verdicts
        == json.loads(out.read_text())
        == {names[0]: "killed: t::case", names[1]: "survived", names[2]: "survived"}
    )
    assert not list(tmp_path.glob("*.part"))
    seen.clear()
    runner.run_module("dbsvc/m.py", [("t::case", case)], [], out, resume=False)
    assert seen == names  # without resume, every mutant again


def test_only_takes_a_whole_name_and_prefix_a_start(tmp_path, monkeypatch):
    # Before the change `--only` was a prefix: `..._5` ran mutant 5 and 50-59 with it.
    names = [f"dbsvc.m.x_f__mutmut_{n}" for n in (4, 5, 50, 59)] + ["dbsvc.m.x_g__mutmut_5"]
    (tmp_path / "dbsvc").mkdir()
    (tmp_path / "dbsvc" / "m.py.meta").write_text(json.dumps({"exit_code_by_key": dict.fromkeys(names)}))
    monkeypatch.chdir(tmp_path)
    assert runner._mutants("dbsvc/m.py", ["dbsvc.m.x_f__mutmut_5"]) == ["dbsvc.m.x_f__mutmut_5"]
    assert runner._mutants("dbsvc/m.py", [], ["dbsvc.m.x_f__mutmut_5"]) == [
        "dbsvc.m.x_f__mutmut_5",
        "dbsvc.m.x_f__mutmut_50",
        "dbsvc.m.x_f__mutmut_59",
    ]
    assert runner._mutants("dbsvc/m.py", ["dbsvc.m.x_g__mutmut_5"], ["dbsvc.m.x_f__mutmut_4"]) == [
        "dbsvc.m.x_f__mutmut_4",
        "dbsvc.m.x_g__mutmut_5",
    ]
    assert runner._mutants("dbsvc/m.py", ["dbsvc.m.x_f__mutmut_"]) == []  # a prefix is no name
    assert len(runner._mutants("dbsvc/m.py", [])) == len(names)  # neither: every mutant
