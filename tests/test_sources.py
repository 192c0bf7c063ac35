"""The package's source files import on every Python the package supports (3.11 and later).

Python 3.13 cleans docstrings when it compiles a module and, in 3.13.0, encodes them as
UTF-8 on the way: a docstring holding a lone surrogate stops the whole module from
importing (`UnicodeEncodeError` at `import dbsvc.logs`, whose docstring wrote `\\ud800`
as an escape, not as text). The suite runs on 3.11, so the check is made here on the
docstrings themselves, for every module, class and function under dbsvc/.
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
