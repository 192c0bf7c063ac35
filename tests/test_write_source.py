"""Where `dbsvc generate` and `dbsvc client` put what they write (commands.py `_write_source`):
`-o FILE` writes the file and prints nothing, `-o -` and no `-o` print the source and make no
file, and the file is UTF-8 whatever the locale (a schema's text can hold any letter).

The three destinations run in process (`dbsvc.cli.main`); the locale case runs `python
dbsvc.py` as a child under the C locale, whose own encoding is ASCII.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from dbsvc.cli import main
from dbsvc.clients import generate_client
from dbsvc.compiler import generate_source
from dbsvc.schema import load_schema
from support.cli import run_dbsvc

ROOT = Path(__file__).resolve().parents[1]
BLOG = ROOT / "schemas" / "blog.dbs"
ACCENTED = 'model Post {\n  id int @id\n  title str @default("crème brûlée")\n}\n'


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_generate_to_a_file_writes_the_module_there_and_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["generate", str(BLOG), "-o", "blog_app.py"]) == 0
    assert (tmp_path / "blog_app.py").read_bytes() == generate_source(load_schema(str(BLOG))).encode("utf-8")
    assert capsys.readouterr().out == ""
    assert files(tmp_path) == ["blog_app.py"]


@pytest.mark.parametrize("output", [["-o", "-"], ["--output=-"], []], ids=["dash", "dash-long", "none"])
def test_generate_to_standard_output_prints_the_module_and_makes_no_file(
    output: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["generate", str(BLOG), *output]) == 0
    assert capsys.readouterr().out == generate_source(load_schema(str(BLOG)))
    assert files(tmp_path) == []


def test_client_to_a_file_and_to_standard_output_are_the_same_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    expected = generate_client(load_schema(str(BLOG)), "python")
    assert main(["client", str(BLOG), "--lang", "python", "-o", "client.py"]) == 0
    assert capsys.readouterr().out == ""
    assert (tmp_path / "client.py").read_text(encoding="utf-8") == expected
    assert main(["client", str(BLOG), "--lang", "python"]) == 0
    assert capsys.readouterr().out == expected
    assert files(tmp_path) == ["client.py"]


def test_the_written_module_is_utf_8_under_an_ascii_locale(tmp_path: Path) -> None:
    schema = tmp_path / "accented.dbs"
    schema.write_text(ACCENTED, encoding="utf-8")
    locale = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""}
    done = run_dbsvc("generate", str(schema), "-o", str(tmp_path / "app.py"), env=locale, timeout=120)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "app.py").read_bytes()
    assert written == generate_source(load_schema(str(schema))).encode("utf-8")
    assert "crème brûlée".encode() in written


def test_the_printed_module_is_utf_8_under_an_ascii_locale(tmp_path: Path) -> None:
    """Printed to a pipe under the C locale (stdout's own encoding ASCII), the module is the
    same UTF-8 bytes a file gets; it used to end in a UnicodeEncodeError traceback."""
    schema = tmp_path / "accented.dbs"
    schema.write_text(ACCENTED, encoding="utf-8")
    locale = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""}
    done = run_dbsvc("generate", str(schema), env=locale, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == generate_source(load_schema(str(schema)))
    assert files(tmp_path) == ["accented.dbs"]


def test_a_text_only_standard_output_takes_the_module_as_text(tmp_path: Path) -> None:
    """A caller that swaps stdout for a StringIO (no byte buffer under it) still gets the text."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["generate", str(BLOG)]) == 0
    assert printed.getvalue() == generate_source(load_schema(str(BLOG)))
