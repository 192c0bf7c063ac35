"""Feeds under access rules, without sockets: the change-feed and live-query transforms,
links, routing, the Init and replays, with `Scope`s and `ModelRules` built by hand (the
run-time types compiled rules produce, dbsvc/rules.py), and the refusals at the upgrade."""

from __future__ import annotations

import dataclasses
import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.auth import Guard
from dbsvc.auth.settings import AuthConfig
from dbsvc.compiler import compile_schema
from dbsvc.errors import Forbidden
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker, ModelFeeds
from dbsvc.realtime.feeds import EventFrames, FeedKind, FeedSpec, LinkFrames, derive_links, replay_frames
from dbsvc.realtime.init import InitSlices
from dbsvc.realtime.routes import RealtimeRoutes
from dbsvc.realtime.session import FeedSession
from dbsvc.rules import EVERYTHING, NOTHING, Refusals, Scope, claim
from dbsvc.schema import load_schema
from dbsvc.storage.events import ChangeEvent, EventKind
from support.authkit import AUDIENCE, ISSUER, TENANT, mint, public_pem
from support.realtime_kit import BLOG, ROOT, Recorder, Scheduler, open_blog_store, owner_rules, run

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]


# -- hand-built scopes: what `record.author_id == token.uid` and `record.published == true` compile to


def owner(uid: int) -> Scope:
    key = POST.keys["author_id"]
    return Scope(field="author_id", keys=frozenset({key(uid)}), key=key)


PUBLISHED = Scope(where=lambda record: record["published"] is True, where_row=lambda row: row[4] is True)


def post(id_: int = 9, author: int = 1, published: bool = False, title: str = "t") -> dict:
    return {
        "id": id_,
        "author_id": author,
        "title": title,
        "body": "b",
        "published": published,
        "score": 1.0,
        "tags": None,
    }


def post_event(kind: EventKind, record: dict, previous: dict | None = None, offset: int = 12) -> ChangeEvent:
    return ChangeEvent(kind, "BlogPost", offset, 4, record["id"], record, previous)


def decoded(frame: bytes | None) -> dict | None:
    if frame is None:
        return None
    assert frame[0] == 0x81
    return json.loads(frame[2:] if frame[1] < 126 else frame[4:])


def spec(kind: FeedKind, scope: Scope | None, model=POST, projection: str | None = None, **filters: str) -> FeedSpec:
    pairs = list(filters.items()) + ([("projection", projection)] if projection else [])
    query = model.parse_feed_query(pairs)
    return FeedSpec(kind, model, query.filters, query.projection, scope)


# -- the transform: (kind, author before, author after) -> change feed, live query, for uid 1

TRANSFORMS = [
    (EventKind.INSERT, None, 1, "insert", "Added"),
    (EventKind.INSERT, None, 2, None, None),
    (EventKind.DELETE, None, 1, "delete", "Removed"),
    (EventKind.DELETE, None, 2, None, None),
    (EventKind.UPDATE, 1, 1, "update", "Updated"),
    (EventKind.UPDATE, 1, 2, "delete", "Removed"),
    (EventKind.UPDATE, 2, 1, "insert", "Added"),
    (EventKind.UPDATE, 2, 2, None, None),
]


@pytest.mark.parametrize("kind, before, after, change, delta", TRANSFORMS)
def test_feeds_follow_visibility(kind, before, after, change, delta):
    previous = post(author=before, title="old") if before is not None else None
    frames = EventFrames(post_event(kind, post(author=after, title="new"), previous), POST)
    got = decoded(spec(FeedKind.SUBSCRIBE, owner(1)).row_frame(frames))
    assert (got["kind"] if got else None) == change
    live = decoded(spec(FeedKind.LIVE, owner(1)).row_frame(frames))
    assert (live["type"] if live else None) == delta


def test_an_update_leaving_the_view_is_the_delete_of_the_old_record():
    ev = post_event(EventKind.UPDATE, post(author=2, title="new"), post(author=1, title="old"))
    got = decoded(spec(FeedKind.SUBSCRIBE, owner(1)).row_frame(EventFrames(ev, POST)))
    assert got == {
        "kind": "delete",
        "model": "BlogPost",
        "offset": 12,
        "watermark": 4,
        "id": 9,
        "record": post(author=1, title="old"),
    }


