"""Access rules on the REST routes, through the `Application` over a real store, with rules
built by hand as the compiler would emit them (`ModelRules` of `Scope`s and functions,
dbsvc/rules.py, set on the generated model with `dataclasses.replace`).

The rules of the blog's posts here: read a post when it is published or yours
(`record.published == true or record.author_id == token.uid`, a residual row test), or,
in `owned`, only yours (`record.author_id == token.uid`, pinned on the `@filter` field);
create, update (both sides) and delete only your own. Users have no rules."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import types
from collections.abc import Callable
from typing import Any

import pytest

from dbsvc.access import scoped_query
from dbsvc.app import Application
from dbsvc.errors import RequestError
from dbsvc.http.message import split_target
from dbsvc.http.types import Deferred, Request
from dbsvc.realtime.broker import Broker
from dbsvc.rules import NOTHING, ModelRules, Scope, claim, same
from dbsvc.runtime import Query
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, open_store, post, user

POST = BLOG.BY_NAME["BlogPost"]
AUTHOR = POST.fields.index("author_id")
PUBLISHED = POST.fields.index("published")
AUTHOR_KEY = POST.keys["author_id"]


def uid(claims) -> Any:
    return claim(claims, ("uid",))


def public_or_own(claims) -> Scope:
    me = uid(claims)
    return Scope(
        where=lambda r: same(r["published"], True) or same(r["author_id"], me),
        where_row=lambda v: same(v[PUBLISHED], True) or same(v[AUTHOR], me),
    )


def own(claims) -> Scope:
    me = uid(claims)
    if type(me) is not int:
        return NOTHING
    return Scope(field="author_id", keys=frozenset({AUTHOR_KEY(me)}), key=AUTHOR_KEY)


def rules_of(read: Callable[[Any], Scope]) -> ModelRules:
    return ModelRules(
        list=read,
        subscribe=read,
        get=lambda record, claims: read(claims).visible(record),
        create=lambda record, claims: same(record["author_id"], uid(claims)),
        update=lambda before, after, claims: (
            same(before["author_id"], uid(claims)) and same(after["author_id"], uid(claims))
        ),
        delete=lambda record, claims: same(record["author_id"], uid(claims)),
        text={},
    )


def module_with(post_model) -> types.SimpleNamespace:
    by_name = {**BLOG.BY_NAME, "BlogPost": post_model}
    return types.SimpleNamespace(
        MODELS=tuple(by_name.values()),
        ROUTES={m.kebab: m for m in by_name.values()},
        BY_NAME=by_name,
        DESCRIPTION=BLOG.DESCRIPTION,
        RULES=True,
    )


ANN, BOB = {"uid": 1}, {"uid": 2}


class Api:
    """An Application over a fresh store: `call(claims, method, target, body)` -> (status,
    decoded body), as the protocol layer would answer (errors as their problem body)."""

    def __init__(self, directory: str, post_model) -> None:
        self.store = open_store(directory, sync="off")
        module = module_with(post_model)
        self.app = Application(module, self.store, Broker(self.store, module.BY_NAME, 64))
        self.models = module.ROUTES

    async def call(self, claims, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        path, pairs = split_target(target)
        raw = b"" if body is None else json.dumps(body).encode()
        request = Request(method, target, path, pairs, [("content-type", "application/json")], raw)
        kebab, _, segment = path[len("/api/") :].partition("/")
        try:
            answer = self.app.dispatch(request, self.models[kebab], segment or None, claims)
            if isinstance(answer, Deferred):
                await answer.future
                answer = answer.response
        except RequestError as exc:
            return exc.status, {"code": exc.code, "detail": exc.detail}
        return answer.status, json.loads(answer.body) if answer.body else None

    def state(self) -> tuple:
        return self.store.watermarks(), self.store.head_offset, self.store.live_counts()


async def seeded(api: Api) -> None:
    """Users 1-3; posts 1-30 by author 1 + i % 3, every fifth published."""
    for i in (1, 2, 3):
        await api.store.insert("User", user(i))
    for i in range(1, 31):
        await api.store.insert("BlogPost", post(i, author=1 + i % 3, published=i % 5 == 0, score=i / 10))


@pytest.fixture
def api(tmp_path):
    made: list[Api] = []

    def make(read: Callable[[Any], Scope] = public_or_own) -> Api:
        made.append(
            Api(create_tenant(str(tmp_path / "data"), f"t{len(made)}"), dataclasses.replace(POST, rules=rules_of(read)))
        )
        return made[-1]

    yield make
    for one in made:
        one.store.close()


def new_post(**over) -> dict:
    """A post body for POST or PUT: no id (the path or the store gives it)."""
    body = post(None, **over)
    del body["id"]
    return body


def visible_to(claims, records: list[dict], read=public_or_own) -> list[dict]:
    scope = read(claims)
    return [r for r in records if scope.visible(r)]


def test_a_list_counts_sorts_and_pages_only_what_the_token_may_see(api):
    a = api()

    async def go():
        await seeded(a)
        every = a.store.list_records("BlogPost", Query(limit=1000))[0]
        status, page = await a.call(ANN, "GET", "/api/blog-post?sort=-score&limit=4&offset=2")
        want = sorted(visible_to(ANN, every), key=lambda r: -r["score"])
        assert status == 200 and page["total"] == len(want) == 14
        assert page["data"] == want[2:6]
        status, page = await a.call(ANN, "GET", "/api/blog-post?author_id=3&limit=100")
        assert [r["id"] for r in page["data"]] == [r["id"] for r in want[::-1] if r["author_id"] == 3]
        status, page = await a.call({}, "GET", "/api/blog-post?limit=100")  # no uid: the published only
        assert page["total"] == 6 and all(r["published"] for r in page["data"])

    asyncio.run(go())


def test_an_owner_rule_meets_the_requests_own_filter_on_its_field(api):
    a = api(own)

    async def go():
        await seeded(a)
        status, page = await a.call(ANN, "GET", "/api/blog-post?limit=100")
        assert page["total"] == 10 and {r["author_id"] for r in page["data"]} == {1}
        status, page = await a.call(BOB, "GET", "/api/blog-post?limit=100")  # the same parsed query
        assert page["total"] == 10 and {r["author_id"] for r in page["data"]} == {2}
        status, page = await a.call(ANN, "GET", "/api/blog-post?author_id=2")
        assert (status, page["data"], page["total"]) == (200, [], 0)  # another's: an empty page
        status, page = await a.call(ANN, "GET", "/api/blog-post?author_id=2&author_id=1&published=true")
        assert page["total"] == 2 and {(r["author_id"], r["published"]) for r in page["data"]} == {(1, True)}
        status, page = await a.call({"uid": "1"}, "GET", "/api/blog-post")  # a string uid owns nothing
        assert (status, page["total"]) == (200, 0)

    asyncio.run(go())


def test_scoped_query_keeps_the_query_and_adds_only_what_the_scope_pins():
    query = Query(filters={"author_id": frozenset({1, 2})}, limit=5)
    assert scoped_query(POST, query, own(BOB)).filters == {"author_id": frozenset({2})}
    assert scoped_query(POST, query, own({"uid": 3})) is None
    assert scoped_query(POST, Query(), own(BOB)).filters == {"author_id": frozenset({2})}
    assert scoped_query(POST, query, NOTHING) is None
    residual = scoped_query(POST, query, public_or_own(ANN))
    assert residual is not None and residual.filters == query.filters and residual.where_row is not None
    # Every field of Query set away from its default: scoped_query builds its Query field by
    # field (for speed), so a field it forgot to carry shows here.
    full = Query(
        filters={},
        sort=(("score", True),),
        limit=7,
        offset=3,
        projection="summary",
        as_of=5,
        after=2,
        ranges=(("score", 1.0, True, None, False),),
        nulls=(("score", False),),
        cursor=((9.0,), 4),
        expand=(("author_id", None),),
        search=("caf",),
    )
    unset = [f.name for f in dataclasses.fields(Query) if getattr(full, f.name) == getattr(Query(), f.name)]
    assert unset == ["filters", "where_row"], unset  # filters: the scope's; where_row: none for own()
    scoped = scoped_query(POST, full, own(BOB))
    assert scoped == dataclasses.replace(full, filters={"author_id": frozenset({2})})  # nothing else changed


def test_a_hidden_record_is_404_exactly_as_a_missing_one_for_get_put_patch_delete(api):
    a = api()

    async def go():
        await seeded(a)
        hidden = 1  # author 2, unpublished: ANN may not read it
        for method, body in (("GET", None), ("PUT", new_post(author=1)), ("PATCH", {"title": "x"}), ("DELETE", None)):
            before = a.state()
            seen = await a.call(ANN, method, f"/api/blog-post/{hidden}", body)
            absent = await a.call(ANN, method, "/api/blog-post/999", body)
            assert seen[0] == absent[0] == 404, method
            assert (
                seen[1]["detail"] == "BlogPost 1 does not exist"
                and absent[1]["detail"] == "BlogPost 999 does not exist"
            )
            assert a.state() == before
        assert (await a.call(BOB, "GET", f"/api/blog-post/{hidden}"))[0] == 200

    asyncio.run(go())


def test_a_readable_record_the_write_rule_refuses_is_403_and_changes_nothing(api):
    a = api()

    async def go():
        await seeded(a)
        published = 5  # author 3, published: ANN reads it, may not write it
        assert (await a.call(ANN, "GET", f"/api/blog-post/{published}"))[0] == 200
        before = a.state()
        for method, body in (("PATCH", {"title": "mine now"}), ("PUT", new_post(author=3)), ("DELETE", None)):
            status, problem = await a.call(ANN, method, f"/api/blog-post/{published}", body)
            operation = "delete" if method == "DELETE" else "update"
            assert (status, problem["code"]) == (403, "forbidden"), method
            assert (
                problem["detail"]
                == f"{operation} of BlogPost is not allowed by the model's access rules for this token"
            )
        assert a.state() == before
        assert (await a.call(ANN, "GET", f"/api/blog-post/{published}"))[1]["title"] == "title 5"

    asyncio.run(go())


def test_an_update_asks_the_rule_of_both_sides(api):
    a = api()

    async def go():
        await seeded(a)
        mine = 3  # author 1
        before = a.state()
        assert (await a.call(ANN, "PATCH", f"/api/blog-post/{mine}", {"author_id": 2}))[0] == 403  # giving it away
        assert a.state() == before
        status, stored = await a.call(ANN, "PATCH", f"/api/blog-post/{mine}", {"title": "kept"})
        assert (status, stored["title"]) == (200, "kept")
        status, stored = await a.call(ANN, "PUT", f"/api/blog-post/{mine}", new_post(author=1, title="whole"))
        assert (status, stored["title"]) == (200, "whole")
        assert (await a.call(ANN, "DELETE", f"/api/blog-post/{mine}"))[0] == 204

    asyncio.run(go())


def test_a_create_the_rule_refuses_is_403_and_stores_nothing(api):
    a = api()

    async def go():
        await seeded(a)
        before = a.state()
        status, problem = await a.call(ANN, "POST", "/api/blog-post", new_post(author=2))
        assert (status, problem["code"]) == (403, "forbidden")
        assert problem["detail"] == "create of BlogPost is not allowed by the model's access rules for this token"
        assert a.state() == before
        status, created = await a.call(ANN, "POST", "/api/blog-post", new_post(author=1))
        assert (status, created) == (201, {"id": 31})
        # a body the model refuses is still 422, before any rule is asked
        assert (await a.call(ANN, "POST", "/api/blog-post", {"title": 5}))[0] == 422

    asyncio.run(go())


def test_token_defaults_are_filled_before_the_body_is_validated_and_the_rule_asked(tmp_path):
    def fill(body: dict, claims) -> None:  # as `@default(token.uid)` on author_id compiles
        body.setdefault("author_id", claims["uid"])

    model = dataclasses.replace(POST, rules=rules_of(own), fill_from_token=fill)
    a = Api(create_tenant(str(tmp_path / "data"), "t"), model)

    async def go():
        await seeded(a)
        body = new_post()
        del body["author_id"]
        status, created = await a.call(BOB, "POST", "/api/blog-post", body)
        assert status == 201
        assert (await a.call(BOB, "GET", f"/api/blog-post/{created['id']}"))[1]["author_id"] == 2

    try:
        asyncio.run(go())
    finally:
        a.store.close()


def test_as_of_asks_the_rule_of_the_record_as_it_was(api):
    a = api()

    async def go():
        await seeded(a)
        watermark = a.store.watermarks()["BlogPost"]
        assert (await a.call(BOB, "PATCH", "/api/blog-post/1", {"published": True}))[0] == 200
        assert (await a.call(ANN, "GET", "/api/blog-post/1"))[0] == 200
        status, problem = await a.call(ANN, "GET", f"/api/blog-post/1?as_of={watermark}")
        assert (status, problem["detail"]) == (404, "BlogPost 1 does not exist")
        status, page = await a.call(ANN, "GET", f"/api/blog-post?as_of={watermark}&limit=100")
        assert page["total"] == 14 and 1 not in [r["id"] for r in page["data"]]
        assert (await a.call(ANN, "GET", "/api/blog-post?limit=100"))[1]["total"] == 15

    asyncio.run(go())


def test_metrics_count_refusals_by_operation(api):
    a = api()

    async def go():
        await seeded(a)
        await a.call(ANN, "GET", "/api/blog-post/1")  # hidden: get
        await a.call(ANN, "PATCH", "/api/blog-post/1", {"title": "x"})  # hidden: update
        await a.call(ANN, "PATCH", "/api/blog-post/5", {"title": "x"})  # refused: update
        await a.call(ANN, "DELETE", "/api/blog-post/5")  # refused: delete
        await a.call(ANN, "POST", "/api/blog-post", new_post(author=2))  # refused: create
        await a.call(ANN, "GET", "/api/blog-post")  # a list is never refused
        await a.call(ANN, "GET", "/api/blog-post/999")  # missing: not a refusal

    asyncio.run(go())
    refused = json.loads(a.app.metrics().body)["refused"]
    assert refused == {"list": 0, "get": 1, "create": 1, "update": 2, "delete": 1, "subscribe": 0, "replicate": 0}


def test_a_schema_without_rules_answers_as_before_and_shows_no_refusals(tmp_path, stores):
    store = stores(create_tenant(str(tmp_path / "data"), "t"), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64))
    assert "refused" not in json.loads(app.metrics().body)


def test_a_tokens_scoped_list_query_is_kept_per_token_and_parsed_query():
    from dbsvc.access import Access
    from dbsvc.rules import Refusals

    access, rules = Access(Refusals()), rules_of(own)
    query = Query(limit=20)
    first = access.list_query(POST, rules, query, ANN, "Bearer ann")
    assert access.list_query(POST, rules, query, ANN, "Bearer ann") is first
    bob = access.list_query(POST, rules, query, BOB, "Bearer bob")
    assert first is not None and bob is not None
    assert (first.filters, bob.filters) == ({"author_id": frozenset({1})}, {"author_id": frozenset({2})})
    other = Query(limit=20)  # an equal query parsed again is another entry
    assert access.list_query(POST, rules, other, BOB, "Bearer bob") is not bob
    # without a token (no guard) nothing is kept: the claims decide each time
    assert access.list_query(POST, rules, query, ANN, None).filters == {"author_id": frozenset({1})}
    assert access.list_query(POST, rules, query, BOB, None).filters == {"author_id": frozenset({2})}


# The edges a mutation run of dbsvc/access.py left (docs/mutation.md): the scoped query's
# row tests, the cache's bound and order of eviction, the checks' refusals counted once.


def test_scoped_query_of_everything_is_the_query_itself():
    query = Query(filters={"author_id": frozenset({1})}, limit=5)
    assert scoped_query(POST, query, Scope(everything=True)) is query


def test_scoped_query_tests_rows_with_a_scope_that_has_only_a_record_test():
    def published(record):
        return record["published"] is True

    scoped = scoped_query(POST, Query(), Scope(where=published))
    assert scoped is not None and scoped.where_row is not None and scoped.filters == {}
    yes = tuple(POST.row(post(1, author=1, published=True)))
    no = tuple(POST.row(post(2, author=1, published=False)))
    assert (scoped.where_row(yes), scoped.where_row(no)) == (True, False)


def test_scoped_query_ands_the_querys_row_test_with_the_scopes():
    def first_author(values):
        return values[AUTHOR] == 1

    def published(values):
        return values[PUBLISHED] is True

    query = Query(where_row=first_author)
    scoped = scoped_query(POST, query, Scope(where_row=published))
    assert scoped is not None and scoped.where_row is not None
    rows = {(a, p): tuple(POST.row(post(1, author=a, published=p))) for a in (1, 2) for p in (True, False)}
    assert {k for k, v in rows.items() if scoped.where_row(v)} == {(1, True)}
    # a scope without a row test keeps the query's own
    assert scoped_query(POST, query, own(ANN)).where_row is first_author
    assert scoped_query(POST, Query(), own(ANN)).where_row is None


def test_the_scoped_query_cache_holds_at_most_its_capacity_and_drops_the_oldest():
    from dbsvc.access import Access
    from dbsvc.rules import Refusals

    assert Access(Refusals()).capacity == 1024
    access, rules = Access(Refusals(), capacity=2), rules_of(own)
    query = Query(limit=20)
    ann = access.list_query(POST, rules, query, ANN, "Bearer ann")
    bob = access.list_query(POST, rules, query, BOB, "Bearer bob")
    assert access.list_query(POST, rules, query, ANN, "Bearer ann") is ann
    cy = access.list_query(POST, rules, query, {"uid": 3}, "Bearer cy")  # ann's entry goes
    assert access.list_query(POST, rules, query, BOB, "Bearer bob") is bob
    assert access.list_query(POST, rules, query, {"uid": 3}, "Bearer cy") is cy
    again = access.list_query(POST, rules, query, ANN, "Bearer ann")
    assert again is not ann and again is not None and again.filters == {"author_id": frozenset({1})}


def test_one_token_keeps_an_entry_per_parsed_query():
    from dbsvc.access import Access
    from dbsvc.rules import Refusals

    access, rules = Access(Refusals()), rules_of(own)
    first, second = Query(limit=20), Query(limit=5)
    one = access.list_query(POST, rules, first, ANN, "Bearer ann")
    two = access.list_query(POST, rules, second, ANN, "Bearer ann")
    assert access.list_query(POST, rules, first, ANN, "Bearer ann") is one
    assert access.list_query(POST, rules, second, ANN, "Bearer ann") is two
    assert (one is not None and one.limit, two is not None and two.limit) == (20, 5)


def test_a_list_under_a_scope_with_only_a_record_test_tests_the_stored_rows():
    from dbsvc.access import Access
    from dbsvc.rules import Refusals

    def published(claims) -> Scope:
        return Scope(where=lambda record: record["published"] is True)

    access, rules = Access(Refusals()), rules_of(published)
    yes = tuple(POST.row(post(1, author=1, published=True)))
    no = tuple(POST.row(post(2, author=1, published=False)))
    for token in (None, "Bearer ann"):
        scoped = access.list_query(POST, rules, Query(), ANN, token)
        assert scoped is not None and scoped.where_row is not None
        assert (scoped.where_row(yes), scoped.where_row(no)) == (True, False)


def test_a_forged_token_default_is_refused_and_counted_as_a_create():
    from dbsvc.access import Access
    from dbsvc.compiler import compile_schema
    from dbsvc.errors import Forbidden
    from dbsvc.rules import Refusals
    from dbsvc.schema import parse_schema

    module = compile_schema(
        parse_schema("model Note {\n  id int @id\n  owner str @default(token.sub)\n}\n", "test.dbs")
    )
    note = module.BY_NAME["Note"]
    refusals = Refusals()
    access = Access(refusals)
    body = {"owner": "ann"}
    access.fill_from_token(note, body, {"sub": "ann"})  # the same value: allowed
    access.fill_from_token(note, "not an object", {"sub": "ann"})  # left for validation
    assert refusals.counts["create"] == 0
    with pytest.raises(Forbidden):
        access.fill_from_token(note, {"owner": "bob"}, {"sub": "ann"})
    assert refusals.counts == {
        "list": 0,
        "get": 0,
        "create": 1,
        "update": 0,
        "delete": 0,
        "subscribe": 0,
        "replicate": 0,
    }


def test_each_check_counts_its_own_operation_once_and_passes_what_the_rule_allows():
    from dbsvc.access import Access
    from dbsvc.errors import Forbidden, NotFound
    from dbsvc.rules import Refusals

    refusals = Refusals()
    access, rules = Access(refusals), rules_of(own)
    mine, theirs = post(7, author=1), post(8, author=2)
    access.check_get(POST, rules, mine, 7, ANN)
    access.check_create(POST, rules, mine, ANN)
    access.check_visible(POST, rules, "update", mine, 7, ANN)
    access.check_update(POST, rules, mine, mine, ANN)
    access.check_delete(POST, rules, mine, ANN)
    assert set(refusals.counts.values()) == {0}
    with pytest.raises(NotFound) as hidden:
        access.check_get(POST, rules, theirs, 8, ANN)
    assert hidden.value.detail == "BlogPost 8 does not exist"
    with pytest.raises(NotFound) as hidden:
        access.check_visible(POST, rules, "delete", theirs, "8", ANN)
    assert hidden.value.detail == "BlogPost '8' does not exist"
    for check, args, operation in (
        (access.check_create, (theirs,), "create"),
        (access.check_update, (mine, theirs), "update"),
        (access.check_delete, (theirs,), "delete"),
    ):
        with pytest.raises(Forbidden) as refused:
            check(POST, rules, *args, ANN)
        assert refused.value.detail == (
            f"{operation} of BlogPost is not allowed by the model's access rules for this token"
        )
    assert refusals.counts == {
        "list": 0,
        "get": 1,
        "create": 1,
        "update": 1,
        "delete": 2,
        "subscribe": 0,
        "replicate": 0,
    }
