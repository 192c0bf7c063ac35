"""`dbsvc client SCHEMA --lang python`: one module, the same bytes every run, typed for mypy.

- Every schema under schemas/ gives the same text twice, and blog.dbs the golden file
  (tests/clients/golden/blog.py.golden: regenerate it when the client changes on purpose).
- The header names the schema's fingerprint, the one the server reports.
- A built app writes the same client as `dbsvc client` on its schema.
- A language this build lacks (`--lang rust`) is refused, naming the ones it has.
- `mypy --strict` finds nothing in the generated file of each schema, nor in a user's typical
  calls (typecheck/usage_ok.py), and refuses each wrong call of typecheck/usage_bad.py: a
  filter the model lacks, a wrong value type, a sort or an expand not declared, a missing
  required field, a projection's type. One mypy run for all of it.
- A schema whose names clash with the client's own, or are Python keywords, still gives a
  module that imports and type-checks.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dbsvc.cli import main as dbsvc_main
from dbsvc.schema import load_schema
from dbsvc.schema.describe import describe_schema, schema_fingerprint
from support.client_kit import ODD, SCHEMAS, client_module, generate

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "blog.py.golden"
ALL_SCHEMAS = sorted(SCHEMAS.glob("*.dbs"))


@pytest.mark.parametrize("schema", ALL_SCHEMAS, ids=lambda p: p.name)
def test_two_runs_write_the_same_bytes(schema, tmp_path):
    assert generate(schema, tmp_path / "one.py") == generate(schema, tmp_path / "two.py")


def test_the_blog_client_is_the_golden_file(tmp_path):
    text = generate(SCHEMAS / "blog.dbs", tmp_path / "blog_client.py")
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "the generated client changed: if on purpose, run "
        "`python dbsvc.py client schemas/blog.dbs --lang python -o tests/clients/golden/blog.py.golden`"
    )


def test_the_header_names_the_schemas_fingerprint(tmp_path):
    module = client_module(SCHEMAS / "notes.dbs", tmp_path, "generate_notes")
    fingerprint = schema_fingerprint(describe_schema(load_schema(SCHEMAS / "notes.dbs")))
    assert module.SCHEMA_FINGERPRINT == fingerprint
    assert f"notes.dbs (schema fingerprint {fingerprint})" in (module.__doc__ or "")


def test_a_language_this_build_lacks_is_refused_naming_the_ones_it_has(tmp_path, capsys):
    status = dbsvc_main(["client", str(SCHEMAS / "blog.dbs"), "--lang", "rust", "-o", str(tmp_path / "x.rs")])
    assert status == 2
    assert "--lang 'rust': this dbsvc generates clients in python, typescript only" in capsys.readouterr().err
    assert not (tmp_path / "x.rs").exists()


def test_a_built_app_writes_the_same_client(tmp_path):
    """notes.dbs fills fields from the token (`@default(token.sub)`): the app carries the
    schema's source, so its client leaves those fields optional on create, as SCHEMA's does."""
    app = tmp_path / "notes.pyz"
    with contextlib.redirect_stdout(io.StringIO()):
        assert dbsvc_main(["build", str(SCHEMAS / "notes.dbs"), "-o", str(app)]) == 0
    done = subprocess.run(
        [sys.executable, "-I", str(app), "client", "--lang", "python"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == generate(SCHEMAS / "notes.dbs", tmp_path / "notes_client.py")
    assert "    owner: NotRequired[str]\n" in create_body(done.stdout, "Note")


def test_names_that_clash_or_are_keywords_are_renamed(tmp_path):
    schema = tmp_path / "odd.dbs"
    schema.write_text(ODD, encoding="utf-8")
    module = client_module(schema, tmp_path, "generate_odd")
    assert module.Page.__name__ == "Page"  # the client's own page type stays itself
    assert module.PageRecord.__annotations__.keys() >= {"from", "handler", "class"}
    client = module.Client("http://127.0.0.1:9")
    assert client.page.spec.encode({"from_": "x", "class_": "a"}, client.page.spec.list_keys, "list") == [
        ("from", "x"),
        ("class", "a"),
    ]
    assert isinstance(client.batch_, module.BatchRecordApi) and callable(client.batch)  # Batch's `list`
    assert isinstance(client.batch_.list_, module.BatchRecordReads)  # would be BatchList, a model
    assert module.BatchRecordList.__annotations__.keys() == {"id", "page", "_expand"}
    assert module.BatchList.__annotations__.keys() == {"id"} and isinstance(client.batch_list, module.BatchListApi)
    assert module.PageRecordCreateProjection.__annotations__.keys() == {"id", "from"}  # not PageRecordCreate
    assert "class" in module.PageRecordCreate.__annotations__
    with pytest.raises(module.QueryError, match="projection 'short' leaves it out"):
        client.page.short.live_query()


def test_a_filter_asks_for_null_with_none_inside_a_list(tmp_path):
    schema = tmp_path / "odd.dbs"
    schema.write_text(ODD, encoding="utf-8")
    spec = client_module(schema, tmp_path, "generate_odd_nulls").PageRecord_SPEC
    assert spec.encode({"handler_": [None, 3], "from_": None}, spec.list_keys, "list") == [
        ("handler", "null"),
        ("handler", "3"),
    ]  # a lone None is a keyword not given


def mypy_errors(output: str, name: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for match in re.finditer(rf"^{re.escape(name)}:(\d+): error: (.*)$", output, re.MULTILINE):
        found.setdefault(int(match.group(1)), match.group(2))
    return found


def test_mypy_strict_passes_the_clients_and_refuses_wrong_calls(tmp_path):
    pytest.importorskip("mypy")
    files = []
    for schema in ALL_SCHEMAS:
        generate(schema, tmp_path / f"{schema.stem}_client.py")
        files.append(f"{schema.stem}_client.py")
    (tmp_path / "odd.dbs").write_text(ODD, encoding="utf-8")
    generate(tmp_path / "odd.dbs", tmp_path / "odd_client.py")
    for usage in ("usage_ok.py", "usage_bad.py"):
        shutil.copy(HERE / "typecheck" / usage, tmp_path / usage)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".cache"), "--no-error-summary"]
        + [*files, "odd_client.py", "usage_ok.py", "usage_bad.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    others = [line for line in done.stdout.splitlines() if line and not line.startswith("usage_bad.py:")]
    assert not others, "\n".join(others)
    reported = mypy_errors(done.stdout, "usage_bad.py")
    expected = {
        number: line.split("# E: ", 1)[1]
        for number, line in enumerate((HERE / "typecheck" / "usage_bad.py").read_text().splitlines(), 1)
        if "# E: " in line
    }
    assert sorted(reported) == sorted(expected), done.stdout
    for number, fragment in expected.items():
        assert fragment in reported[number], (
            f"usage_bad.py:{number}: expected {fragment!r}, mypy said {reported[number]!r}"
        )


def create_body(client_text: str, model: str) -> str:
    """The `<model>Create` TypedDict of a generated client's text."""
    start = client_text.index(f"class {model}Create(TypedDict):")
    return client_text[start : client_text.index("\n\n\n", start)]


def test_a_generated_module_run_as_a_script_writes_the_client_of_its_schema(tmp_path):
    """`python GENERATED.py client` reads the schema file the module names while it still
    describes the module's schema; without it, the schema the module's description keeps
    (which has no token-filled fields: they are required on create then, as documented)."""
    schema = tmp_path / "schema" / "notes.dbs"
    schema.parent.mkdir()
    shutil.copy(SCHEMAS / "notes.dbs", schema)
    generated = tmp_path / "notes_service.py"
    with contextlib.redirect_stdout(io.StringIO()):
        assert dbsvc_main(["generate", str(schema), "-o", str(generated)]) == 0
    expected = generate(schema, tmp_path / "notes_client.py")
    command = [sys.executable, str(generated), "client", "--lang", "python"]
    beside = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert (beside.returncode, beside.stderr) == (0, "") and beside.stdout == expected
    schema.unlink()
    moved = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert moved.returncode == 0, moved.stderr
    assert "    owner: NotRequired[str]\n" in create_body(expected, "Note")
    assert "    owner: str\n" in create_body(moved.stdout, "Note")
