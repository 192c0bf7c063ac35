"""Lists of the present kept whole (readcache.py `PresentPages`, issue 36 item 2): a kept
answer is served only while nothing it read has changed, so after a write, the undo of a
refused write, a compaction, a replica's applied frames and a write to a model `expand=`
embeds, the next answer is the one a fresh application computes.

In process over real stores (a refused write by an injected ENOSPC, a compaction by the
size threshold, a follower store fed a primary's frames), plus the case a user meets over
a real server and sockets.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from dbsvc.app import Application
from dbsvc.compiler import compile_schema
from dbsvc.errors import Unavailable
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.readcache import PresentPages
from dbsvc.realtime.broker import Broker
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.tenants import create_tenant
from support.app_calls import answer, fresh
from support.storage import BLOG, post, run, user

TINY = 32 * 1024


def names(reply: tuple[int, bytes, list]) -> list[str]:
    return [r["name"] for r in json.loads(reply[1])["data"]]


def test_a_present_list_after_each_kind_of_write_is_what_a_fresh_app_answers(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)
    target = "/api/user?sort=-name&limit=3"

    async def go() -> None:
        for i in range(1, 6):
            await store.insert("User", user(i, name=f"n{i}"))
        first = answer(app, target)
        assert names(first) == ["n5", "n4", "n3"] and answer(app, target) == first
        writes = [
            store.insert("User", user(6, name="n6")),
            store.replace("User", 4, user(4, name="zz")),
            store.delete("User", 6),
            store.replace("User", 1, user(1, name="a1")),  # off the page: the total and body stay
        ]
        for write in writes:
            await write
            assert answer(app, target) == answer(fresh(store), target)
        assert names(answer(app, target)) == ["zz", "n5", "n3"]

    run(go())


def test_the_offset_header_moves_with_another_models_write_while_the_body_is_kept(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)

    async def go() -> None:
        await store.insert("User", user(1))
        before = answer(app, "/api/user?limit=5")
        await store.insert("BlogPost", post(1, author=1))
        after = answer(app, "/api/user?limit=5")
        assert after == answer(fresh(store), "/api/user?limit=5")
        assert after[1] == before[1] and dict(after[2])["Dbsvc-Offset"] == "2"

    run(go())


def test_a_list_read_while_a_refused_write_was_applied_is_not_served_after_its_undo(tmp_path, monkeypatch, stores):
    monkeypatch.setenv("DBSVC_FAULT", "write:3-3:ENOSPC")  # the third write call finds no room
    store = stores(str(tmp_path))
    app = fresh(store)
    target = "/api/user?sort=name&limit=10"

    async def go() -> None:
        await store.insert("User", user(1, name="a"))
        await store.insert("User", user(2, name="b"))
        _record, durable = store.apply_insert("User", user(3, name="c"))  # applied, not yet durable
        assert names(answer(app, target)) == ["a", "b", "c"]
        with pytest.raises(Unavailable):
            await durable  # refused: the store undoes it
        assert answer(app, target) == answer(fresh(store), target)
        assert names(answer(app, target)) == ["a", "b"]

    run(go())


def test_a_present_list_after_a_compaction_is_what_a_fresh_app_answers(tmp_path, stores):
    store = stores(str(tmp_path), compact_bytes=TINY)
    app = fresh(store)
    target = "/api/user?sort=name&limit=5"

    async def go() -> None:
        for i in range(1, 21):
            await store.insert("User", user(i, name=f"n{i:02}"))
        epoch, n = store.epoch, 0
        while store.compaction is None:  # write until the size rule starts a compaction
            n += 1
            await store.replace("User", 20, user(20, name=f"x{n:05}"))  # never on the page
        store.compactor.compact_bytes = 1 << 40  # no further compaction
        kept = answer(app, target)  # kept in the old epoch; no write follows it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while store.epoch == epoch or store.compaction is not None:
            assert loop.time() < deadline, "the compaction never finished"
            await asyncio.sleep(0.005)
        after = answer(app, target)
        assert after == answer(fresh(store), target)
        assert after[1] == kept[1]  # the same records: compaction changed no live state
        assert dict(after[2])["Dbsvc-Watermark"] != dict(kept[2])["Dbsvc-Watermark"]  # renumbered

    run(go())


def insert_frame(offset: int, uid: int, name: str) -> bytes:
    """The frame of a User insert at `offset` as a primary writes it (User rows only)."""
    return ChangeEvent(EventKind.INSERT, "User", offset, offset, uid, user(uid, name=name), None, None).frame()


def test_a_replicas_present_list_after_applied_frames_is_what_a_fresh_app_answers(tmp_path, stores):
    store = stores(create_tenant(str(tmp_path / "replica"), "t"), sync="off", replication=True)
    app = fresh(store)
    target = "/api/user?sort=-name&limit=2"

    async def go() -> None:
        await store.apply_replicated_frames([insert_frame(n, n, f"n{n}") for n in range(1, 4)])
        assert names(answer(app, target)) == ["n3", "n2"]
        await store.apply_replicated_frames([insert_frame(4, 4, "n9"), insert_frame(5, 5, "n0")])  # a run
        assert answer(app, target) == answer(fresh(store), target)
        await store.apply_replicated(insert_frame(6, 6, "n8"))  # one frame
        assert names(answer(app, target)) == ["n9", "n8"] == names(answer(fresh(store), target))

    run(go())


def test_an_expanded_list_after_a_write_to_the_embedded_model_is_what_a_fresh_app_answers(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)
    target = "/api/blog-post?limit=5&expand=author_id:card"

    async def go() -> None:
        await store.insert("User", user(1, name="Ann"))
        await store.insert("BlogPost", post(1, author=1))
        first = answer(app, target)
        assert json.loads(first[1])["data"][0]["_expand"] == {"author_id": {"id": 1, "name": "Ann"}}
        await store.replace("User", 1, user(1, name="Bob"))  # only the embedded model changes
        again = answer(app, target)
        assert again == answer(fresh(store), target)
        assert json.loads(again[1])["data"][0]["_expand"] == {"author_id": {"id": 1, "name": "Bob"}}

    run(go())


def test_an_embedded_record_kept_for_one_answer_is_fresh_in_another_after_its_write(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)

    def embedded(target: str) -> dict:
        body = json.loads(answer(app, target)[1])
        return (body["data"][0] if "data" in body else body)["_expand"]

    async def go() -> None:
        await store.insert("User", user(1, name="Ann"))
        await store.insert("BlogPost", post(1, author=1))
        assert embedded("/api/blog-post?limit=5&expand=author_id")["author_id"]["name"] == "Ann"
        await store.replace("User", 1, user(1, name="Bob"))
        # other answers than the kept list, embedding the same author
        assert embedded("/api/blog-post?limit=4&expand=author_id")["author_id"]["name"] == "Bob"
        await store.replace("User", 1, user(1, name="Cy"))
        assert embedded("/api/blog-post/1?expand=author_id")["author_id"]["name"] == "Cy"
        assert embedded("/api/blog-post?limit=3&expand=author_id:card") == {"author_id": {"id": 1, "name": "Cy"}}

    run(go())


RULED = """
model Person {
  id    int  @id
  name  str
  team  str  @filter
  @allow(read, record.team == token.team)
  @allow(write, token.role == "admin")
}
"""


def test_a_present_list_of_a_ruled_model_is_answered_per_token(tmp_path):
    module = compile_schema(parse_schema(RULED, "people.dbs"))
    store = Store.open(str(tmp_path), module.MODELS, module.DESCRIPTION, sync="off")
    app = Application(module, store, Broker(store, module.BY_NAME, 64))
    person = module.BY_NAME["Person"]
    target = "/api/person?limit=5"
    path, pairs = split_target(target)

    def listed(team: str) -> list[str]:
        response = app.dispatch(Request("GET", target, path, pairs, []), person, None, {"team": team})
        return [r["name"] for r in json.loads(response.body)["data"]]

    async def go() -> None:
        await store.insert("Person", {"id": 1, "name": "Ann", "team": "a"})
        await store.insert("Person", {"id": 2, "name": "Bea", "team": "b"})
        assert listed("a") == ["Ann"]
        assert listed("b") == ["Bea"]  # not team a's answer
        assert listed("a") == ["Ann"]

    run(go())
    store.close()


class Ticks:
    """A stand-in store for the cache's own bounds: an epoch and a tick per model."""

    def __init__(self) -> None:
        self.epoch = "e1"
        self.ticks = {"M": 1, "N": 1}

    def tick(self, model: str) -> int:
        return self.ticks[model]


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def test_present_pages_are_bounded_in_entries_and_bytes_and_drop_the_oldest():
    store, pages = Ticks(), PresentPages(capacity=3, budget=100, largest=60)
    for i in range(4):
        pages.keep(store, request(f"/api/m?limit={i}"), ("M",), b"x" * 20, 1, None)
    assert len(pages) == 3 and pages.kept_bytes == 60
    assert pages.get(store, request("/api/m?limit=0")) is None  # the oldest went first
    pages.keep(store, request("/api/m?limit=9"), ("M",), b"y" * 50, 1, "</api/m?cursor=c>")
    assert pages.kept_bytes <= 100 and len(pages) == 2  # two dropped to make room
    assert pages.get(store, request("/api/m?limit=9")) == (b"y" * 50, 1, "</api/m?cursor=c>")
    pages.keep(store, request("/api/m?limit=8"), ("M",), b"z" * 61, 1, None)  # over `largest`
    assert pages.get(store, request("/api/m?limit=8")) is None


