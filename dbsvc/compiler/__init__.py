"""The compiler: a checked schema IR -> `ast.Module` -> source text -> a live module.

    build_module(schema)    the tree (pure; builders in module.py, validators.py, queries.py)
    generate_source(schema) `ast.unparse` of that tree: what `dbsvc generate` writes
    compile_schema(schema)  that exact text compiled once, registered in `linecache`, executed
                            into a fresh module (what `dbsvc serve` runs)

Because `compile_schema` compiles the unparsed text, not the tree, the in-memory module
and a `dbsvc generate` file are the same program line for line, and tracebacks and
`inspect.getsource` show the generated lines (CPython's dataclasses and attrs'
`_linecache_and_compile` do the same).

Invariants: the schema has passed `dbsvc.schema` checks; `check_invariants` re-asserts the
ones the builders rely on (an AssertionError is a dbsvc bug, never a user error). A tree
that `ast.unparse` or `compile()` rejects is also our bug, reported as such.

Imports only `dbsvc.errors`, `dbsvc.schema` and the standard library. No I/O.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import linecache
import os
import types
from typing import Any

from dbsvc import __version__
from dbsvc.compiler.asyncapi import build_asyncapi
from dbsvc.compiler.module import ApiDocuments, build_tree
from dbsvc.compiler.openapi import build_openapi
from dbsvc.errors import DbsvcError
from dbsvc.schema import describe_schema
from dbsvc.schema.ir import ID_TYPES, RESERVED_FIELD_NAMES, FieldType, Schema

__all__ = ["build_module", "check_invariants", "compile_schema", "generate_source"]

_counter = itertools.count(1)


def check_invariants(schema: Schema) -> None:
    """Assert what the schema checks guarantee and the builders rely on."""
    model_names = [m.name for m in schema.models]
    assert len(set(model_names)) == len(model_names), f"duplicate model in {model_names}"
    assert len({m.kebab for m in schema.models}) == len(model_names), "two models share a route"
    for model in schema.models:
        assert model.name.isidentifier(), model.name
        ids = [f for f in model.fields if f.is_id]
        assert len(ids) == 1 and ids[0].type in ID_TYPES and not ids[0].nullable, model.name
        names = [f.name for f in model.fields]
        assert len(set(names)) == len(names), f"duplicate field in {model.name}"
        for field in model.fields:
            assert field.name.isidentifier(), field.name
            assert not field.name.startswith("_"), field.name
            assert field.name not in RESERVED_FIELD_NAMES, field.name
            if field.type is FieldType.JSON:
                assert not (field.filterable or field.sortable), f"{model.name}.{field.name}"
            if field.type is FieldType.ENUM:
                assert field.enum_members, f"{model.name}.{field.name}"
            if field.min is not None and field.max is not None:
                assert field.min <= field.max, f"{model.name}.{field.name}"
            if field.ref is not None:
                parent = schema.model(field.ref)
                assert parent is not None and parent.id_field.type is field.type, field.ref
        projections = [p.name for p in model.projections]
        assert len(set(projections)) == len(projections), f"duplicate projection in {model.name}"
        for projection in model.projections:
            assert projection.name.isidentifier(), projection.name
            assert all(f in names for f in projection.fields), projection


def build_module(schema: Schema) -> ast.Module:
    """The generated module's tree for a checked schema. It has no source locations: it
    is meant for `ast.unparse` (`generate_source`), whose text is what gets compiled."""
    check_invariants(schema)
    documents = ApiDocuments(openapi=_compact(build_openapi(schema)), asyncapi=_compact(build_asyncapi(schema)))
    tree = build_tree(schema, describe_schema(schema), __version__, documents)
    top = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    top += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    clashes = sorted({n for n in top if top.count(n) > 1})
    assert not clashes, f"generated names clash: {clashes}"
    return tree


def _compact(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def generate_source(schema: Schema) -> str:
    """The generated module as readable Python source (what `dbsvc generate` writes)."""
    tree = build_module(schema)
    try:
        return ast.unparse(tree) + "\n"
    except Exception as exc:  # a malformed tree: our bug, whatever unparse raised
        raise DbsvcError(f"dbsvc bug: ast.unparse rejected the module generated for {schema.path}: {exc!r}") from exc


def compile_schema(schema: Schema) -> types.ModuleType:
    """Generate, compile once, register in linecache, and execute into a fresh module."""
    source = generate_source(schema)
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:12]
    base = os.path.basename(schema.path) or "schema"
    filename = f"<dbsvc generated {base} #{next(_counter)} {digest}>"
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, ValueError) as exc:
        raise DbsvcError(f"dbsvc bug: compile() rejected the module generated for {schema.path}: {exc}") from exc
    # mtime None keeps linecache.checkcache from evicting the entry (there is no file).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module_name = "dbsvc_generated_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(base)[0])
    module = types.ModuleType(module_name)
    module.__file__ = filename
    exec(code, module.__dict__)
    return module
