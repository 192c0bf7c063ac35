"""What access rules add to the OpenAPI document (dbsvc/compiler/openapi_rules.py), at its
own unit: `describe_rules` run on a paths mapping made here, and the sentences it and the
AsyncAPI document share, compared word for word with the texts written out below."""

from __future__ import annotations

import json

from dbsvc.compiler.openapi_rules import describe_rules, replicate_sentence, rule_sentence
from dbsvc.schema import parse_schema

SCHEMA = """\
@allow(replicate, token.role == "replicator")
@allow(replicate, token.sub == "backup")

model Open {
  id int @id
}

model Memo {
  id int @id
  owner str
  @allow(read, record.owner == token.sub)
  @allow(create, token.role == "writer")
  @allow(update delete, token.role == "admin")
}
"""

PROBLEM = {"schema": {"$ref": "#/components/schemas/Problem"}}
REQUEST_ID = {"$ref": "#/components/headers/X-Request-Id"}


def _response(description: str) -> dict:
    return {
        "description": description,
        "headers": {"X-Request-Id": REQUEST_ID},
        "content": {"application/problem+json": PROBLEM},
    }


def _paths() -> dict:
    """The operations describe_rules touches, as the OpenAPI builder hands them over; Open
    has none: a model without rules (declared first) is passed over, not looked up, and the
    models after it still get theirs."""

    def op(description: str | None = None) -> dict:
        out: dict = {"responses": {"200": {"description": "OK"}}}
        if description is not None:
            out["description"] = description
        return out

    return {
        "/api/memo": {"get": op("Lists memos."), "post": op()},
        "/api/memo/{id}": {"get": op(), "put": op(), "patch": op("Merges."), "delete": op()},
        "/subscribe/memo": {"get": op()},
        "/live-query/memo": {"get": op()},
        "/replicate": {"get": op("Streams frames.")},
        "/replicate/snapshot": {"get": op()},
    }


READ = "Access rule ({op}): `@allow(read, record.owner == token.sub)`."
LIST = READ.format(op="list") + (
    " The rule is a filter: the page, `total` and pagination count only the records the token may see (never an error)."
)
GET = READ.format(op="get") + " A record the rule hides answers 404, exactly as a missing record."
CREATE = (
    'Access rule (create): `@allow(create, token.role == "writer")`. The record as it would be stored (defaults '
    "and token defaults applied) must pass, else 403 `forbidden`."
)
UPDATE = (
    'Access rule (update): `@allow(update delete, token.role == "admin")`. A record the `get` rule hides answers '
    "404; when the update rule refuses (`record` the record before, `new` after; a rule that does not read `new` "
    "must hold before and after the change), 403 `forbidden`."
)
DELETE = (
    'Access rule (delete): `@allow(update delete, token.role == "admin")`. A record the `get` rule hides answers '
    "404; when the delete rule refuses, 403 `forbidden`."
)
SUBSCRIBE = READ.format(op="subscribe") + (
    " Only events with records the token may see reach the socket (an update leaving its view arrives as a "
    "delete, one entering it as an insert); a token that may see nothing is refused 403 at the upgrade."
)
WHO = (
    'This schema has access rules: only a token the replicate rule allows (`@allow(replicate, token.role == "replicator")` '
    'or `@allow(replicate, token.sub == "backup")`) may replicate, others get 403 `forbidden`.'
)


def _forbidden(operation: str) -> dict:
    return _response(
        f"`forbidden`: the token's tenant claim is missing or differs, or the `{operation}` rule of `Memo` refuses it "
        "(the detail names the operation and the model, never the record)."
    )


HIDDEN = _response(
    "`not_found`: no such record, or the `get` rule of `Memo` hides it from this token (the two are never told apart)."
)
OK = {"200": {"description": "OK"}}


def test_each_operation_gets_its_rule_and_the_answers_a_refusal_gives():
    paths = _paths()
    describe_rules(paths, parse_schema(SCHEMA, "memo.dbs"))
    assert json.dumps(paths) == json.dumps(
        {
            "/api/memo": {
                "get": {"responses": OK, "description": "Lists memos. " + LIST},
                "post": {"responses": {**OK, "403": _forbidden("create")}, "description": CREATE},
            },
            "/api/memo/{id}": {
                "get": {"responses": {**OK, "404": HIDDEN}, "description": GET},
                "put": {"responses": {**OK, "403": _forbidden("update"), "404": HIDDEN}, "description": UPDATE},
                "patch": {
                    "responses": {**OK, "403": _forbidden("update"), "404": HIDDEN},
                    "description": "Merges. " + UPDATE,
                },
                "delete": {"responses": {**OK, "403": _forbidden("delete"), "404": HIDDEN}, "description": DELETE},
            },
            "/subscribe/memo": {"get": {"responses": {**OK, "403": _forbidden("subscribe")}, "description": SUBSCRIBE}},
            "/live-query/memo": {
                "get": {"responses": {**OK, "403": _forbidden("subscribe")}, "description": SUBSCRIBE}
            },
            "/replicate": {
                "get": {
                    "responses": {**OK, "403": _response("`forbidden`: " + WHO)},
                    "description": "Streams frames. " + WHO,
                }
            },
            "/replicate/snapshot": {
                "get": {"responses": {**OK, "403": _response("`forbidden`: " + WHO)}, "description": WHO}
            },
        }
    )  # as JSON: the key order is the document's


def test_an_operation_no_rule_allows_says_so():
    schema = parse_schema("model Log {\n  id int @id\n  @allow(read)\n}\n", "log.dbs")
    assert rule_sentence(schema.models[0], "delete") == (
        "Access rules: no rule of `Log` allows delete, so it is refused for every token."
    )
    assert rule_sentence(schema.models[0], "get") == (
        "Access rule (get): `@allow(read)`. A record the rule hides answers 404, exactly as a missing record."
    )


def test_who_may_replicate():
    assert replicate_sentence(parse_schema("model A {\n  id int @id\n}\n", "a.dbs")) == ""
    assert replicate_sentence(parse_schema("model A {\n  id int @id\n  @allow(read)\n}\n", "a.dbs")) == (
        "This schema has access rules and no `@allow(replicate, ...)`: every token gets 403 `forbidden`."
    )
    assert replicate_sentence(parse_schema(SCHEMA, "memo.dbs")) == WHO


def test_without_rules_the_replication_routes_are_left_alone():
    paths = _paths()
    describe_rules(paths, parse_schema("model Open {\n  id int @id\n}\n", "open.dbs"))
    assert json.dumps(paths) == json.dumps(_paths())