def test_an_update_entering_the_view_is_an_insert_without_previous():
    ev = post_event(EventKind.UPDATE, post(author=1, title="new"), post(author=2, title="secret"))
    frames = EventFrames(ev, POST)
    got = decoded(spec(FeedKind.SUBSCRIBE, owner(1)).row_frame(frames))
    assert got == {
        "kind": "insert",
        "model": "BlogPost",
        "offset": 12,
        "watermark": 4,
        "id": 9,
        "record": post(author=1, title="new"),
    }
    projected = decoded(spec(FeedKind.SUBSCRIBE, owner(1), projection="summary").row_frame(frames))
    assert projected == {
        "kind": "insert",
        "model": "BlogPost",
        "offset": 12,
        "watermark": 4,
        "id": 9,
        "record": {"id": 9, "title": "new", "score": 1.0},
    }
    live = decoded(spec(FeedKind.LIVE, owner(1)).row_frame(frames))
    assert "secret" not in json.dumps(live) and live["record"]["title"] == "new"


def test_an_update_seen_on_both_sides_keeps_previous():
    ev = post_event(EventKind.UPDATE, post(author=1, title="new"), post(author=1, title="old"))
    got = decoded(spec(FeedKind.SUBSCRIBE, owner(1)).row_frame(EventFrames(ev, POST)))
    assert got["kind"] == "update" and got["previous"]["title"] == "old"


def test_a_where_scope_transforms_as_a_pinned_one():
    ev = post_event(EventKind.UPDATE, post(published=False, title="draft"), post(published=True, title="out"))
    got = decoded(spec(FeedKind.SUBSCRIBE, PUBLISHED).row_frame(EventFrames(ev, POST)))
    assert got["kind"] == "delete" and got["record"]["title"] == "out"


def test_the_filter_still_decides_among_visible_records():
    # published=true filter, owner scope: a visible post leaving the filter is an update, as without rules
    ev = post_event(EventKind.UPDATE, post(author=1, published=False), post(author=1, published=True))
    frames = EventFrames(ev, POST)
    assert decoded(spec(FeedKind.SUBSCRIBE, owner(1), published="true").row_frame(frames))["kind"] == "update"
    assert decoded(spec(FeedKind.LIVE, owner(1), published="true").row_frame(frames))["type"] == "Removed"
    # ... and an event in the filter but out of view sends nothing
    hidden = post_event(EventKind.INSERT, post(author=2, published=True))
    assert spec(FeedKind.SUBSCRIBE, owner(1), published="true").row_frame(EventFrames(hidden, POST)) is None


def test_a_scope_of_everything_is_the_unruled_feed():
    ev = post_event(EventKind.UPDATE, post(author=2), post(author=1))
    frames = EventFrames(ev, POST)
    assert spec(FeedKind.SUBSCRIBE, EVERYTHING).row_frame(frames) is spec(FeedKind.SUBSCRIBE, None).row_frame(frames)
    assert spec(FeedKind.SUBSCRIBE, NOTHING).row_frame(frames) is None


# -- links: the parent in view, the child visible under its own model's scope


def user(id_: int, role: str = "reader") -> dict:
    return {
        "id": id_,
        "email": f"u{id_}@x.io",
        "name": "n",
        "age": None,
        "role": role,
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


ADMINS = Scope(field="role", keys=frozenset({USER.keys["role"]("admin")}), key=USER.keys["role"])


def link_frames(kind: EventKind, record: dict, previous: dict | None, parents: dict) -> list[tuple[bool, LinkFrames]]:
    ev = post_event(kind, record, previous)
    return [(link.linked, LinkFrames(link, lambda model, id_: parents.get(id_))) for link in derive_links(ev, POST)]


@pytest.mark.parametrize(
    "kind, before, after, sent",
    [
        (EventKind.INSERT, None, True, [True]),
        (EventKind.INSERT, None, False, []),
        (EventKind.DELETE, None, True, [False]),
        (EventKind.DELETE, None, False, []),
    ],
)
def test_a_link_needs_its_child_visible(kind, before, after, sent):
    user_feed = FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, None, {"BlogPost": PUBLISHED})
    links = link_frames(kind, post(author=1, published=after), None, {1: user(1)})
    assert [linked for linked, frames in links if user_feed.link_frame(frames) is not None] == sent


