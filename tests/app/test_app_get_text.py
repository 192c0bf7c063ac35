"""A GET sent whole is the stored text itself (issue 36 item 2, session 28, wt-getjson).

A stored record is its record's compact JSON (storage/rows.py), so a GET with no projection,
no `expand=` and no access rules answers those very bytes, live or `as_of`, with no dict
made (storage/store.py `get_versioned(..., texts=True)`, app.py `read`). Held here through
real server processes on loopback, against the store's own files read beside them:

- the body is the stored text, byte for byte, for plain records, odd strings, floats,
  `json` values and datetimes (given in any offset), live and `as_of`, and equals the
  record's text in a list page; a projection is still the projected dict's JSON;
- a tenant the older tree wrote (tests/storage/golden/, its answers kept as that tree gave
  them) answers every GET, live and `as_of`, as that tree did: its Hangul names (UTF-8 0xED,
  which may start a lone surrogate) take the dict's way and answer the same bytes;
- a record holding a lone surrogate (only a hand-made file holds one): its raw UTF-8 form
  (0xED 0xA0 0x80) takes the dict's way, whose encoding refuses it, as before (a logged 500);
  its escaped form (`\\ud800`, kept as the file's text) goes out as the list page sends it;
- an ETag, a 304 and a HEAD are what they were.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dbsvc.runtime import json_bytes
from dbsvc.storage import snapshot
from dbsvc.storage.compact import SNAPSHOT_NAME
from dbsvc.storage.snapshotreader import read_snapshot
from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.app_calls import answer, fresh
from support.server import ROOT, start_server
from support.storage import BLOG, open_store, run, user

GOLDEN = ROOT / "tests" / "storage" / "golden"
ODD = ["a, b", 'q"uote\\back', "tab\tnl\n\x1f", "[,]", "{},{", "%s%%", "ünï ✓ 🙂", "한국어"]
INSTANTS = ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.123456+02:00", "2025-12-31T23:59:59-11:30"]


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    """A blog server with users and posts of odd strings, floats, `json` values and
    datetimes, one post replaced (so `as_of` reads an older version); its tenant's path."""
    data = tmp_path_factory.mktemp("gettext") / "data"
    server = start_server(ROOT / "schemas" / "blog.dbs", data)
    try:
        uids = []
        for i, name in enumerate(ODD):
            body = {"email": f"u{i}@x.io", "name": name, "age": i, "joined": INSTANTS[i % 3], "profile": {"k": [i]}}
            uids.append(server.post("/api/user", body).json["id"])
        for i, text in enumerate(ODD):
            body = {"author_id": uids[i], "title": text, "body": text[::-1], "score": i / 3, "tags": [text, {"n": i}]}
            server.post("/api/blog-post", body)
        yield server, str(data / "default")
    finally:
        server.stop()


def stored_texts(tenant: str) -> dict[tuple[str, int], bytes]:
    """(model, id) -> the live stored text, read by a read-only open beside the server."""
    s = open_store(tenant, readonly=True)
    try:
        return {(name, i): t for name, table in s.tables.items() for i, t in table.live.items()}
    finally:
        s.close()


KEBAB = {"User": "user", "BlogPost": "blog-post"}


def test_a_whole_get_is_the_stored_text_and_the_list_page_s(blog):
    server, tenant = blog
    texts = stored_texts(tenant)
    assert len(texts) == 2 * len(ODD)
    pages = {
        name: {json.loads(t)["id"]: t for t in _page_texts(server.get(f"/api/{kebab}?limit=1000").body)}
        for name, kebab in KEBAB.items()
    }
    for (name, id_), text in texts.items():
        reply = server.get(f"/api/{KEBAB[name]}/{id_}")
        assert reply.status == 200 and reply.body == text, (name, id_, reply.body, text)
        assert reply.body == json_bytes(json.loads(text))  # what the dict's encoding gave
        assert pages[name][id_] == text
    assert any(b"\xed" in t for t in texts.values())  # Hangul: the dict's way, the same bytes


