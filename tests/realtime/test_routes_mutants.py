"""The upgrade of a realtime socket (dbsvc/realtime/routes.py) at the unit where each decision
is made: which table names a model, the query, `after` and its int64 bound, the subprotocols
and the token in them, the Origin, the `subscribe` Scope and the links' Scopes, the replicate
rule, the snapshot's header and the close at the token's expiry. Every refusal's text is
compared word for word (it is the problem's `detail`). Written for the survivors of a
mutation run (docs/mutation.md): the end-to-end tests of these routes run a server in a
child process, which mutmut cannot see. A real store and broker, sessions sending into
recording channels, no socket."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from dbsvc.auth import Guard
from dbsvc.auth.settings import AuthConfig
from dbsvc.errors import BadQuery, Forbidden, NotFound, OffsetOutOfRange
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker
from dbsvc.realtime.feeds import FeedKind
from dbsvc.realtime.routes import RealtimeRoutes, check_after, offered_subprotocols, same_origin
from dbsvc.rules import Scope, claim
from support.authkit import AUDIENCE, ISSUER, TENANT, mint, public_pem
from support.realtime_kit import BLOG, Recorder, Scheduler, open_blog_store, owner_rules, run

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]
JOINED = "2026-01-01T00:00:00Z"
INT64_MAX = 9223372036854775807
AFTER_TEXT = "'after' must be a non-negative integer offset of at most 9223372036854775807, got "


def request(path: str, query: list | None = None, headers: list | None = None) -> Request:
    return Request("GET", path, path, query or [], headers or [])


def bearer(token: str) -> list:
    return [("authorization", f"Bearer {token}")]


def new_user(i: int, **over) -> dict:
    return USER.validate_create({"email": f"u{i}@x.io", "name": f"n{i}", "joined": JOINED, **over})


def payload(frame: bytes) -> bytes:
    n = frame[1] & 0x7F
    return frame[2 if n < 126 else 4 if n == 126 else 10 :]


def decoded(frame: bytes) -> dict:
    return json.loads(payload(frame))


def routes_of(store, models=None, capacity: int = 1024, **kw) -> tuple[RealtimeRoutes, Scheduler]:
    models = BLOG.BY_NAME if models is None else models
    broker = Broker(store, models, capacity)
    scheduler = Scheduler()
    broker.attach(scheduler)
    return RealtimeRoutes(broker, models, **kw), scheduler


def opened(upgrade) -> Recorder:
    channel = Recorder()
    upgrade.session.on_open(channel)
    return channel


RULED = {**BLOG.BY_NAME, "BlogPost": dataclasses.replace(POST, rules=owner_rules(POST, "author_id", "uid"))}


@pytest.fixture
def guarded():
    private = ec.generate_private_key(ec.SECP256R1())
    config = AuthConfig(alg="ES256", tenant=TENANT, issuer=ISSUER, audience=AUDIENCE, pubkey_pem=public_pem(private))
    return Guard(config), private


# -- pure helpers


def test_after_is_bounded_by_int64_with_the_value_named():
    assert check_after(0) == 0
    assert check_after(INT64_MAX) == INT64_MAX
    with pytest.raises(BadQuery) as refused:
        check_after(INT64_MAX + 1)
    assert refused.value.detail == AFTER_TEXT + "'9223372036854775808'"


def test_offered_subprotocols_are_every_sec_websocket_protocol_value_in_order():
    headers = [("sec-websocket-protocol", "bearer, chat"), ("origin", "a,b"), ("sec-websocket-protocol", " x ,, y")]
    assert offered_subprotocols(request("/subscribe/user", headers=headers)) == ["bearer", "chat", "x", "y"]
    assert offered_subprotocols(request("/subscribe/user")) == []


@pytest.mark.parametrize(
    "origin, host, same",
    [
        ("http://localhost:8080", "localhost:8080", True),
        ("https://LocalHost:8080/", "localhost:8080", True),  # scheme aside, case and a slash aside
        ("http://localhost:8080", "LOCALHOST:8080", True),
        ("http://localhost:8081", "localhost:8080", False),
        ("localhost:8080", "localhost:8080", False),  # no scheme: not an origin
        ("http://localhost:8080", None, False),
        ("http://evil.example://localhost:8080", "localhost:8080", False),  # the first "://" splits
        ("null", "localhost:8080", False),
        ("http://hostX", "host", False),  # only slashes are stripped
    ],
)
def test_same_origin_is_the_authority_after_the_scheme_against_the_host(origin, host, same):
    assert same_origin(origin, host) is same


# -- feeds: model, query, subprotocol, Origin


def test_subscribe_names_a_model_by_kebab_only_and_live_query_by_either(tmp_path):
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store)
    with pytest.raises(NotFound) as refused:
        routes.open(FeedKind.SUBSCRIBE, request("/subscribe/BlogPost"), "BlogPost")
    assert refused.value.detail == "no route for path '/subscribe/BlogPost'"
    assert routes.open(FeedKind.SUBSCRIBE, request("/subscribe/blog-post"), "blog-post").route == "subscribe"
    for segment in ("BlogPost", "blog-post"):
        upgrade = routes.open(FeedKind.LIVE, request(f"/live-query/{segment}"), segment)
        assert (upgrade.route, upgrade.session.spec.model.name) == ("live-query", "BlogPost")
    store.close()


def test_a_feed_keeps_its_query_filters_and_projection(tmp_path):
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store)
    query = [("role", "admin"), ("projection", "card")]
    upgrade = routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user", query), "user")
    spec = upgrade.session.spec
    assert (spec.kind, spec.projection, dict(spec.filters)) == (
        FeedKind.SUBSCRIBE,
        "card",
        {"role": USER.parse_feed_query([("role", "admin")]).filters["role"]},
    )
    assert (upgrade.subprotocol, upgrade.close_at) == (None, None)
    store.close()


@pytest.mark.parametrize(
    "offered, answer", [("Bearer, chat", "bearer"), ("chat, bearer", "bearer"), ("chat", None), ("bearer.x", None)]
)
def test_the_bearer_subprotocol_is_answered_when_offered_in_any_case(tmp_path, offered, answer):
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store)
    headers = [("sec-websocket-protocol", offered)]
    assert routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user", headers=headers), "user").subprotocol == answer
    store.close()


def test_an_origin_is_checked_against_the_configured_origins_unless_it_is_the_services_own(tmp_path):
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store, origins=("https://app.example",))

    def open_from(origin: str | None, host: str = "db.example:8080"):
        headers = [("host", host)] + ([("origin", origin)] if origin is not None else [])
        return routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user", headers=headers), "user")

    assert open_from("https://app.example").route == "subscribe"
    assert open_from(None).route == "subscribe"  # not a browser
    assert open_from("https://db.example:8080").route == "subscribe"  # the explorer's page
    with pytest.raises(Forbidden) as refused:
        open_from("https://evil.example")
    assert refused.value.detail == (
        "origin 'https://evil.example' is not allowed to open WebSockets here; "
        "allowed: the origins of SERVICE_CORS_ORIGINS"
    )
    with pytest.raises(Forbidden):
        open_from("https://db.example:8080", host="other.example")
    store.close()


# -- the starting point: replay, live, Init


def test_a_change_feed_starts_at_the_head_and_after_n_replays_from_n(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2, 3):
            await store.insert("User", new_user(i))
        routes, scheduler = routes_of(store)
        live = opened(routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user"), "user"))
        replay = opened(routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user", [("after", "1")]), "user"))
        scheduler.run()
        assert [decoded(f)["offset"] for f in replay.frames] == [2, 3]
        assert live.frames == []
        await store.insert("User", new_user(4))
        scheduler.run()
        assert [decoded(f)["offset"] for f in live.frames] == [4]
        assert [decoded(f)["offset"] for f in replay.frames] == [2, 3, 4]
        with pytest.raises(OffsetOutOfRange):
            routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user", [("after", "5")]), "user")
        store.close()

    run(body())


def test_a_live_query_gets_its_init_filtered_and_projected_then_the_deltas(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2, 3):
            await store.insert("User", new_user(i, role="admin" if i != 2 else "reader"))
        routes, scheduler = routes_of(store)
        query = [("role", "admin"), ("projection", "card")]
        channel = opened(routes.open(FeedKind.LIVE, request("/live-query/User", query), "User"))
        await store.replace("User", 3, new_user(3, name="three", role="admin"))
        scheduler.run()
        assert [payload(f) for f in channel.frames] == [
            b'{"type":"Init","model":"User","records":[{"id":1,"name":"n1"},{"id":3,"name":"n3"}],'
            b'"watermark":3,"offset":3,"complete":true}',
            b'{"type":"Updated","model":"User","offset":4,"watermark":4,"record":{"id":3,"name":"three"}}',
        ]
        store.close()

    run(body())


@pytest.mark.parametrize("capacity, closed", [(2, None), (1, (1013, "lagged during init"))])
def test_a_live_query_keeps_at_most_capacity_changed_states_while_its_init_waits(tmp_path, capacity, closed):
    """The Init waits for its offset to be drained; the changes to its records meanwhile
    are kept (init.py rule 3) up to the broker's capacity, past which it must open again."""

    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2, 3):
            await store.insert("User", new_user(i))
        routes, scheduler = routes_of(store, capacity=capacity)
        opened(routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user"), "user"))
        await store.replace("User", 1, new_user(1, name="a"))  # offset 4: published, not drained
        channel = opened(routes.open(FeedKind.LIVE, request("/live-query/user"), "user"))
        await store.replace("User", 2, new_user(2, name="b"))
        await store.replace("User", 3, new_user(3, name="c"))
        scheduler.run()
        assert channel.closed == closed
        if closed is None:
            frames = [decoded(f) for f in channel.frames]
            assert [(f["type"], f["offset"]) for f in frames] == [("Init", 4), ("Updated", 5), ("Updated", 6)]
            assert [r["name"] for r in frames[0]["records"]] == ["a", "n2", "n3"]
        store.close()

    run(body())


# -- tokens, Scopes and rules


def test_a_token_in_the_subprotocols_authorizes_and_its_expiry_closes_the_socket(tmp_path, guarded):
    guard, private = guarded
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store, RULED, guard=guard)
    exp = int(time.time()) + 300
    token = mint(private, "ES256", uid=7, exp=exp)
    headers = [("sec-websocket-protocol", f"bearer, bearer.{token}")]
    upgrade = routes.open(FeedKind.SUBSCRIBE, request("/subscribe/blog-post", headers=headers), "blog-post")
    assert upgrade.subprotocol == "bearer"
    assert upgrade.session.spec.scope.keys == frozenset({7})
    assert upgrade.close_at == (float(exp + 60), 4401, "token expired")  # the guard's leeway: 60 s
    upgrade = routes.open(FeedKind.LIVE, request("/live-query/user", headers=bearer(token)), "user")
    assert (upgrade.subprotocol, upgrade.close_at) == (None, (float(exp + 60), 4401, "token expired"))
    other = mint(private, "ES256", uid=8)
    headers = bearer(token) + [("sec-websocket-protocol", f"bearer, bearer.{other}")]
    upgrade = routes.open(FeedKind.SUBSCRIBE, request("/subscribe/blog-post", headers=headers), "blog-post")
    assert upgrade.session.spec.scope.keys == frozenset({7})  # the Authorization header wins
    store.close()


