"""What access rules add to the API documents: each operation's rule in its description, and
the 403 / 404 responses they add (docs/guide/schema.md#access-rules).

`describe_rules(paths, schema)` runs after the OpenAPI paths are built: for every model with
an `@allow`, each CRUD operation and both feeds get a paragraph quoting the rules that allow
them (or saying none does) and what a refusal answers; the 403 and 404 responses of those
operations are replaced by ones whose descriptions say what the rule adds. With any rule in
the schema, `/replicate` and `/replicate/snapshot` say who may replicate (`replicate_sentence`).
`rule_sentence(model, operation)` and `replicate_sentence(schema)` are also what AsyncAPI shows.
(A `@default(token.X)` field's own note is in openapi_schemas.field_notes.) Pure: reads the IR.
"""

from __future__ import annotations

from typing import Any

from dbsvc.compiler.openapi_parts import PROBLEM_JSON
from dbsvc.compiler.openapi_schemas import ref
from dbsvc.routes import (
    LIVE_QUERY,
    REPLICATE_PATH,
    REPLICATE_SNAPSHOT_PATH,
    SUBSCRIBE,
    collection_path,
    feed_path,
    item_path,
)
from dbsvc.schema.ir import OPERATIONS, Model, Schema

# What a refusal answers, per operation (the semantics table).
_REFUSAL = {
    "list": "The rule is a filter: the page, `total` and pagination count only the records the token may see "
    "(never an error).",
    "get": "A record the rule hides answers 404, exactly as a missing record.",
    "create": "The record as it would be stored (defaults and token defaults applied) must pass, else 403 `forbidden`.",
    "update": "A record the `get` rule hides answers 404; when the update rule refuses (`record` the record "
    "before, `new` after; a rule that does not read `new` must hold before and after the change), 403 `forbidden`.",
    "delete": "A record the `get` rule hides answers 404; when the delete rule refuses, 403 `forbidden`.",
    "subscribe": "Only events with records the token may see reach the socket (an update leaving its view "
    "arrives as a delete, one entering it as an insert); a token that may see nothing is refused 403 at "
    "the upgrade.",
}


def rule_sentence(model: Model, operation: str) -> str:
    """`Access rule (get): `@allow(...)`. A record the rule hides answers 404, ...`"""
    texts = [rule.text for rule in model.rules if operation in rule.operations]
    if not texts:
        return f"Access rules: no rule of `{model.name}` allows {operation}, so it is refused for every token."
    quoted = " or ".join(f"`{text}`" for text in texts)
    return f"Access rule ({operation}): {quoted}. {_REFUSAL[operation]}"


def replicate_sentence(schema: Schema) -> str:
    """Who may replicate, when the schema has rules ("" when it has none: any valid token)."""
    if not schema.has_rules:
        return ""
    texts = " or ".join(f"`{rule.text}`" for rule in schema.replicate_rules)
    if not texts:
        return "This schema has access rules and no `@allow(replicate, ...)`: every token gets 403 `forbidden`."
    return f"This schema has access rules: only a token the replicate rule allows ({texts}) may replicate, others get 403 `forbidden`."


def _add(operation: dict[str, Any], sentence: str) -> None:
    before = operation.get("description")
    operation["description"] = f"{before} {sentence}" if before else sentence


def _response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {"X-Request-Id": ref("X-Request-Id", "headers")},
        "content": {PROBLEM_JSON: {"schema": ref("Problem")}},
    }


def _forbidden(model: Model, operation: str) -> dict[str, Any]:
    return _response(
        f"`forbidden`: the token's tenant claim is missing or differs, or the `{operation}` rule of "
        f"`{model.name}` refuses it (the detail names the operation and the model, never the record)."
    )


def _hidden(model: Model) -> dict[str, Any]:
    return _response(
        f"`not_found`: no such record, or the `get` rule of `{model.name}` hides it from this token "
        "(the two are never told apart)."
    )


def describe_rules(paths: dict[str, Any], schema: Schema) -> None:
    """Add each rule to its operations' descriptions and responses, in place."""
    for model in schema.models:
        if not model.rules:
            continue
        collection, item = paths[collection_path(model.kebab)], paths[item_path(model.kebab)]
        where = {
            "list": [collection["get"]],
            "create": [collection["post"]],
            "get": [item["get"]],
            "update": [item["put"], item["patch"]],
            "delete": [item["delete"]],
            "subscribe": [
                paths[feed_path(SUBSCRIBE, model.kebab)]["get"],
                paths[feed_path(LIVE_QUERY, model.kebab)]["get"],
            ],
        }
        for operation in OPERATIONS:
            for op in where[operation]:
                _add(op, rule_sentence(model, operation))
                if operation in ("create", "update", "delete", "subscribe"):
                    op["responses"]["403"] = _forbidden(model, operation)
                if operation in ("get", "update", "delete"):
                    op["responses"]["404"] = _hidden(model)
    who = replicate_sentence(schema)
    if who:
        for path in (REPLICATE_PATH, REPLICATE_SNAPSHOT_PATH):
            operation = paths[path]["get"]
            _add(operation, who)
            operation["responses"]["403"] = _response("`forbidden`: " + who)
