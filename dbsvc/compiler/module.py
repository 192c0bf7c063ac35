"""Assembly of the whole generated module: imports, per-model functions, the tables.

Layout of the generated module, top to bottom::

    \"\"\"header docstring\"\"\"
    import sys
    if sys.version_info < (3, 11): one line, exit 2   (dbsvc/launch.py, before any dbsvc import)
    import dbsvc.rules as _dbsvc_rules
    import dbsvc.runtime as _dbsvc_rt
    import dbsvc.operators as _dbsvc_ops
    import dbsvc.cursors as _dbsvc_cursors
    import dbsvc.textsearch as _dbsvc_words   (only when some model has `@search` fields)
    from dbsvc.errors import BadQuery, BadRequest, ConstraintViolation, Forbidden
    from dbsvc.runtime import CompiledModel, Query
    # per model, in declaration order:
    #   check_m__f ..., validate_create_m, validate_replace_m, validate_patch_m,
    #   parse_id_m, key_m__f ..., filter_m__f ..., bound_m__f ..., parse_expand_m (@ref
    #   fields), match_m, passes_m, parse_sort_m,
    #   cursor_kinds_m, decode_cursor_m, parse_list_query_m, parse_get_query_m, parse_feed_query_m,
    #   project_m_<projection> ..., decode_m, members_m__f ... (enum fields), row_m,
    #   scope_m__list, allow_m__get, allow_m__create, allow_m__update, allow_m__delete,
    #   scope_m__subscribe (a model with @allow), fill_m__from_token (@default(token.X)),
    #   M_MODEL = CompiledModel(...)
    allow_replicate(token)  a schema with @allow(replicate, ...)
    REPLICATE_RULE = ...    allow_replicate or None
    RULES = True|False      the schema has any rule or token default (compiler/rules.py)
    MODELS = (...)          declaration order
    ROUTES = {...}          kebab -> CompiledModel
    BY_NAME = {...}         declared name -> CompiledModel
    DESCRIPTION = {...}     describe_schema(schema), as a literal
    RUNTIME = {...}         the [runtime] table
    AUTH = {...}            the [auth] table, only the keys that were set
    SCHEMA_PATH = '...'
    OPENAPI_JSON = '...'    the OpenAPI 3.1 document (compact JSON), served at /openapi.json
    ASYNCAPI_JSON = '...'   the AsyncAPI 3.0 document of the WebSocket routes (compact JSON)
    if __name__ == '__main__': the command line over this module (dbsvc.cli.main, as a
                            built app runs it: no arguments serve, --help lists the commands)

Everything schema-specific is a literal or a straight-line function here; nothing in the
module reads the IR at run time. The generated text parses on Python 3.6 and newer (no
walrus, no `match`, no positional-only parameters), so `python3.10 FILE` reaches the
interpreter check instead of a SyntaxError (tests/test_first_contact.py runs it). Imports only the schema package, sibling builders, stdlib.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from dbsvc.compiler.naming import RT, origin, per_field, per_model, snake
from dbsvc.compiler.nodes import (
    Stmts,
    assign,
    call,
    const,
    dict_,
    dotted,
    eq,
    expr,
    function,
    if_,
    import_,
    import_from,
    item,
    literal,
    lt,
    name,
    raise_,
    return_,
    subscript,
    tuple_,
)
from dbsvc.compiler.operators import CURSORS, OPS
from dbsvc.compiler.queries import build_queries, key_function, keyed_fields
from dbsvc.compiler.rules import RULES_ALIAS, build_replicate, build_rules, model_rules_arguments
from dbsvc.compiler.search import WORDS, search_fields, uses_search
from dbsvc.compiler.validators import build_validators
from dbsvc.launch import EXIT_USAGE, MINIMUM, TOO_OLD
from dbsvc.schema.ir import Field, FieldType, Model, Schema


def model_constant(model: Model) -> str:
    """`BlogPost` -> `BLOG_POST_MODEL`, the module-level CompiledModel."""
    return f"{snake(model).upper()}_MODEL"


def project_name(model: Model, projection: str) -> str:
    return f"project_{snake(model)}_{projection}"


def build_project(schema: Schema, model: Model, index: int) -> ast.FunctionDef:
    projection = model.projections[index]
    record = dict_([(const(f), item("record", f)) for f in projection.fields])
    doc = origin(schema, projection.line or model.line, f"{model.name}.{projection.name}")
    return function(project_name(model, projection.name), ["record"], doc, [return_(record)])


def build_decode(schema: Schema, model: Model) -> ast.FunctionDef:
    record = dict_([(const(f.name), subscript(name("row"), const(i))) for i, f in enumerate(model.fields)])
    doc = (
        origin(schema, model.line, model.name)
        + "\n\nValues in declaration order (storage/rows.py unpacks them) -> record."
    )
    return function(per_model("decode", model), ["row"], doc, [return_(record)])


def enum_fields(model: Model) -> list[tuple[int, Field]]:
    """(position, field) of each enum field."""
    return [(i, f) for i, f in enumerate(model.fields) if f.type is FieldType.ENUM]


def build_members(model: Model) -> Stmts:
    """`members_m__f = {member: member, ...}` per enum field: the one str object index keys
    hold for each member (`row_m`, `CompiledModel.shared_values`), so a million records
    sorted on an enum share a few key strings instead of holding a million (64 bytes each
    for a short member). The members are constants of the generated module, interned like
    any identifier."""
    return [
        assign(per_field("members", model, f), literal({m: m for m in f.enum_members})) for _i, f in enum_fields(model)
    ]


def build_row(schema: Schema, model: Model) -> ast.FunctionDef:
    """`row_m(record)`: a record's values in declaration order as one tuple, what storage
    indexes and packs into its stored form (storage/rows.py: the values as one compact
    JSON array, not the dict's names once per record); `decode_m` turns values back. An
    enum value is the model's own member string (`build_members`): the value from a
    request or the log is equal to it, but another object."""
    values: list[ast.expr] = []
    for f in model.fields:
        value: ast.expr = item("record", f.name)
        if f.type is FieldType.ENUM:
            value = call(f"{RT}.shared", name(per_field("members", model, f)), value)
        values.append(value)
    doc = (
        origin(schema, model.line, model.name)
        + "\n\nRecord -> its values in declaration order (storage packs them, storage/rows.py)."
    )
    return function(per_model("row", model), ["record"], doc, [return_(tuple_(values))])


# The array typecode a sort field's index keys fit (storage/indexes.py OrderedIndex): a
# float's key is a float, an int's the int (a signed 64-bit value), a datetime's integer
# microseconds.
KEY_ARRAYS = {FieldType.FLOAT: "d", FieldType.INT: "q", FieldType.DATETIME: "q"}


def build_compiled_model(model: Model) -> ast.Assign:
    id_field = model.id_field

    def names(values: list[str] | tuple[str, ...]) -> ast.Tuple:
        return tuple_(const(v) for v in values)

    keys = dict_([(const(f.name), key_function(model, f)) for f in keyed_fields(model)])
    projections = dict_([(const(p.name), names(p.fields)) for p in model.projections])
    project = dict_([(const(p.name), name(project_name(model, p.name))) for p in model.projections])
    refs = tuple_(names((f.name, f.ref)) for f in model.fields if f.ref)
    arguments: dict[str, ast.expr] = {
        "name": const(model.name),
        "kebab": const(model.kebab),
        "fields": names([f.name for f in model.fields]),
        "id_field": const(id_field.name),
        "id_type": const(id_field.type.value),
        "unique_fields": names([f.name for f in model.fields if f.unique and not f.is_id]),
        "filter_fields": names([f.name for f in model.fields if f.filterable]),
        "sort_fields": names([f.name for f in model.fields if f.sortable]),
        "refs": refs,
        "projections": projections,
        "keys": keys,
        "project": project,
        "decode": name(per_model("decode", model)),
        "row": name(per_model("row", model)),
        "passes": name(per_model("passes", model)),
        "shared_values": dict_([(const(i), name(per_field("members", model, f))) for i, f in enum_fields(model)]),
        "key_arrays": dict_(
            [(const(f.name), const(KEY_ARRAYS[f.type])) for f in model.fields if f.sortable and f.type in KEY_ARRAYS]
        ),
    }
    if search_fields(model):
        arguments["search_fields"] = names([f.name for f in search_fields(model)])
    for action in (
        "validate_create",
        "validate_replace",
        "validate_patch",
        "parse_id",
        "parse_list_query",
        "decode_cursor",
        "parse_get_query",
        "parse_feed_query",
        "match",
    ):
        arguments[action] = name(per_model(action, model))
    arguments.update(model_rules_arguments(model))
    return assign(model_constant(model), call("CompiledModel", **arguments))


def build_model(schema: Schema, model: Model) -> Stmts:
    """Every generated definition of one model, ending with its CompiledModel."""
    out = build_validators(schema, model)
    out += build_queries(schema, model)
    out += [build_project(schema, model, i) for i in range(len(model.projections))]
    out.append(build_decode(schema, model))
    out += build_members(model)
    out.append(build_row(schema, model))
    out += build_rules(schema, model)
    out.append(build_compiled_model(model))
    return out


def _settings(settings: Any, keep_none: bool) -> dict[str, Any]:
    values = {f.name: getattr(settings, f.name) for f in dataclass_fields(settings)}
    return {k: v for k, v in values.items() if keep_none or v is not None}


def _header(schema: Schema, version: str) -> str:
    base = os.path.basename(schema.path) or "<schema>"
    models = ", ".join(m.name for m in schema.models) or "(none)"
    return (
        f"Generated by dbsvc {version} from {base}. Do not edit: regenerate with\n"
        f"`dbsvc generate {base} -o FILE`; `python FILE` serves it, `python FILE --help` lists its commands.\n\n"
        f"Models: {models}.\n"
    )


def python_check() -> ast.If:
    """`if sys.version_info < (3, 11):` write dbsvc/launch.py's one line and exit 2: the
    module may run where dbsvc is not installed for that interpreter, so the check is
    inline, before the first dbsvc import."""
    message = ast.BinOp(
        const(TOO_OLD + "\n"), ast.Mod(), subscript(dotted("sys.version_info"), ast.Slice(None, const(3)))
    )
    return if_(
        lt(dotted("sys.version_info"), tuple_([const(part) for part in MINIMUM])),
        [expr(call("sys.stderr.write", message)), raise_(call("SystemExit", const(EXIT_USAGE)))],
    )


@dataclass(frozen=True, slots=True)
class ApiDocuments:
    """The service's API documents as compact JSON text, embedded as module constants:
    `openapi` (`build_openapi`) as OPENAPI_JSON, `asyncapi` (`build_asyncapi`) as ASYNCAPI_JSON."""

    openapi: str = "{}"
    asyncapi: str = "{}"


def build_tree(
    schema: Schema, description: dict[str, Any], version: str, documents: ApiDocuments = ApiDocuments()
) -> ast.Module:
    """The whole module; `description` is `describe_schema(schema)`, `documents` the API
    documents of `schema`. The tree carries no line numbers: unparse it, then compile the text."""
    body: Stmts = [
        expr(const(_header(schema, version))),
        import_("sys"),
        python_check(),
        import_("dbsvc.rules", RULES_ALIAS),
        import_("dbsvc.runtime", RT),
        import_("dbsvc.operators", OPS),
        import_("dbsvc.cursors", CURSORS),
        *([import_("dbsvc.textsearch", WORDS)] if uses_search(schema) else []),
        import_from("dbsvc.errors", ["BadQuery", "BadRequest", "ConstraintViolation", "Forbidden"]),
        import_from("dbsvc.runtime", ["CompiledModel", "Query"]),
    ]
    for model in schema.models:
        body += build_model(schema, model)
    constants = [name(model_constant(m)) for m in schema.models]
    body += [
        assign("MODELS", tuple_(constants)),
        assign("ROUTES", dict_([(const(m.kebab), name(model_constant(m))) for m in schema.models])),
        assign("BY_NAME", dict_([(const(m.name), name(model_constant(m))) for m in schema.models])),
        assign("DESCRIPTION", literal(description)),
        assign("RUNTIME", literal(_settings(schema.runtime, keep_none=True))),
        assign("AUTH", literal(_settings(schema.auth, keep_none=False))),
        assign("SCHEMA_PATH", const(schema.path)),
        assign("OPENAPI_JSON", const(documents.openapi)),
        assign("ASYNCAPI_JSON", const(documents.asyncapi)),
        *build_replicate(schema),
        if_(
            eq(name("__name__"), const("__main__")),
            [
                import_("dbsvc.cli"),
                raise_(
                    call(
                        "SystemExit",
                        call("dbsvc.cli.main", const(None), module=subscript(dotted("sys.modules"), name("__name__"))),
                    )
                ),
            ],
        ),
    ]
    # No source locations: the tree exists to be unparsed, and the text is what gets
    # compiled (a walk filling locations in would cost more than building the tree).
    return ast.Module(body=body, type_ignores=[])