def test_a_live_query_under_a_scope_lists_only_the_tokens_records(tmp_path, guarded):
    async def body():
        guard, private = guarded
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", new_user(i))
        for author in (1, 2, 1):
            await store.insert(
                "BlogPost", POST.validate_create({"author_id": author, "title": "t", "body": "b", "score": 1.0})
            )
        routes, scheduler = routes_of(store, RULED, guard=guard)
        token = mint(private, "ES256", uid=1)
        channel = opened(routes.open(FeedKind.LIVE, request("/live-query/BlogPost", headers=bearer(token)), "BlogPost"))
        scheduler.run()
        assert [r["id"] for r in decoded(channel.frames[0])["records"]] == [1, 3]
        store.close()

    run(body())


def test_a_scope_that_sees_nothing_is_refused_with_the_model_named_and_counted(tmp_path, guarded):
    guard, private = guarded
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store, RULED, guard=guard)  # no Refusals given: the routes keep their own
    with pytest.raises(Forbidden) as refused:
        routes.open(FeedKind.LIVE, request("/live-query/BlogPost", headers=bearer(mint(private, "ES256"))), "BlogPost")
    assert refused.value.detail == (
        "subscribe is not allowed on BlogPost: no access rule of BlogPost lets this token see any of its records"
    )
    assert routes.refusals.counts["subscribe"] == 1
    store.close()