def test_an_unlink_is_judged_by_the_old_child_and_a_link_by_the_new():
    user_feed = FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, None, {"BlogPost": PUBLISHED})
    # moved from author 1 to 2 while being unpublished: the unlink shows the published post
    links = link_frames(
        EventKind.UPDATE, post(author=2, published=False), post(author=1, published=True), {1: user(1), 2: user(2)}
    )
    assert [(linked, user_feed.link_frame(f) is not None) for linked, f in links] == [(False, True), (True, False)]


def test_a_link_needs_its_parent_in_view():
    feed = FeedSpec(FeedKind.SUBSCRIBE, USER, {}, None, ADMINS)
    parents = {1: user(1, "admin"), 2: user(2, "reader")}
    ((_, to_admin),) = link_frames(EventKind.INSERT, post(author=1), None, parents)
    ((_, to_reader),) = link_frames(EventKind.INSERT, post(author=2), None, parents)
    assert feed.link_frame(to_admin) is not None and feed.link_frame(to_reader) is None


# -- routing: a pinned scope files the feed under its keys


def test_a_pinned_scope_routes_under_its_keys_narrowed_by_the_filter():
    assert spec(FeedKind.SUBSCRIBE, owner(1)).route() == ("author_id", frozenset({1}))
    assert spec(FeedKind.SUBSCRIBE, owner(1), author_id="1").route() == ("author_id", frozenset({1}))
    assert spec(FeedKind.SUBSCRIBE, owner(1), author_id="2").route() == ("author_id", frozenset())
    assert spec(FeedKind.SUBSCRIBE, owner(1), published="true").route() == ("author_id", frozenset({1}))
    assert spec(FeedKind.SUBSCRIBE, PUBLISHED).route() is None
    assert spec(FeedKind.SUBSCRIBE, PUBLISHED, published="true").route() == ("published", frozenset({True}))


def new_post(i: int, author: int) -> dict:
    return POST.validate_create({"author_id": author, "title": f"p{i}", "body": "b", "score": 1.0})


def attached(store) -> tuple[Broker, Scheduler]:
    broker = Broker(store, BLOG.BY_NAME, 1024)
    scheduler = Scheduler()
    broker.attach(scheduler)
    return broker, scheduler


def open_feed(broker: Broker, feed_spec: FeedSpec, **kw) -> Recorder:
    session = FeedSession(feed_spec, broker, kw.pop("start", broker.store.head_offset), **kw)
    channel = Recorder()
    session.on_open(channel)
    return channel


def test_an_owner_scoped_write_tests_only_its_owners_feeds(tmp_path):
    calls = []
    counted = dataclasses.replace(POST, match=lambda record, *query: calls.append(1) or POST.match(record, *query))
    n = 2000

    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", USER.validate_create({"email": "a@x.io", "name": "a"}))
        broker, scheduler = attached(store)
        channels = [
            open_feed(broker, FeedSpec(FeedKind.SUBSCRIBE, counted, {}, None, owner(1 + i % 2))) for i in range(n)
        ]
        where_only = open_feed(broker, FeedSpec(FeedKind.SUBSCRIBE, counted, {}, None, PUBLISHED))
        await store.insert("BlogPost", new_post(1, 1))
        scheduler.run()
        assert len(calls) == n // 2 + 1  # the owner's feeds and the one where-only feed, not all
        assert sum(1 for c in channels if c.frames) == n // 2
        assert where_only.frames == []  # tested and refused: not published
        store.close()

    run(body())


def test_model_feeds_files_a_pinned_scope_under_its_keys(tmp_path):
    store = open_blog_store(tmp_path)
    feeds = ModelFeeds()
    probe = FeedSession(FeedSpec(FeedKind.SUBSCRIBE, POST, {}, None, owner(1)), attached(store)[0], 0)
    feeds.add(probe)
    assert feeds.candidates(POST, post(author=1), None) == {probe}
    assert feeds.candidates(POST, post(author=3), post(author=1)) == {probe}
    assert feeds.candidates(POST, post(author=3), None) == set()
    feeds.remove(probe)
    assert feeds.sessions() == set() and not feeds.routed
    store.close()