def _page_texts(body: bytes) -> list[bytes]:
    """Each record's text of a list body, cut where the scanner ends each one."""
    data = body[len(b'{"data":[') : body.index(b'],"total":')]
    text = data.decode("utf-8")
    out, at, scan = [], 0, json.JSONDecoder().raw_decode
    while at < len(text):
        _value, end = scan(text, at)
        out.append(text[at:end].encode("utf-8"))
        at = end + 1
    return out


def test_a_get_as_of_is_the_text_of_the_version_then(blog):
    server, tenant = blog
    first = server.get("/api/blog-post/1")
    mark = int(first.headers["dbsvc-watermark"])
    changed = {"author_id": 1, "title": "replaced, ✓", "body": "b", "score": 2.5, "published": True, "tags": None}
    assert server.request("PUT", "/api/blog-post/1", changed).status == 200
    then = server.get(f"/api/blog-post/1?as_of={mark}")
    assert then.status == 200 and then.body == first.body and then.headers["etag"] == first.headers["etag"]
    s = open_store(tenant, readonly=True)
    try:
        past, _version = s.table("BlogPost").get_as_of(1, mark)
        assert then.body == past
        now = server.get("/api/blog-post/1")
        assert now.body == s.table("BlogPost").live[1] and json.loads(now.body)["title"] == "replaced, ✓"
    finally:
        s.close()
    assert server.get("/api/blog-post/1?as_of=0").status == 404


def test_a_projection_is_the_projected_dict_s_json(blog):
    server, _tenant = blog
    whole = server.get("/api/blog-post/3").json
    reply = server.get("/api/blog-post/3?projection=summary")
    assert reply.body == json_bytes({"id": 3, "title": whole["title"], "score": whole["score"]})
    mark = server.get("/snapshot").json["watermarks"]["BlogPost"]
    assert server.get(f"/api/blog-post/3?projection=summary&as_of={mark}").body == reply.body


def test_an_etag_a_304_and_a_head_are_what_they_were(blog):
    server, _tenant = blog
    reply = server.get("/api/user/2")
    tag = reply.headers["etag"]
    assert server.request("GET", "/api/user/2", headers={"If-None-Match": tag}).status == 304
    head = server.request("HEAD", "/api/user/2")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(len(reply.body))
    assert head.headers["etag"] == tag


def test_a_tenant_the_older_tree_wrote_answers_every_get_as_it_did(tmp_path):
    """The golden tenant (format 3 and a log tail, written at c99385c): each GET, live and
    `as_of`, is that tree's answer (its record's compact JSON)."""
    data = tmp_path / "data"
    shutil.copytree(GOLDEN / "format3", data / "format3")
    want = json.loads((GOLDEN / "format3.answers.json").read_text(encoding="utf-8"))
    server = start_server(ROOT / "schemas" / "blog.dbs", data, {"SERVICE_TENANT": "format3"})
    try:
        seen = 0
        for model, kebab in KEBAB.items():
            for id_, record in want[model]["get"]:
                reply = server.get(f"/api/{kebab}/{id_}")
                if record is None:
                    assert reply.status == 404
                    continue
                assert reply.status == 200 and reply.body == json_bytes(record), (model, id_)
                seen += 1
            for mark, id_, record in want[model]["as_of"]:
                reply = server.get(f"/api/{kebab}/{id_}?as_of={mark}")
                assert reply.status == (404 if record is None else 200), (model, mark, id_)
                if record is not None:
                    assert reply.body == json_bytes(record), (model, mark, id_)
        assert seen > 40
    finally:
        server.stop()


