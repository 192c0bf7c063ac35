"""The loader: generated text, linecache registration, tracebacks, and that a
`dbsvc generate` file imported in a fresh interpreter behaves exactly like the in-memory
module."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import dbsvc.compiler as compiler
from dbsvc.compiler import build_module, compile_schema, generate_source
from dbsvc.errors import ConstraintViolation, DbsvcError
from dbsvc.schema import ir, load_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ["blog.dbs", "inventory.dbs"]

# Run in both interpreters: `run(module)` returns JSON-able outcomes of a battery of calls.
BATTERY = r'''
def run(module):
    out = []

    def attempt(label, func, *args):
        try:
            result = func(*args)
        except Exception as exc:
            out.append([label, type(exc).__name__, getattr(exc, "detail", str(exc)), getattr(exc, "errors", None)])
            return
        if hasattr(result, "filters"):   # a Query
            result = [{k: sorted(map(repr, v)) for k, v in result.filters.items()},
                      result.sort, result.limit, result.offset, result.projection, result.as_of, result.after]
        if isinstance(result, dict):
            result = {k: ("<now>" if k in ("joined", "created", "at") and v and v.endswith("Z") and k not in args[0]
                          else "<uuid>" if k == "id" and module.SCHEMA_PATH.endswith("inventory.dbs") and not args[0].get("id")
                          else v) for k, v in result.items()}
        out.append([label, "ok", repr(result)])

    bodies = [
        {}, [], "x", None, {"zzz": 1},
        {"email": "a@b.c", "name": "Ann", "age": 3, "role": "admin", "joined": "2024-05-01T14:00:00+02:00"},
        {"email": 1, "name": "", "age": True, "role": "boss", "joined": "yesterday", "profile": [1]},
        {"author_id": 1, "title": "t", "body": "b", "score": 3, "published": 1, "tags": None},
        {"post_id": 1, "author_id": 2, "body": "x" * 3000, "created": "2024-05-01 12:00:00Z"},
        {"code": "AB", "city": "Oslo", "opened": "2024-02-30"},
        {"code": "AB", "city": "Oslo", "opened": "2024-02-29", "manager": None},
        {"sku": "abc", "warehouse": "AB", "unit_price": 2, "quantity": -1, "batch": "ABCDEF01-0000-0000-0000-000000000000"},
        {"item": "x", "delta": 100001, "note": None},
    ]
    queries = [
        [], [("limit", "5000")], [("sort", "-name,age")], [("role", "admin"), ("role", "reader")],
        [("score", "3"), ("score", "3.0")], [("checked_at", "2024-05-01T14:00:00+02:00")], [("expires", "null")],
        [("limit", "-1")], [("nope", "1")], [("projection", "card")], [("projection", "stock")], [("as_of", "x")],
        [("published", "yes")], [("kind", "tool")], [("sort", "unit_price,-kind")], [("after", "3")],
    ]
    ids = ["1", "-1", "x", "AB", "ABCDEF01-0000-0000-0000-000000000000", "99999999999999999999"]
    for model in module.MODELS:
        for i, body in enumerate(bodies):
            attempt(f"{model.name} create {i}", model.validate_create, body)
            attempt(f"{model.name} replace {i}", model.validate_replace, body, 1)
        for i, query in enumerate(queries):
            attempt(f"{model.name} list {i}", model.parse_list_query, query)
            attempt(f"{model.name} get {i}", model.parse_get_query, query)
            attempt(f"{model.name} feed {i}", model.parse_feed_query, query)
        for segment in ids:
            attempt(f"{model.name} id {segment}", model.parse_id, segment)
    out.append(["tables", list(module.ROUTES), module.RUNTIME, module.AUTH, module.DESCRIPTION])
    return out
'''


def battery(module):
    scope: dict = {}
    exec(BATTERY, scope)
    return json.loads(json.dumps(scope["run"](module)))


@pytest.mark.parametrize("schema_name", SCHEMAS)
def test_generated_file_in_a_fresh_interpreter_behaves_like_the_in_memory_module(tmp_path, schema_name):
    schema = load_schema(str(ROOT / "schemas" / schema_name))
    target = tmp_path / "generated.py"
    target.write_text(generate_source(schema), encoding="utf-8")
    script = tmp_path / "run_battery.py"
    script.write_text(
        "import importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('generated', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n" + BATTERY + "\nprint(json.dumps(run(module)))\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), str(target)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    fresh = json.loads(done.stdout)
    in_memory = battery(compile_schema(schema))
    assert len(fresh) > 200
    assert fresh == in_memory


def test_generated_file_runs_the_cli_when_executed_as_main():
    text = generate_source(load_schema(str(ROOT / "schemas" / "blog.dbs")))
    assert text.rstrip().endswith(
        "if __name__ == '__main__':\n    import dbsvc.cli\n    raise SystemExit(dbsvc.cli.main(None, module=sys.modules[__name__]))"
    )


def test_source_is_deterministic_and_parses_back():
    schema = load_schema(str(ROOT / "schemas" / "inventory.dbs"))
    text = generate_source(schema)
    assert text == generate_source(schema)
    assert ast.unparse(ast.parse(text)) + "\n" == text
    assert text.startswith('"""Generated by dbsvc ')