def test_a_model_with_rules_without_a_guard_is_asked_with_empty_claims(tmp_path):
    store = open_blog_store(tmp_path)
    asked: list = []
    scope = Scope(field="author_id", keys=frozenset({1}), key=POST.keys["author_id"])
    rules = dataclasses.replace(RULED["BlogPost"].rules, subscribe=lambda claims: asked.append(claims) or scope)
    routes, _ = routes_of(store, {**BLOG.BY_NAME, "BlogPost": dataclasses.replace(POST, rules=rules)})
    routes.open(FeedKind.SUBSCRIBE, request("/subscribe/blog-post"), "blog-post")
    routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user"), "user")  # BlogPost references User
    assert asked == [{}, {}]
    store.close()


def test_a_feed_of_a_referenced_model_keeps_the_childrens_scopes_for_its_token(tmp_path, guarded):
    guard, private = guarded
    store = open_blog_store(tmp_path)
    routes, _ = routes_of(store, RULED, guard=guard)
    token = mint(private, "ES256", uid=7)
    spec = routes.open(FeedKind.SUBSCRIBE, request("/subscribe/user", headers=bearer(token)), "user").session.spec
    assert spec.scope is None
    assert spec.link_scopes["BlogPost"].keys == frozenset({7})
    assert set(spec.link_scopes) == {"BlogPost"}  # Comment has no rules
    live = routes.open(FeedKind.LIVE, request("/live-query/user", headers=bearer(token)), "user").session.spec
    assert dict(live.link_scopes) == {}  # a live query gets no links
    store.close()


