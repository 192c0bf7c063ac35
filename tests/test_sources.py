"""The package's source files import on every Python the package supports (3.11 and later).

Python 3.13 cleans docstrings when it compiles a module and, in 3.13.0, encodes them as
UTF-8 on the way: a docstring holding a lone surrogate stops the whole module from
importing (`UnicodeEncodeError` at `import dbsvc.logs`, whose docstring wrote `\\ud800`
as an escape, not as text). The suite runs on 3.11, so the check is made here on the
docstrings themselves, for every module, class and function under dbsvc/.

And the test files stay short enough to read whole: 600 lines, as the package's modules
(test_layers.py), with the eight longer ones held at their length today until split.
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
# The test files past 600 lines on 2026-11-30 (session 22), each held to its length then
# plus 50 rounded up to the hundred: room for a test or two, not for a new job. A file
# split below 600 leaves this table; none may join it.
LONG_TEST_FILES = {
    "datatools/test_backup_units.py": 700  # 608
}


def test_test_files_stay_short_enough_to_be_read_as_one_job():
    """A test file is read whole to see what it covers, like a module (test_layers.py holds
    dbsvc/ to 600 lines): past 600 it holds more than one job and is split by job (as
    tests/replica/test_replica_consumer.py, 756 lines, was into four files). The eight
    files longer today are held where they are (LONG_TEST_FILES) until they are split."""
    long = []
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        bound = LONG_TEST_FILES.get(name, MAX_TEST_FILE_LINES)
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > bound:
            long.append(f"tests/{name}: {count} lines, bound {bound}")
    assert not long, "test files past their bound (split by job):\n  " + "\n  ".join(long)


def test_the_long_test_files_table_names_only_files_that_need_it():
    """A file in LONG_TEST_FILES that is gone or back under 600 lines leaves the table, so
    that it cannot grow past 600 again unseen."""
    stale = [
        name
        for name in LONG_TEST_FILES
        if not (TESTS / name).exists()
        or len((TESTS / name).read_text(encoding="utf-8").splitlines()) <= MAX_TEST_FILE_LINES
    ]
    assert not stale, f"no longer past {MAX_TEST_FILE_LINES} lines, remove from LONG_TEST_FILES: {stale}"