def test_getsource_shows_the_generated_function(blog):
    source = inspect.getsource(blog.validate_create_user)
    assert source.startswith("def validate_create_user(body):\n")
    assert '"""Generated from blog.dbs:13 (User).' in source
    assert "raise ConstraintViolation(_dbsvc_errors)" in source
    assert inspect.getsource(blog.check_blog_post__title).count("Generated from blog.dbs:27 (BlogPost.title).") == 1


def test_traceback_shows_the_generated_line(blog):
    try:
        blog.validate_create_user({"email": None})
    except ConstraintViolation as exc:
        frames = traceback.extract_tb(exc.__traceback__)
    generated = frames[-1]
    assert generated.filename.startswith("<dbsvc generated blog.dbs #")
    assert generated.name == "validate_create_user"
    assert generated.line == "raise ConstraintViolation(_dbsvc_errors)"


def test_each_compile_gets_its_own_filename():
    schema = load_schema(str(ROOT / "schemas" / "blog.dbs"))
    one, two = compile_schema(schema), compile_schema(schema)
    assert one.__file__ != two.__file__
    assert one.BY_NAME["User"] is not two.BY_NAME["User"]


def test_a_tree_compile_rejects_is_reported_as_a_dbsvc_bug(monkeypatch):
    def broken(schema, description, version, openapi_json):
        return ast.fix_missing_locations(ast.Module(body=[ast.Return(value=None)], type_ignores=[]))

    monkeypatch.setattr(compiler, "build_tree", broken)
    with pytest.raises(DbsvcError, match=r"^dbsvc bug: compile\(\) rejected the module generated for x.dbs"):
        compile_schema(ir.Schema(path="x.dbs", models=()))


def test_a_tree_unparse_rejects_is_reported_as_a_dbsvc_bug(monkeypatch):
    monkeypatch.setattr(compiler, "build_tree", lambda *a: ast.Module(body=[ast.Expr(value=None)], type_ignores=[]))
    with pytest.raises(DbsvcError, match=r"^dbsvc bug: ast.unparse rejected"):
        generate_source(ir.Schema(path="x.dbs", models=()))


def hand_built(*fields: ir.Field) -> ir.Schema:
    return ir.Schema(path="hand.dbs", models=(ir.Model(name="Hand", fields=fields, line=1),))


def test_hand_built_ir_compiles():
    schema = hand_built(
        ir.Field("id", ir.FieldType.STR, is_id=True, line=2), ir.Field("n", ir.FieldType.INT, filterable=True, line=3)
    )
    module = compile_schema(schema)
    assert module.validate_create_hand({"id": "a", "n": 1}) == {"id": "a", "n": 1}
    assert module.DESCRIPTION["models"][0]["name"] == "Hand"


@pytest.mark.parametrize(
    "fields",
    [
        (ir.Field("n", ir.FieldType.INT),),  # no id
        (ir.Field("id", ir.FieldType.INT, is_id=True), ir.Field("id2", ir.FieldType.INT, is_id=True)),
        (ir.Field("id", ir.FieldType.FLOAT, is_id=True),),  # bad id type
        (ir.Field("id", ir.FieldType.INT, is_id=True), ir.Field("j", ir.FieldType.JSON, filterable=True)),
        (ir.Field("id", ir.FieldType.INT, is_id=True), ir.Field("n", ir.FieldType.INT, min=5, max=1)),
        (ir.Field("id", ir.FieldType.INT, is_id=True), ir.Field("p", ir.FieldType.INT, ref="Nobody")),
        (ir.Field("id", ir.FieldType.INT, is_id=True), ir.Field("limit", ir.FieldType.INT)),
    ],
)
def test_unchecked_schema_trips_an_invariant(fields):
    with pytest.raises(AssertionError):
        build_module(hand_built(*fields))


def test_cli_generate_writes_generate_source(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "blog_service.py"
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "generate", "schemas/blog.dbs", "-o", str(target)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text(encoding="utf-8") == generate_source(load_schema("schemas/blog.dbs"))
