"""`POST /batch`'s decisions (dbsvc/batchops.py), in process: `BatchRoute.answer` over a real
store in a temporary directory, no server. tests/app/test_batch.py drives the same route
through a server process (the wire, the guard, the problem bodies); these reach each
refusal and each result's exact text where mutation testing can see them (mutmut records
only calls made in its own process: docs/mutation.md).

The store is the blog's, seeded with users 1 and 2 and post 1 (by user 1), at offsets 1-3.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.access import Access, Refusals
from dbsvc.batchops import BatchRoute, parse_ops
from dbsvc.errors import RequestError
from dbsvc.rules import ModelRules, Scope, claim, same
from dbsvc.runtime import Query
from support.storage import BLOG, open_store, post, user

SEEDED = [("User", user(1)), ("User", user(2)), ("BlogPost", post(1, author=1))]
MODELS = dict(BLOG.ROUTES)
SPELLED = BatchRoute(MODELS, Access(Refusals())).models  # both spellings of each model


def create_user(n: int) -> dict[str, Any]:
    return {"op": "create", "model": "user", "record": {"email": f"n{n}@x.io", "name": f"new {n}"}}


def answered(tmp_path, ops: Any, route: BatchRoute | None = None, claims: Any = None, **seen: Callable) -> Any:
    """Run one batch body on the seeded store: (status, body or problem, headers, state),
    the state being every model's records afterwards and the store's head."""
    route = route or BatchRoute(MODELS, Access(Refusals()))

    async def main() -> Any:
        directory = tmp_path / "tenant"
        directory.mkdir(parents=True, exist_ok=True)
        store = open_store(str(directory), sync="off")
        try:
            if not store.applied_offset:
                store.insert_batch(SEEDED)
            try:
                kw = {} if claims is None else {"claims": claims}
                deferred = route.answer(store, ops, **kw)
                await deferred.future
                response = deferred.response
                outcome: Any = (response.status, json.loads(response.body), dict(response.headers))
            except RequestError as exc:
                outcome = (exc.status, {"code": exc.code, "detail": exc.detail, **exc.extra}, {})
            state = {
                m: [r for r in store.list_records(m, Query(limit=1000))[0]] for m in ("User", "BlogPost", "Comment")
            }
            return (*outcome, state, store.applied_offset)
        finally:
            await store.aclose()

    return asyncio.run(main())


def refusal(tmp_path, ops: Any, **kw: Any) -> tuple[int, dict]:
    status, problem, _headers, state, head = answered(tmp_path, ops, **kw)
    assert head == 3, "a refused batch wrote nothing"
    assert [u["id"] for u in state["User"]] == [1, 2] and [p["id"] for p in state["BlogPost"]] == [1]
    return status, problem


# -- the body's shape (rule 1) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, detail",
    [
        ([], 'a batch is a JSON object {"ops": [...]}, got list'),
        ({"ops": [], "x": 1}, "unknown batch key 'x': expected only 'ops'"),
        ({}, "'ops' must be a list of ops, got nothing"),
        ({"ops": {}}, "'ops' must be a list of ops, got dict"),
        ({"ops": []}, "'ops' is empty: expected 1 to 1000 ops"),
    ],
)
def test_a_body_of_another_shape_is_refused(body, detail):
    with pytest.raises(RequestError) as caught:
        parse_ops(body, SPELLED)
    assert (caught.value.status, caught.value.detail, caught.value.extra) == (400, detail, {})


def test_the_op_limit_is_1000_and_its_refusal_names_the_limit_and_the_count():
    assert len(parse_ops({"ops": [create_user(i) for i in range(1000)]}, MODELS)) == 1000
    with pytest.raises(RequestError) as caught:
        parse_ops({"ops": [create_user(i) for i in range(1001)]}, SPELLED)
    assert caught.value.status == 400
    assert caught.value.detail == "a batch holds at most 1000 ops, got 1001: split it"
    assert caught.value.extra == {"limit": 1000}


WHERE = "expected '*' or a comma-separated list of entity tags such as \"\\\"12\\\"\" (the ETag a read gave)"


@pytest.mark.parametrize(
    "op, detail",
    [
        (5, "an op is a JSON object, got int"),
        ({"op": "upsert", "model": "user"}, "unknown op 'upsert': expected one of create, update, patch, delete"),
        ({"op": 1, "model": "user"}, "unknown op 1: expected one of create, update, patch, delete"),
        (
            {"op": "create", "model": "user", "record": {}, "if_match": "*"},
            "a create op takes no 'if_match': a new record has no version to match",
        ),
        (
            {"op": "create", "model": "user", "record": {}, "id": 3},
            "unknown key 'id' in a create op: expected model, op, record",
        ),
        ({"op": "create", "model": "user"}, "a create op needs 'record'"),
        ({"op": "delete", "model": "user"}, "a delete op needs 'id'"),
        ({"op": "patch", "model": "user", "id": 1}, "a patch op needs 'record'"),
        (
            {"op": "delete", "model": "user", "id": 1, "record": {}},
            "unknown key 'record' in a delete op: expected id, model, op",
        ),
        (
            {"op": "delete", "model": "nope", "id": 1},
            "unknown model 'nope': expected one of BlogPost, Comment, User, blog-post, comment, user",
        ),
        (
            {"op": "delete", "model": 3, "id": 1},
            "unknown model 3: expected one of BlogPost, Comment, User, blog-post, comment, user",
        ),
        (
            {"op": "delete", "model": ["user"], "id": 1},
            "unknown model ['user']: expected one of BlogPost, Comment, User, blog-post, comment, user",
        ),
        ({"op": "create", "model": "user", "record": [1]}, "'record' must be a JSON object, got list"),
        ({"op": "update", "model": "user", "id": 1, "record": None}, "'record' must be a JSON object, got NoneType"),
        ({"op": "delete", "model": "user", "id": True}, "'id' must be a User id (a number or a string), got True"),
        ({"op": "delete", "model": "user", "id": 1.5}, "'id' must be a User id (a number or a string), got 1.5"),
        ({"op": "delete", "model": "user", "id": [1]}, "'id' must be a User id (a number or a string), got [1]"),
        ({"op": "delete", "model": "user", "id": "abc"}, "invalid id 'abc': User ids are signed 64-bit integers"),
        ({"op": "delete", "model": "user", "id": 1, "if_match": 5}, f"'if_match' must be a string, got 5: {WHERE}"),
        ({"op": "delete", "model": "user", "id": 1, "if_match": "12"}, f"'if_match' '12' is malformed: {WHERE}"),
    ],
)
def test_an_op_of_another_shape_is_refused_naming_its_index(op, detail):
    with pytest.raises(RequestError) as caught:
        parse_ops({"ops": [create_user(0), op]}, SPELLED)
    assert (caught.value.status, caught.value.detail, caught.value.extra) == (400, f"op 1: {detail}", {"op": 1})


def test_an_id_is_parsed_as_a_path_segment_is():
    ops = parse_ops(
        {
            "ops": [
                {"op": "delete", "model": "user", "id": "7"},
                {"op": "delete", "model": "User", "id": 7.0},
                {"op": "delete", "model": "user", "id": 7},
                {"op": "delete", "model": "user", "id": {"$op": 0}},
            ]
        },
        SPELLED,
    )
    assert [(op.index, op.kind, op.model.name, op.id) for op in ops] == [
        (0, "delete", "User", 7),
        (1, "delete", "User", 7),
        (2, "delete", "User", 7),
        (3, "delete", "User", {"$op": 0}),
    ]
    assert [type(op.id) for op in ops[:3]] == [int, int, int]
    assert [op.record for op in ops] == [None] * 4 and [op.conditions for op in ops] == [None] * 4


# -- a batch that succeeds (rules 4-6) -----------------------------------------------------------


def test_a_batch_answers_each_ops_result_its_offsets_and_the_last_offset(tmp_path):
    ops = [
        create_user(3),
        {
            "op": "create",
            "model": "blog-post",
            "record": {"author_id": {"$op": 0}, "title": "t", "body": "b", "score": 1},
        },
        {"op": "patch", "model": "BlogPost", "id": {"$op": 1}, "record": {"published": True}},
        {
            "op": "update",
            "model": "user",
            "id": "2",
            "record": {"email": "q@x.io", "name": "Q", "joined": "2026-01-01T00:00:00Z"},
        },
        {"op": "delete", "model": "blog-post", "id": 1},
        {"op": "delete", "model": "user", "id": 1},
    ]
    status, body, headers, state, head = answered(tmp_path, {"ops": ops})
    assert status == 200 and head == 9
    assert headers == {"Dbsvc-Offset": "9"}
    new_post = {"id": 2, "author_id": 3, "title": "t", "body": "b", "published": True, "score": 1.0, "tags": None}
    user_2 = {
        "id": 2, "email": "q@x.io", "name": "Q", "age": None, "role": "reader",
        "joined": "2026-01-01T00:00:00Z", "profile": None,
    }  # fmt: skip
    assert body == {
        "results": [
            {"status": 201, "id": 3, "etag": '"4"'},
            {"status": 201, "id": 2, "etag": '"5"'},
            {"status": 200, "id": 2, "record": new_post, "etag": '"6"'},
            {"status": 200, "id": 2, "record": user_2, "etag": '"7"'},
            {"status": 204, "id": 1},
            {"status": 204, "id": 1},
        ],
        "first": 4,
        "last": 9,
    }
    assert [u["id"] for u in state["User"]] == [2, 3] and state["BlogPost"] == [new_post]


def test_the_answer_is_compact_json_in_the_results_order(tmp_path):
    async def main() -> bytes:
        directory = tmp_path / "t"
        directory.mkdir()
        store = open_store(str(directory), sync="off")
        try:
            store.insert_batch(SEEDED)
            route = BatchRoute(MODELS, Access(Refusals()))
            ops = [create_user(3), {"op": "delete", "model": "user", "id": 3}]
            deferred = route.answer(store, {"ops": ops})
            await deferred.future
            return deferred.response.body
        finally:
            await store.aclose()

    assert asyncio.run(main()) == (
        b'{"results":[{"status":201,"id":3,"etag":"\\"4\\""},{"status":204,"id":3}],"first":4,"last":5}'
    )


def test_a_json_field_holding_an_op_reference_is_stored_as_it_is(tmp_path):
    record = {"author_id": 1, "title": "t", "body": "b", "score": 1, "tags": {"$op": 0}}
    ops = [create_user(3), {"op": "create", "model": "blog-post", "record": record}]
    status, body, _h, state, _head = answered(tmp_path, {"ops": ops})
    assert status == 200 and state["BlogPost"][1]["tags"] == {"$op": 0}
    assert record["tags"] == {"$op": 0} and record["author_id"] == 1


def test_an_op_reference_in_a_ref_field_leaves_the_request_record_as_it_was(tmp_path):
    record = {"author_id": {"$op": 0}, "title": "t", "body": "b", "score": 1}
    status, _body, _h, state, _head = answered(
        tmp_path, {"ops": [create_user(3), {"op": "create", "model": "blog-post", "record": record}]}
    )
    assert status == 200 and state["BlogPost"][1]["author_id"] == 3
    assert record["author_id"] == {"$op": 0}


# -- refusals while the batch runs (rule 4) --------------------------------------------------------


@pytest.mark.parametrize(
    "ops, status, code, detail",
    [
        ([create_user(3), create_user(3)], 409, "unique_violation", "op 1: email 'n3@x.io' is already used by user 3"),
        (
            [
                create_user(3),
                {
                    "op": "create",
                    "model": "blog-post",
                    "record": {"author_id": 9, "title": "t", "body": "b", "score": 1},
                },
            ],
            409,
            "foreign_key_violation",
            "op 1: author_id 9 does not match any user",
        ),
        ([create_user(3), {"op": "delete", "model": "user", "id": 9}], 404, "not_found", "op 1: User 9 does not exist"),
        (
            [create_user(3), {"op": "patch", "model": "user", "id": 9, "record": {}}],
            404,
            "not_found",
            "op 1: User 9 does not exist",
        ),
        (
            [create_user(3), {"op": "delete", "model": "user", "id": 1}],
            409,
            "referenced",
            "op 1: user 1 is referenced by 1 record(s) of BlogPost",
        ),
        (
            [create_user(3), {"op": "create", "model": "user", "record": {"email": "x@x.io"}}],
            422,
            "constraint_violation",
            "op 1: name: missing required field 'name' (a string)",
        ),
        (
            [create_user(3), {"op": "update", "model": "user", "id": 2, "record": {"name": "Q"}}],
            422,
            "constraint_violation",
            "op 1: email: missing required field 'email' (a string)",
        ),
    ],
)
def test_a_refused_op_refuses_the_batch_with_its_own_answer_and_index(tmp_path, ops, status, code, detail):
    got_status, problem = refusal(tmp_path, {"ops": ops})
    assert (got_status, problem["code"], problem["detail"], problem["op"]) == (status, code, detail, 1)


@pytest.mark.parametrize(
    "index, target, expected",
    [
        (0, 0, "none: it is the first op"),
        (1, 1, "0"),
        (1, -1, "0"),
        (3, 3, "0 to 2"),
        (2, True, "0 to 1"),
        (2, "0", "0 to 1"),
    ],
)
def test_an_op_reference_must_name_an_earlier_op(tmp_path, index, target, expected):
    ops = [create_user(10 + i) for i in range(index)]
    ops.append({"op": "delete", "model": "user", "id": {"$op": target}})
    status, problem = refusal(tmp_path, {"ops": ops})
    assert status == 400 and problem["op"] == index
    assert problem["detail"] == f"op {index}: id {{'$op': {target!r}}} must name an earlier op: expected {expected}"


def test_an_op_reference_must_name_a_record_of_the_right_model(tmp_path):
    post_record = {"author_id": 1, "title": "t", "body": "b", "score": 1}
    ops = [
        {"op": "create", "model": "blog-post", "record": post_record},
        {"op": "create", "model": "blog-post", "record": dict(post_record, author_id={"$op": 0})},
    ]
    status, problem = refusal(tmp_path, {"ops": ops})
    assert (status, problem["detail"]) == (400, "op 1: author_id {'$op': 0} names a BlogPost (op 0), expected a User")
    ops[1] = {"op": "delete", "model": "user", "id": {"$op": 0}}
    status, problem = refusal(tmp_path, {"ops": ops})
    assert (status, problem["detail"]) == (400, "op 1: id {'$op': 0} names a BlogPost (op 0), expected a User")


# -- if_match (rule 2) -----------------------------------------------------------------------------


def test_if_match_holds_for_the_records_version_and_for_a_star(tmp_path):
    ops = [
        {"op": "patch", "model": "user", "id": 2, "if_match": '"2"', "record": {"name": "Two"}},
        {"op": "patch", "model": "user", "id": 2, "if_match": '"1", "4"', "record": {"name": "Deux"}},
        {"op": "delete", "model": "blog-post", "id": 1, "if_match": "*"},
    ]
    status, body, _h, state, head = answered(tmp_path, {"ops": ops})
    assert status == 200 and head == 6
    assert [r["etag"] for r in body["results"][:2]] == ['"4"', '"5"'] and state["User"][1]["name"] == "Deux"


@pytest.mark.parametrize(
    "ops, detail",
    [
        (
            [{"op": "patch", "model": "user", "id": 2, "if_match": '"1"', "record": {"name": "x"}}],
            'op 0: If-Match "1" does not match: User 2 is at version "2"; read it again and retry with its ETag',
        ),
        (
            [
                {"op": "patch", "model": "user", "id": 2, "record": {"name": "x"}},
                {"op": "delete", "model": "user", "id": 2, "if_match": '"2"'},
            ],
            'op 1: If-Match "2" does not match: User 2 is at version "4"; read it again and retry with its ETag',
        ),
        (
            [{"op": "update", "model": "user", "id": 9, "if_match": "*", "record": {}}],
            "op 0: If-Match * does not match: User 9 does not exist",
        ),
        (
            [
                create_user(3),
                {"op": "delete", "model": "user", "id": 3},
                {"op": "delete", "model": "user", "id": 3, "if_match": '"4"'},
            ],
            'op 2: If-Match "4" does not match: User 3 does not exist',
        ),
    ],
)
def test_a_failed_if_match_is_412_naming_the_op(tmp_path, ops, detail):
    status, problem = refusal(tmp_path, {"ops": ops})
    assert (status, problem["code"], problem["detail"]) == (412, "precondition_failed", detail)
    assert problem["op"] == len(ops) - 1


# -- access rules (rule 4: each op as its single route) ----------------------------------------------


def own_posts() -> ModelRules:
    """Read, create, update and delete only your own posts (`author_id == token.uid`)."""

    def me(claims: Any) -> Any:
        return claim(claims, ("uid",))

    def scope(claims: Any) -> Scope:
        return Scope(where=lambda r: same(r["author_id"], me(claims)))

    return ModelRules(
        list=scope,
        subscribe=scope,
        get=lambda record, claims: same(record["author_id"], me(claims)),
        create=lambda record, claims: same(record["author_id"], me(claims)),
        update=lambda before, after, claims: (
            same(before["author_id"], me(claims)) and same(after["author_id"], me(claims))
        ),
        delete=lambda record, claims: same(record["author_id"], me(claims)) and record["title"] != "keep",
        text={},
    )


def ruled(refusals: Refusals) -> BatchRoute:
    models = dict(MODELS)
    models["blog-post"] = dataclasses.replace(models["blog-post"], rules=own_posts())
    return BatchRoute(models, Access(refusals))


POST_BY = {"title": "t", "body": "b", "score": 1}


@pytest.mark.parametrize(
    "op, status, detail, counted",
    [
        (
            {"op": "create", "model": "blog-post", "record": dict(POST_BY, author_id=1)},
            403,
            "op 1: create of BlogPost is not allowed by the model's access rules for this token",
            "create",
        ),
        ({"op": "delete", "model": "blog-post", "id": 1}, 404, "op 1: BlogPost 1 does not exist", "delete"),
        ({"op": "delete", "model": "blog-post", "id": 7}, 404, "op 1: BlogPost 7 does not exist", None),
        (
            {"op": "patch", "model": "blog-post", "id": 1, "record": {"title": "x"}},
            404,
            "op 1: BlogPost 1 does not exist",
            "update",
        ),
        (
            {"op": "patch", "model": "blog-post", "id": 2, "record": {"author_id": 1}},
            403,
            "op 1: update of BlogPost is not allowed by the model's access rules for this token",
            "update",
        ),
        (
            {"op": "patch", "model": "blog-post", "id": 2, "record": {"title": "keep"}, "if_match": '"9"'},
            412,
            'op 1: If-Match "9" does not match: BlogPost 2 is at version "4"; read it again and retry with its ETag',
            None,
        ),
        (
            {"op": "patch", "model": "blog-post", "id": 1, "if_match": '"3"', "record": {"title": "x"}},
            412,
            "op 1: If-Match \"3\" does not match: BlogPost 1 does not exist",
            "update",
        ),
        (
            {"op": "delete", "model": "blog-post", "id": 1, "if_match": '"3"'},
            412,
            "op 1: If-Match \"3\" does not match: BlogPost 1 does not exist",
            "delete",
        ),
    ],
)
def test_each_op_meets_its_single_routes_access_rules(tmp_path, op, status, detail, counted):
    refusals = Refusals()
    ops = [{"op": "create", "model": "blog-post", "record": dict(POST_BY, author_id=2)}, op]
    got, problem = refusal(tmp_path, {"ops": ops}, route=ruled(refusals), claims={"uid": 2})
    assert (got, problem["detail"], problem["op"]) == (status, detail, 1)
    assert {k: n for k, n in refusals.counts.items() if n} == ({counted: 1} if counted else {})


def test_ops_the_rules_allow_go_through_and_a_delete_needs_its_own_rule(tmp_path):
    refusals = Refusals()
    ops = [
        {"op": "create", "model": "blog-post", "record": dict(POST_BY, author_id=2)},
        {"op": "patch", "model": "blog-post", "id": {"$op": 0}, "record": {"title": "keep"}},
        {"op": "delete", "model": "blog-post", "id": {"$op": 0}},
    ]
    status, problem = refusal(tmp_path, {"ops": ops}, route=ruled(refusals), claims={"uid": 2})
    assert (status, problem["detail"]) == (
        403,
        "op 2: delete of BlogPost is not allowed by the model's access rules for this token",
    )
    ops[1]["record"] = {"title": "go"}
    status, body, _h, state, _head = answered(tmp_path, {"ops": ops}, route=ruled(refusals), claims={"uid": 2})
    assert status == 200 and [r["status"] for r in body["results"]] == [201, 200, 204]
    assert [p["id"] for p in state["BlogPost"]] == [1]


def test_an_op_reference_may_name_an_update_or_a_delete(tmp_path):
    ops = [
        {"op": "patch", "model": "user", "id": 2, "record": {"name": "Two"}},
        {"op": "update", "model": "user", "id": {"$op": 0}, "record": {"id": 2, "email": "t@x.io", "name": "Deux"}},
        {"op": "delete", "model": "blog-post", "id": 1},
        {"op": "patch", "model": "user", "id": {"$op": 1}, "record": {"age": 3}},
    ]
    status, body, _h, state, _head = answered(tmp_path, {"ops": ops})
    assert status == 200 and [r["id"] for r in body["results"]] == [2, 2, 1, 2]
    assert (state["User"][1]["name"], state["User"][1]["age"]) == ("Deux", 3) and state["BlogPost"] == []
    ops.append({"op": "delete", "model": "blog-post", "id": {"$op": 2}})
    status, problem = refusal(tmp_path / "again", {"ops": ops})
    assert (status, problem["detail"], problem["op"]) == (404, "op 4: BlogPost 1 does not exist", 4)


def test_a_create_takes_its_token_defaults_before_it_is_validated(tmp_path):
    def fill(body: dict, claims: Any) -> None:  # as a generated `@default(token.uid)` filler
        body.setdefault("author_id", claims["uid"])

    models = dict(MODELS)
    models["blog-post"] = dataclasses.replace(models["blog-post"], fill_from_token=fill)
    route = BatchRoute(models, Access(Refusals()))
    ops = [{"op": "create", "model": "blog-post", "record": dict(POST_BY)}]
    status, body, _h, state, _head = answered(tmp_path, {"ops": ops}, route=route, claims={"uid": 2})
    assert status == 200 and state["BlogPost"][1]["author_id"] == 2
