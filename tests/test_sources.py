"""The package's source files import on every Python the package supports (3.11 and later).

Python 3.13 cleans docstrings when it compiles a module and, in 3.13.0, encodes them as
UTF-8 on the way: a docstring holding a lone surrogate stops the whole module from
importing (`UnicodeEncodeError` at `import dbsvc.logs`, whose docstring wrote `\\ud800`
as an escape, not as text). The suite runs on 3.11, so the check is made here on the
docstrings themselves, for every module, class and function under dbsvc/.

And the test files stay short enough to read whole: 600 lines, as the package's modules
(test_layers.py), every file under tests/ without exception.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "dbsvc").rglob("*.py")) + [ROOT / "dbsvc.py"]
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, DOCUMENTED):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                found.append((getattr(node, "lineno", 1), text))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_docstring_is_text_that_utf8_can_hold(path):
    for line, text in docstrings(path):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            pytest.fail(
                f"{path.relative_to(ROOT)}:{line}: docstring holds {text[exc.start]!r} "
                "(a lone surrogate); write the escape with a backslash doubled or make the docstring raw"
            )


def test_the_check_finds_a_surrogate_written_as_an_escape(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Escapes such as \\ud800 are characters in a plain docstring."""\n', encoding="utf-8")
    ((_line, text),) = docstrings(module)
    with pytest.raises(UnicodeEncodeError):
        text.encode("utf-8")


# -- the test files' length ---------------------------------------------------------------------

TESTS = ROOT / "tests"
MAX_TEST_FILE_LINES = 600


def too_long(root: Path) -> list[str]:
    """The .py files under `root` past MAX_TEST_FILE_LINES, each with its length."""
    long = []
    for path in sorted(root.rglob("*.py")):
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_TEST_FILE_LINES:
            long.append(f"{path.relative_to(root).as_posix()}: {count} lines")
    return long


def test_test_files_stay_short_enough_to_be_read_as_one_job():
    """A test file is read whole to see what it covers, like a module (test_layers.py holds
    dbsvc/ to 600 lines): past 600 it holds more than one job and is split by job (as
    tests/replica/test_follower_decisions.py, 1,316 lines, was into six files, its kit into
    tests/support/follower_kit.py). The bound holds for every file under tests/, the shared
    helpers of tests/support/ too; since session 23 no file is held at a longer one."""
    long = too_long(TESTS)
    assert not long, f"test files past {MAX_TEST_FILE_LINES} lines (split by job):\n  " + "\n  ".join(long)


def test_the_length_check_counts_lines_in_every_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "at_bound.py").write_text("x = 1\n" * MAX_TEST_FILE_LINES, encoding="utf-8")
    (tmp_path / "sub" / "past.py").write_text("x = 1\n" * (MAX_TEST_FILE_LINES + 1), encoding="utf-8")
    (tmp_path / "sub" / "notes.txt").write_text("x\n" * 1000, encoding="utf-8")
    assert too_long(tmp_path) == [f"sub/past.py: {MAX_TEST_FILE_LINES + 1} lines"]
