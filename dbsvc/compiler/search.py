"""Builders of text search's generated parts: the `search` parameter and the matcher's clause.

Only a model with `@search` fields (str fields, docs/guide/schema.md) gets any of this;
for the others `search` stays an unknown parameter, refused with the list of what is
allowed, and the generated code is as it was before text search existed.

- `search_m(record, words)`: whether every query word is a prefix of some word of the
  record's `@search` fields (`_dbsvc_words.matches`, dbsvc/textsearch.py: the tokenizer
  storage's index uses too). `search_row_m(row, words)` is the same on a stored row.
- The matcher's clause (`search_clause`): `match_m(record, filters, search=())` and
  `passes_m(row, filters, search=())` first test `search` when it holds words, so a
  /subscribe or /live-query feed with `search=` passes exactly the records a list with the
  same `search=` shows (a record whose text changes into the search is `Added`, out of it
  `Removed`).
- The parsers' branch (`search_branch`): `search=TEXT` -> `Query.search`, the folded
  distinct words (`_dbsvc_words.query_words`: 400 `bad_query` for no word, more than 16,
  or a word over 64 characters); given twice is 400.

Generated code calls `dbsvc.textsearch` as `_dbsvc_words` (imported by the module only when
some model has `@search` fields). Imports the schema IR, sibling helpers and the stdlib.
"""

from __future__ import annotations

import ast

from dbsvc.compiler.naming import origin, per_model
from dbsvc.compiler.nodes import (
    Stmts,
    and_,
    assign,
    call,
    const,
    eq,
    function,
    if_,
    is_not_none,
    item,
    name,
    not_,
    or_,
    raise_,
    return_,
    tuple_,
)
from dbsvc.schema.ir import Field, Model, Schema

WORDS = "_dbsvc_words"  # the generated module's `import dbsvc.textsearch as _dbsvc_words`
SEARCH = "search"  # the parameter, and the matcher's argument
_STATE = "_dbsvc_search"
_VALUE = "_dbsvc_value"


def search_fields(model: Model) -> list[Field]:
    return [f for f in model.fields if f.searchable]


def uses_search(schema: Schema) -> bool:
    """Whether the generated module needs `_dbsvc_words`."""
    return any(search_fields(m) for m in schema.models)


def search_params(model: Model) -> list[str]:
    """`["search"]` for a model with `@search` fields (the allowed list of a 400), else []."""
    return [SEARCH] if search_fields(model) else []


def build_search(schema: Schema, model: Model, stored_row: bool = False) -> list[ast.FunctionDef]:
    """`search_m(record, words)` (or `search_row_m(row, words)`), or nothing for a model
    without `@search` fields."""
    fields = search_fields(model)
    if not fields:
        return []
    subject = "row" if stored_row else "record"
    texts = tuple_([item(subject, model.fields.index(f) if stored_row else f.name) for f in fields])
    listed = ", ".join(f.name for f in fields)
    doc = (
        origin(schema, model.line, model.name)
        + f"\n\nTrue when every word of `words` is a prefix of a word of {listed} (dbsvc/textsearch.py)."
    )
    body = [return_(call(f"{WORDS}.matches", texts, name("words")))]
    return [function(per_model("search_row" if stored_row else "search", model), [subject, "words"], doc, body)]


def search_clause(model: Model, function_def: ast.FunctionDef, stored_row: bool) -> None:
    """Give a built `match_m` / `passes_m` its `search=()` argument and, first in its body
    (after the docstring), `if search and not search_m(subject, search): return False`."""
    if not search_fields(model):
        return
    subject = "row" if stored_row else "record"
    function_def.args.args.append(ast.arg(arg=SEARCH))
    function_def.args.defaults.append(tuple_([]))  # after the operators' `ranges=(), nulls=()`
    test = call(per_model("search_row" if stored_row else "search", model), name(subject), name(SEARCH))
    function_def.body.insert(1, if_(and_(name(SEARCH), not_(test)), [return_(const(False))]))


def search_branch(model: Model) -> list[tuple[ast.expr, Stmts]]:
    """The parser branch of `search=TEXT` (a model with `@search` fields only)."""
    if not search_fields(model):
        return []
    given_twice = raise_(call("BadQuery", const(f"{SEARCH!r} given more than once")))
    return [
        (
            eq(name("_dbsvc_name"), const(SEARCH)),
            [if_(is_not_none(name(_STATE)), [given_twice]), assign(_STATE, call(f"{WORDS}.query_words", name(_VALUE)))],
        )
    ]


def search_state(model: Model) -> dict[str, ast.expr]:
    return {_STATE: const(None)} if search_fields(model) else {}


def search_result(model: Model) -> dict[str, ast.expr]:
    """`search=_dbsvc_search or ()` for the parser's Query."""
    return {SEARCH: or_(name(_STATE), tuple_([]))} if search_fields(model) else {}
