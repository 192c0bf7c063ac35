"""Lists at a past watermark kept whole (readcache.py `PastPages`; issue 36's `as_of` shape):
a kept answer is the one a fresh application computes, after later writes (which never
change a past state) and after an online compaction (which starts an epoch whose
watermarks name other states, so the kept answer must not be served there).

In process over a real store (compaction is driven by its size threshold), plus the one
case a user meets, over a real server and sockets.
"""

from __future__ import annotations

import asyncio
import json

from dbsvc.app import Application
from dbsvc.compiler import compile_schema
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from support.app_calls import answer, fresh
from support.storage import run, user

TINY = 32 * 1024


def test_a_past_list_is_kept_through_later_writes_and_is_what_a_fresh_app_answers(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)

    async def go() -> None:
        for i in range(1, 21):
            await store.insert("User", user(i, name=f"n{i:02}"))
        then = store.watermarks()["User"]
        target = f"/api/user?sort=-name&limit=5&as_of={then}"
        first = answer(app, target)
        assert first[0] == 200 and answer(app, target) == first
        await store.replace("User", 20, user(20, name="zz"))  # on the page
        await store.delete("User", 19)  # on the page
        await store.insert("User", user(21, name="zzz"))  # would lead the page now
        assert answer(app, target) == first
        assert answer(fresh(store), target) == first
        now = store.watermarks()["User"]
        current = f"/api/user?sort=-name&limit=5&as_of={now}"
        before = answer(app, current)
        await store.replace("User", 18, user(18, name="zzzz"))  # `now` is past from here on
        assert answer(app, current) == before == answer(fresh(store), current)

    run(go())


def test_a_past_list_kept_before_a_compaction_is_not_served_after_it(tmp_path, stores):
    store = stores(str(tmp_path), compact_bytes=TINY)
    app = fresh(store)

    async def go() -> None:
        for i in range(1, 21):
            await store.insert("User", user(i, name=f"n{i:02}"))
        target = "/api/user?sort=name&limit=5&as_of=5"
        kept = answer(app, target)  # the first 5 rows of this epoch: users 1-5 as inserted
        epoch, n = store.epoch, 0
        while store.epoch == epoch or store.compaction is not None:
            n += 1
            await store.replace("User", 1 + n % 20, user(1 + n % 20, name=f"x{n:05}"))
            await asyncio.sleep(0)
        store.compactor.compact_bytes = 1 << 40  # no further compaction
        # as_of=5 in the new epoch: its snapshot's first 5 records, renamed since
        after = answer(app, target)
        assert after == answer(fresh(store), target)
        assert after[1] != kept[1]

    run(go())


def test_a_past_list_answers_the_same_bytes_over_http_after_writes(serve):
    server = serve()
    for i in range(1, 6):
        assert server.post("/api/user", {"email": f"p{i}@x.io", "name": f"p{i}"}).status == 201
    then = int(server.get("/api/user?limit=0").headers["dbsvc-watermark"])
    target = f"/api/user?sort=name&limit=2&as_of={then}"
    first = server.get(target)
    assert first.status == 200 and [r["name"] for r in first.json["data"]] == ["p1", "p2"]
    assert server.request("PATCH", "/api/user/1", {"name": "a-first"}).status == 200
    assert server.request("DELETE", "/api/user/2").status == 204
    again = server.get(target)
    assert (again.status, again.body, again.headers["link"]) == (200, first.body, first.headers["link"])
    assert again.headers["dbsvc-watermark"] == str(then)


RULED = """
model Person {
  id    int  @id
  name  str
  team  str  @filter
  @allow(read, record.team == token.team)
  @allow(write, token.role == "admin")
}

model Task {
  id     int  @id
  owner  int  @ref(Person) @filter
  title  str  @sort
}
"""


def test_a_past_list_embedding_a_ruled_model_is_answered_per_token(tmp_path):
    module = compile_schema(parse_schema(RULED, "tasks.dbs"))
    store = Store.open(str(tmp_path), module.MODELS, module.DESCRIPTION, sync="off")
    app = Application(module, store, Broker(store, module.BY_NAME, 64))
    task = module.BY_NAME["Task"]

    async def go() -> None:
        await store.insert("Person", {"id": 1, "name": "Ann", "team": "a"})
        await store.insert("Task", {"id": 1, "owner": 1, "title": "t"})
        then = store.watermarks()["Task"]
        await store.insert("Task", {"id": 2, "owner": 1, "title": "u"})
        target = f"/api/task?expand=owner&as_of={then}"
        path, pairs = split_target(target)

        def expanded(team: str) -> dict:
            response = app.dispatch(Request("GET", target, path, pairs, []), task, None, {"team": team})
            return json.loads(response.body)["data"][0]["_expand"]

        assert expanded("a") == {"owner": {"id": 1, "name": "Ann", "team": "a"}}
        assert expanded("b") == {}  # not team a's kept answer
        assert expanded("a") == {"owner": {"id": 1, "name": "Ann", "team": "a"}}

    run(go())
    store.close()