def _hand_made_tenant(data: Path) -> str:
    """A tenant whose snapshot was edited by hand: user 3's name a lone surrogate in its raw
    UTF-8 form (0xED 0xA0 0x80, as the writer writes a surrogate it was handed), user 4's
    escaped (`\\ud800`, as a hand writes it); users 1-2 plain."""
    tenant = create_tenant(str(data), "default")
    s = open_store(tenant)
    try:

        async def fill() -> None:
            for i in range(1, 5):
                await s.insert("User", user(i))

        run(fill())
    finally:
        s.close()
    compact_tenant(str(data), "default")
    path = os.path.join(tenant, SNAPSHOT_NAME)
    with open(path, "rb") as f:
        epoch, head, _parts = read_snapshot(path, f.read())
    s = open_store(tenant, readonly=True)
    try:
        models = []
        for table in s.tables.values():
            ids = sorted(table.live)
            rows = [table.live[i] for i in ids]
            if table.name == "User":
                rows[2] = rows[2].replace(b'"user 3"', b'"lone \xed\xa0\x80"')
                rows[3] = rows[3].replace(b'"user 4"', b'"lone \\ud800"')
            versions = [table.versions.get(i) for i in ids]
            models.append(
                snapshot.ModelImage(
                    table.name, list(table.model.fields), rows, table.max_id, table.key_fields, versions
                )
            )
    finally:
        s.close()
    with open(path, "wb") as f:
        f.writelines(snapshot.encode_snapshot(snapshot.SnapshotImage(epoch, head, models)))
    return tenant


def test_a_record_with_a_lone_surrogate_takes_the_dict_s_way_as_before(tmp_path):
    tenant = _hand_made_tenant(tmp_path / "data")
    s = open_store(tenant, readonly=True)
    try:
        texts = dict(s.table("User").live)
    finally:
        s.close()
    assert b"\xed\xa0\x80" in texts[3] and b"\\ud800" in texts[4]
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path / "data")
    try:
        for i in (1, 2):
            assert server.get(f"/api/user/{i}").body == texts[i]
        raw = server.get("/api/user/3")  # its dict's JSON cannot be encoded: refused, as before
        assert raw.status == 500 and raw.json["code"] == "internal"
        escaped = server.get("/api/user/4")  # the file's text, as the list page sends it
        assert escaped.status == 200 and escaped.body == texts[4]
        page = server.get("/api/user?limit=1&offset=3")
        assert page.status == 200 and _page_texts(page.body) == [texts[4]]
        assert json.loads(escaped.body)["name"] == "lone \ud800"
        assert server.get("/api/user/3?projection=card").status == 500  # a dict's way as ever
        assert server.get("/api/user/4?projection=card").status == 500
    finally:
        server.stop()


def test_a_whole_get_makes_no_dict_and_keeps_nothing_a_projection_does(tmp_path, stores):
    """In process over a real store: a whole GET, live or `as_of`, answers the stored bytes
    object itself and leaves the store's dicts and the app's encodings as they were; a
    projection's GET still makes the dict (kept by the store's rule)."""
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)
    table = store.table("User")

    async def fill() -> None:
        for i in range(1, 4):
            await store.insert("User", user(i, joined=f"2026-01-0{i}T00:00:00.00000{i}Z"))
        await store.replace("User", 2, user(2, name="second"))

    run(fill())
    table.dicts.forget(1), table.dicts.forget(2), table.dicts.forget(3)  # the writes' dicts
    mark = store.watermarks()["User"] - 1
    refused = table.dicts.refused
    status, body, _headers = answer(app, "/api/user/1")
    assert status == 200 and body is table.live[1]
    past = answer(app, f"/api/user/2?as_of={mark}")[1]
    assert past == table.get_as_of(2, mark)[0] and json.loads(past)["name"] == "user 2"
    assert list(table.dicts.ids) == [] and table.dicts.refused == refused
    assert app.encoded.kept_ids(BLOG.BY_NAME["User"]) == []
    assert answer(app, "/api/user/3?projection=card")[1] == json_bytes({"id": 3, "name": "user 3"})
    assert list(table.dicts.ids) == [3]