def test_a_budget_of_0_keeps_nothing(tmp_path):
    """SERVICE_LIST_CACHE_BYTES=0 (docs/guide/configuration.md): every list made afresh."""
    store, pages = Ticks(), PresentPages(budget=0)
    pages.keep(store, request("/api/m?limit=1"), ("M",), b"{}", 1, None)
    assert len(pages) == 0 and pages.kept_bytes == 0
    assert pages.get(store, request("/api/m?limit=1")) is None


def test_present_pages_are_stale_when_any_read_models_tick_or_the_epoch_moves():
    store, pages = Ticks(), PresentPages()
    target = request("/api/m?expand=n")
    pages.keep(store, target, ("M", "N"), b"body", 7, None)
    assert pages.get(store, target) == (b"body", 7, None)
    store.ticks["N"] = 2
    assert pages.get(store, target) is None and len(pages) == 0 and pages.kept_bytes == 0
    pages.keep(store, target, ("M", "N"), b"body", 7, None)
    store.epoch = "e2"
    assert pages.get(store, target) is None
    pages.keep(store, target, ("M", "N"), b"body", 7, None)
    assert pages.get(Ticks(), target) is None  # another store


def test_a_polled_list_follows_every_write_over_http(serve):
    server = serve()
    target = "/api/user?sort=-name&limit=2"
    assert server.post("/api/user", {"email": "a@x.io", "name": "a"}).status == 201
    first = server.get(target)
    assert [r["name"] for r in first.json["data"]] == ["a"]
    assert server.post("/api/user", {"email": "b@x.io", "name": "b"}).status == 201
    second = server.get(target)
    assert [r["name"] for r in second.json["data"]] == ["b", "a"] and second.json["total"] == 2
    assert server.request("PATCH", "/api/user/1", {"name": "c"}).status == 200
    assert [r["name"] for r in server.get(target).json["data"]] == ["c", "b"]
    assert server.request("DELETE", "/api/user/1").status == 204
    last = server.get(target)
    assert [r["name"] for r in last.json["data"]] == ["b"] and last.json["total"] == 1
    assert server.get(target).body == last.body
    assert int(last.headers["dbsvc-offset"]) == 4