def test_a_feed_its_scope_and_filter_leave_empty_gets_nothing_and_still_closes(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        await store.insert("User", USER.validate_create({"email": "a@x.io", "name": "a"}))
        broker, scheduler = attached(store)
        query = POST.parse_feed_query([("author_id", "1")])
        channel = open_feed(broker, FeedSpec(FeedKind.SUBSCRIBE, POST, query.filters, None, owner(2)))
        await store.insert("BlogPost", new_post(1, 1))
        scheduler.run()
        assert channel.frames == []
        broker.rebind(store, 1012, "rebound")
        assert channel.closed == (1012, "rebound")
        assert broker.metrics()["subscriptions"] == 0
        store.close()

    run(body())


def test_an_ownership_change_reaches_both_owners_as_delete_and_insert(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", USER.validate_create({"email": f"u{i}@x.io", "name": "a"}))
        created = await store.insert("BlogPost", new_post(1, 1))
        broker, scheduler = attached(store)
        one = open_feed(broker, FeedSpec(FeedKind.SUBSCRIBE, POST, {}, None, owner(1)))
        two = open_feed(broker, FeedSpec(FeedKind.SUBSCRIBE, POST, {}, None, owner(2)))
        await store.replace("BlogPost", created["id"], {**created, "author_id": 2})
        scheduler.run()
        got_one, got_two = decoded(one.frames[0]), decoded(two.frames[0])
        assert (got_one["kind"], got_one["record"]["author_id"]) == ("delete", 1)
        assert (got_two["kind"], got_two["record"]["author_id"]) == ("insert", 2)
        assert "previous" not in got_two and got_one["offset"] == got_two["offset"]
        store.close()

    run(body())


# -- the Init and replays


def test_the_init_lists_only_visible_records(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", USER.validate_create({"email": f"u{i}@x.io", "name": "a"}))
        for i, (author, published) in enumerate([(1, True), (2, True), (1, False), (2, False), (1, True)]):
            await store.insert("BlogPost", {**new_post(i, author), "published": published})

        def init_ids(scope, **filters) -> list[int]:
            query = POST.parse_feed_query(list(filters.items()))
            init = InitSlices(store, POST, query.filters, None, store.applied_offset, 100, scope)
            frame = init.next_frame()
            assert init.done
            return [r["id"] for r in decoded(frame)["records"]]

        assert init_ids(None) == [1, 2, 3, 4, 5]
        assert init_ids(owner(1)) == [1, 3, 5]
        assert init_ids(PUBLISHED) == [1, 2, 5]
        assert init_ids(owner(1), published="true") == [1, 5]
        assert init_ids(owner(1), author_id="2") == []
        assert init_ids(NOTHING) == []
        store.close()

    run(body())


def test_a_replay_applies_the_same_transform(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", USER.validate_create({"email": f"u{i}@x.io", "name": "a"}))
        start = store.head_offset
        created = await store.insert("BlogPost", new_post(1, 2))  # hidden
        await store.replace("BlogPost", created["id"], {**created, "author_id": 1})  # enters: insert
        await store.replace("BlogPost", created["id"], {**created, "author_id": 1, "title": "x"})  # update
        await store.replace("BlogPost", created["id"], {**created, "author_id": 2})  # leaves: delete
        await store.delete("BlogPost", created["id"])  # hidden
        subscribe = FeedSpec(FeedKind.SUBSCRIBE, POST, {}, None, owner(1))
        sent = [
            decoded(f)
            for _o, f in replay_frames(subscribe, store.events_after(start), BLOG.BY_NAME, lambda m, i: None)
            if f
        ]
        assert [(e["kind"], e["record"]["author_id"], "previous" in e) for e in sent] == [
            ("insert", 1, False),
            ("update", 1, True),
            ("delete", 1, False),
        ]
        live = FeedSpec(FeedKind.LIVE, POST, {}, None, owner(1))
        deltas = [
            decoded(f)["type"]
            for _o, f in replay_frames(live, store.events_after(start), BLOG.BY_NAME, lambda m, i: None)
            if f
        ]
        assert deltas == ["Added", "Updated", "Removed"]
        store.close()

    run(body())


# -- the upgrade: scopes from the token's claims, refusals counted


@pytest.fixture
def guarded():
    private = ec.generate_private_key(ec.SECP256R1())
    config = AuthConfig(alg="ES256", tenant=TENANT, issuer=ISSUER, audience=AUDIENCE, pubkey_pem=public_pem(private))
    return Guard(config), private


def upgrade_request(path: str, token: str, query: list | None = None) -> Request:
    return Request("GET", path, path, query or [], [("authorization", f"Bearer {token}")])


def ruled_routes(store, guard, **kw) -> tuple[RealtimeRoutes, Refusals]:
    models = {**BLOG.BY_NAME, "BlogPost": dataclasses.replace(POST, rules=owner_rules(POST, "author_id", "uid"))}
    refusals = Refusals()
    broker = Broker(store, models, 1024)
    broker.attach(Scheduler())
    return RealtimeRoutes(broker, models, guard=guard, refusals=refusals, **kw), refusals


def test_a_socket_whose_scope_sees_nothing_is_refused_and_counted(tmp_path, guarded):
    guard, private = guarded
    store = open_blog_store(tmp_path)
    routes, refusals = ruled_routes(store, guard)
    for kind, path in ((FeedKind.SUBSCRIBE, "blog-post"), (FeedKind.LIVE, "BlogPost")):
        with pytest.raises(Forbidden, match="BlogPost"):
            routes.open(kind, upgrade_request(f"/{kind.value}/{path}", mint(private, "ES256")), path)
    assert refusals.counts["subscribe"] == 2
    upgrade = routes.open(
        FeedKind.SUBSCRIBE, upgrade_request("/subscribe/blog-post", mint(private, "ES256", uid=7)), "blog-post"
    )
    assert upgrade.session.spec.scope.keys == frozenset({7})
    assert (
        routes.open(
            FeedKind.SUBSCRIBE, upgrade_request("/subscribe/user", mint(private, "ES256")), "user"
        ).session.spec.link_scopes["BlogPost"]
        is NOTHING
    )
    assert refusals.counts["subscribe"] == 2
    store.close()


@pytest.mark.parametrize(
    "rules, rule, role, allowed",
    [
        (False, None, None, True),
        (True, None, "replicator", False),
        (True, lambda claims: claim(claims, ("role",)) == "replicator", "reader", False),
        (True, lambda claims: claim(claims, ("role",)) == "replicator", "replicator", True),
    ],
)
def test_replication_under_rules_needs_the_replicate_rule(tmp_path, guarded, rules, rule, role, allowed):
    guard, private = guarded
    store = open_blog_store(tmp_path, replication=True)
    routes, refusals = ruled_routes(store, guard, rules=rules, replicate_rule=rule)
    token = mint(private, "ES256", role=role)
    for path, opener in (("/replicate", routes.replicate), ("/replicate/snapshot", routes.replicate_snapshot)):
        if allowed:
            assert opener(upgrade_request(path, token)).route in ("replicate", "replicate-snapshot")
        else:
            with pytest.raises(Forbidden, match="replicate"):
                opener(upgrade_request(path, token))
    assert refusals.counts["replicate"] == (0 if allowed else 2)
    store.close()


# -- the rules of the example schema, as the compiler generates them

NOTES = compile_schema(load_schema(str(ROOT / "schemas" / "notes.dbs")))


def test_a_compiled_owner_rule_routes_as_its_filter_would():
    note = NOTES.BY_NAME["Note"]
    scope = note.rules.subscribe({"sub": "ann"})
    assert FeedSpec(FeedKind.SUBSCRIBE, note, {}, None, scope).route() == ("owner", frozenset({"ann"}))
    assert note.rules.subscribe({}).nothing  # no `sub`: sees nothing, refused at the upgrade


@pytest.mark.parametrize(
    "before, after, ann, bo",
    [
        ("published", "draft", "update", "delete"),
        ("draft", "published", "update", "insert"),
        ("draft", "draft", "update", None),
        ("published", "published", "update", "update"),
    ],
)
def test_a_compiled_public_read_rule_shows_drafts_to_their_author_only(before, after, ann, bo):
    model = NOTES.BY_NAME["Post"]
    old = {"id": 1, "author": "ann", "status": before, "title": "old"}
    new = {"id": 1, "author": "ann", "status": after, "title": "new"}
    frames = EventFrames(ChangeEvent(EventKind.UPDATE, "Post", 5, 2, 1, new, old), model)
    sent = {}
    for sub in ("ann", "bo"):
        feed = FeedSpec(FeedKind.SUBSCRIBE, model, {}, None, model.rules.subscribe({"sub": sub}))
        got = decoded(feed.row_frame(frames))
        sent[sub] = got["kind"] if got else None
        if got and got["kind"] != "update":
            assert "previous" not in got
    assert sent == {"ann": ann, "bo": bo}


def test_changes_to_records_out_of_view_do_not_fill_an_init(tmp_path):
    async def body():
        store = open_blog_store(tmp_path)
        for i in (1, 2):
            await store.insert("User", USER.validate_create({"email": f"u{i}@x.io", "name": "a"}))
        posts = [await store.insert("BlogPost", new_post(i, 1 + i % 2)) for i in range(6)]
        init = InitSlices(store, POST, {}, None, store.applied_offset, 2, owner(1))
        for record in posts:
            if record["author_id"] == 2:  # out of view: three changes, past the limit of 2
                _old, new = await store.replace("BlogPost", record["id"], {**record, "title": "changed"})
                init.observe(ChangeEvent(EventKind.UPDATE, "BlogPost", store.head_offset, 9, record["id"], new, record))
        assert not init.overflowed
        assert [r["author_id"] for r in decoded(init.next_frame())["records"]] == [1, 1, 1]
        store.close()

    run(body())


# -- a property: what a client builds from its frames is exactly what its token may see

OPS = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3), st.booleans(), st.booleans()), max_size=40)
SCOPES = [owner(1), owner(2), PUBLISHED, EVERYTHING]


def events_of(ops) -> list[ChangeEvent]:
    """Row events of a random history: an op on an absent id inserts it, on a present one
    updates it, or deletes it when its last flag says so."""
    state: dict[int, dict] = {}
    events = []
    for offset, (id_, author, published, delete) in enumerate(ops, start=1):
        record = post(id_=id_, author=author, published=published, title=f"v{offset}")
        old = state.get(id_)
        if old is None:
            state[id_] = record
            events.append(ChangeEvent(EventKind.INSERT, "BlogPost", offset, offset, id_, record))
        elif delete:
            del state[id_]
            events.append(ChangeEvent(EventKind.DELETE, "BlogPost", offset, offset, id_, old))
        else:
            state[id_] = record
            events.append(ChangeEvent(EventKind.UPDATE, "BlogPost", offset, offset, id_, record, old))
    return events


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_a_client_holds_exactly_the_visible_records(ops):
    events = events_of(ops)
    for scope in SCOPES:
        feed = FeedSpec(FeedKind.SUBSCRIBE, POST, {}, None, scope)
        live = spec(FeedKind.LIVE, scope, published="true")
        state: dict[int, dict] = {}
        held: dict[int, dict] = {}
        members: dict[int, dict] = {}
        for event in events:
            if event.kind is EventKind.DELETE:
                state.pop(event.id)
            else:
                state[event.id] = event.record
            frames = EventFrames(event, POST)
            got = decoded(feed.row_frame(frames))
            if got is not None:
                assert scope.visible(got["record"])  # never a record the token may not see
                assert got.get("previous") is None or scope.visible(got["previous"])
                if got["kind"] == "delete":
                    del held[got["id"]]
                else:
                    held[got["id"]] = got["record"]
            assert held == {i: r for i, r in state.items() if scope.visible(r)}
            delta = decoded(live.row_frame(frames))
            if delta is not None:
                if delta["type"] == "Removed":
                    del members[delta["id"]]
                else:
                    assert scope.visible(delta["record"]) and delta["record"]["published"]
                    members[delta["record"]["id"]] = delta["record"]
            assert members == {i: r for i, r in state.items() if scope.visible(r) and r["published"]}