# -- /replicate and /replicate/snapshot


def test_replicate_takes_after_once_as_digits_and_nothing_else(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    routes, _ = routes_of(store)

    def refusal(query: list) -> str:
        with pytest.raises(BadQuery) as refused:
            routes.replicate(request("/replicate", query))
        return refused.value.detail

    assert refusal([("x", "1")]) == "unknown query parameter 'x'; allowed: after"
    assert refusal([("after", "0"), ("after", "0")]) == "'after' given more than once"
    assert refusal([("after", "-1")]) == AFTER_TEXT + "'-1'"
    assert refusal([("after", "9223372036854775808")]) == AFTER_TEXT + "'9223372036854775808'"
    assert routes.replicate(request("/replicate", [("after", "0")])).route == "replicate"
    store.close()


def test_replicate_streams_the_log_frames_after_n(tmp_path):
    async def body():
        store = open_blog_store(tmp_path, replication=True)
        for i in (1, 2, 3):
            await store.insert("User", new_user(i))
        expected = list(store.frames_after(1))
        routes, scheduler = routes_of(store)
        upgrade = routes.replicate(request("/replicate", [("after", "1")], [("sec-websocket-protocol", "bearer")]))
        assert (upgrade.route, upgrade.subprotocol, upgrade.close_at) == ("replicate", "bearer", None)
        channel = opened(upgrade)
        scheduler.run()
        assert [payload(f) for f in channel.frames] == expected
        assert [f[0] for f in channel.frames] == [0x82, 0x82]  # binary
        await store.insert("User", new_user(4))
        scheduler.run()
        assert payload(channel.frames[-1]) == list(store.frames_after(3))[0]
        store.close()

    run(body())


def test_replicate_and_its_snapshot_under_rules_name_the_path_and_the_reason(tmp_path, guarded):
    guard, private = guarded
    store = open_blog_store(tmp_path, replication=True)
    token = mint(private, "ES256", role="reader")
    for rule, why in (
        (None, "it has no @allow(replicate, ...) rule"),
        (lambda claims: claim(claims, ("role",)) == "replicator", "its replicate rule refuses this token"),
    ):
        routes, _ = routes_of(store, guard=guard, rules=True, replicate_rule=rule)
        for path, opener in (("/replicate", routes.replicate), ("/replicate/snapshot", routes.replicate_snapshot)):
            with pytest.raises(Forbidden) as refused:
                opener(request(path, headers=bearer(token)))
            assert refused.value.detail == f"{path} is not allowed: the schema has access rules and {why}"
        assert routes.refusals.counts["replicate"] == 2
    store.close()


def test_without_rules_replication_is_open_and_a_rule_without_a_guard_gets_empty_claims(tmp_path):
    store = open_blog_store(tmp_path, replication=True)
    routes, _ = routes_of(store)
    assert routes.replicate(request("/replicate")).route == "replicate"
    asked: list = []
    routes, _ = routes_of(store, rules=True, replicate_rule=lambda claims: asked.append(claims) or True)
    assert routes.replicate(request("/replicate")).route == "replicate"
    assert routes.replicate_snapshot(request("/replicate/snapshot")).route == "replicate-snapshot"
    assert asked == [{}, {}]
    store.close()


def test_the_snapshot_stream_opens_with_its_header_and_ends_with_the_count_and_crc(tmp_path, guarded):
    import zlib

    guard, private = guarded
    store = open_blog_store(tmp_path, replication=True)
    history = store.history_json
    assert history is not None
    exp = int(time.time()) + 300
    token = mint(private, "ES256", exp=exp)
    for fingerprint, shown in ((None, '""'), ("f1", '"f1"')):
        kw = {} if fingerprint is None else {"fingerprint": fingerprint}
        routes, _ = routes_of(store, guard=guard, **kw)
        with pytest.raises(BadQuery) as refused:
            routes.replicate_snapshot(request("/replicate/snapshot", [("x", "1"), ("y", "2")], bearer(token)))
        assert refused.value.detail == "unknown query parameter 'x'; /replicate/snapshot takes none"
        headers = bearer(token) + [("sec-websocket-protocol", "bearer")]
        upgrade = routes.replicate_snapshot(request("/replicate/snapshot", headers=headers))
        assert (upgrade.route, upgrade.subprotocol) == ("replicate-snapshot", "bearer")
        assert upgrade.close_at == (float(exp + 60), 4401, "token expired")
        assert routes.replicate(request("/replicate", headers=bearer(token))).close_at == upgrade.close_at
        channel = opened(upgrade)
        epoch, offset, chunks = store.epoch_snapshot()
        body = b"".join(chunks)
        header = (
            '{"type":"snapshot","format":1,"epoch":"%s","offset":%d,"fingerprint":%s,"history":%s}'
            % (epoch, offset, shown, json.dumps(history, separators=(",", ":")))
        ).encode()
        assert payload(channel.frames[0]) == header
        assert b"".join(payload(f) for f in channel.frames[1:-1]) == body
        assert decoded(channel.frames[-1]) == {"type": "end", "bytes": len(body), "crc32": zlib.crc32(body)}
        assert channel.closed == (1000, "")
    store.close()


def new_post(i: int, title: str) -> dict:
    return POST.validate_create(
        {"author_id": 2, "title": title, "body": "b", "score": float(i)}
    )  # a minor: no link passes


@pytest.mark.parametrize("kind", [FeedKind.LIVE, FeedKind.SUBSCRIBE])
def test_a_feed_keeps_its_operators_and_search_words_for_the_init_and_the_deltas(tmp_path, kind):
    """Issue 34's operators reach the feed: a range (`age__gte`), a null test (`age__null`)
    and search words (`search=`) narrow a live query's Init and every feed's events; a
    route that dropped one would send the records outside it."""

    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", new_user(1, age=30))
        await store.insert("User", new_user(2, age=10))
        await store.insert("User", new_user(3))  # age null
        await store.insert("BlogPost", new_post(1, "cafe day"))
        await store.insert("BlogPost", new_post(2, "other day"))
        routes, scheduler = routes_of(store)
        path = "/live-query/" if kind is FeedKind.LIVE else "/subscribe/"
        adults = opened(routes.open(kind, request(path + "user", [("age__gte", "18")]), "user"))
        unknown = opened(routes.open(kind, request(path + "user", [("age__null", "true")]), "user"))
        cafe = opened(routes.open(kind, request(path + "blog-post", [("search", "caf")]), "blog-post"))
        scheduler.run()
        await store.insert("User", new_user(4, age=5))  # offset 6: in none of the three
        await store.insert("User", new_user(5, age=50))  # 7: an adult
        await store.insert("User", new_user(6))  # 8: age unknown
        await store.insert("BlogPost", new_post(3, "another day"))  # 9: no word starts with caf
        await store.insert("BlogPost", new_post(4, "cafes"))  # 10
        scheduler.run()
        got = {
            name: [decoded(f) for f in channel.frames]
            for name, channel in (("adults", adults), ("unknown", unknown), ("cafe", cafe))
        }
        if kind is FeedKind.LIVE:
            assert {name: [f["records"] for f in frames if f["type"] == "Init"] for name, frames in got.items()} == {
                "adults": [[store.get("User", 1)[0]]],
                "unknown": [[store.get("User", 3)[0]]],
                "cafe": [[store.get("BlogPost", 1)[0]]],
            }
        assert {name: [f["offset"] for f in frames if f.get("type") != "Init"] for name, frames in got.items()} == {
            "adults": [7],
            "unknown": [8],
            "cafe": [10],
        }
        store.close()

    run(body())