def test_an_expanded_list_made_afresh_after_writes_is_what_a_fresh_app_answers(tmp_path, stores):
    # no list kept (a budget of 0): the expanded page kept by its records (expand.py rule 7)
    store = stores(str(tmp_path), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64), list_cache_bytes=0)
    target = "/api/blog-post?limit=5&expand=author_id"

    async def go() -> None:
        await store.insert("User", user(1, name="Ann"))
        await store.insert("User", user(2, name="Dee"))
        for i in range(1, 4):
            await store.insert("BlogPost", post(i, author=1))
        assert answer(app, target) == answer(app, target) == answer(fresh(store), target)
        await store.replace("User", 1, user(1, name="Bob"))  # only the embedded model changes
        assert answer(app, target) == answer(fresh(store), target)
        await store.replace("BlogPost", 2, post(2, author=2))  # a listed record changes
        body = answer(app, target)
        assert body == answer(fresh(store), target)
        assert [r["_expand"]["author_id"]["name"] for r in json.loads(body[1])["data"]] == ["Bob", "Dee", "Bob"]

    run(go())


def test_a_page_at_a_cursor_or_an_offset_is_kept_from_its_second_ask(tmp_path, stores):
    """Pages at many targets (issue 36 item 2, session 15): a page at a cursor or an offset
    asked once is made and not kept (no insertion, no eviction for it); asked again it is
    kept, and then answered from the kept answer. A list without either is kept at once.
    Failed before session 15, when every page was kept at its first ask."""
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)

    async def go() -> None:
        for i in range(1, 8):
            await store.insert("User", user(i, name=f"n{i}"))

    run(go())
    first = json.loads(answer(app, "/api/user?limit=2")[1])
    assert len(app.present) == 1  # a list: kept at once
    link = dict(answer(app, "/api/user?limit=2")[2])["Link"]
    cursor_page = link[link.index("/api") : link.index(">")]
    for target in (cursor_page, "/api/user?limit=2&offset=4"):
        kept_before = len(app.present)
        made = answer(app, target)
        assert made == answer(fresh(store), target) and len(app.present) == kept_before
        assert answer(app, target) == made and len(app.present) == kept_before + 1  # the second ask keeps it
        assert answer(app, target) == made and len(app.present) == kept_before + 1
    assert [r["id"] for r in first["data"]] == [1, 2]
