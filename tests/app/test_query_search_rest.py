"""Text search as a user meets it (issue 34 item 2): `search=` over REST and on a live query.

The blog demo schema (BlogPost: `title str @sort @search`, `body str @search`), one server
per module for the REST cases; the restart/compaction case (`-m slow`: the store's test
covers it in process) and the live query have servers of their own. docs/guide/queries.md,
"Text search".
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.server import ROOT, service_env, start_server
from support.wskit import nothing_within, open_ws, post, recv_json, recv_n, request, run

POSTS = [
    ("Café au lait", "A warm DRINK for mornings", 3.0),
    ("Cafeteria menus", "Lunch, dinner and drinks", 1.0),
    ("Résumé tips", "Write a short résumé", 5.0),
    ("L'été à Paris", "Summer in the city; don't miss it", 2.0),
    ("Straße", "Streets and squares of Berlin 2024", 4.0),
]


@pytest.fixture(scope="module")
def posts(blog):
    author = blog.post("/api/user", {"email": "search@example.com", "name": "Searcher"}).json["id"]
    ids = []
    for title, body, score in POSTS:
        reply = blog.post("/api/blog-post", {"author_id": author, "title": title, "body": body, "score": score})
        assert reply.status == 201, reply
        ids.append(reply.json["id"])
    return blog, ids


def found(server, query: str) -> list[int]:
    reply = server.get(f"/api/blog-post?{query}")
    assert reply.status == 200, reply
    assert reply.json["total"] >= len(reply.json["data"])
    return [r["id"] for r in reply.json["data"]]


def test_every_word_must_be_a_prefix_of_a_word_folded_and_unaccented(posts):
    server, ids = posts
    assert found(server, "search=caf") == [ids[0], ids[1]]
    assert found(server, "search=CAF%C3%89") == [ids[0], ids[1]]  # case and accent folded
    assert found(server, "search=caf%20drink") == [ids[0], ids[1]]  # title and body both searched
    assert found(server, "search=caf%20warm") == [ids[0]]  # every word must match
    assert found(server, "search=resume") == [ids[2]]
    assert found(server, "search=ete%20paris") == [ids[3]]
    assert found(server, "search=strasse") == [ids[4]]  # casefold: ß is ss
    assert found(server, "search=don't") == [ids[3]]  # don + t
    assert found(server, "search=2024") == [ids[4]]
    assert found(server, "search=afe") == []  # a prefix, never the middle of a word
    assert found(server, "search=zzz") == []


def test_search_combines_with_filters_sort_ranges_limit_and_cursor(posts):
    server, ids = posts
    assert found(server, "search=caf&sort=-score") == [ids[0], ids[1]]
    assert found(server, "search=caf&score__gte=2") == [ids[0]]
    assert found(server, "search=caf&score=1") == [ids[1]]
    assert found(server, "search=caf&title__prefix=Cafe") == [ids[1]]  # prefix on the stored text, NFC
    first = server.get("/api/blog-post?search=a&sort=score&limit=2")
    assert first.json["total"] == 5
    walked = [r["id"] for r in first.json["data"]]
    link = first.headers["link"]
    while link:
        page = server.get(link[1 : link.index(">")])
        walked += [r["id"] for r in page.json["data"]]
        link = page.headers.get("link")
    assert walked == [ids[1], ids[3], ids[0], ids[4], ids[2]]  # scores 1..5
    assert found(server, "search=a&offset=3&limit=1") == [ids[3]]  # id order by default


def test_as_of_searches_the_records_as_they_were(posts):
    server, ids = posts
    before = server.get("/api/blog-post").headers["dbsvc-watermark"]
    assert server.request("PATCH", f"/api/blog-post/{ids[2]}", {"title": "Cover letters"}).status == 200
    try:
        assert found(server, "search=cover") == [ids[2]]
        assert found(server, f"search=cover&as_of={before}") == []
        assert found(server, f"search=resume%20tips&as_of={before}") == [ids[2]]
        assert found(server, "search=tips") == []
    finally:
        server.request("PATCH", f"/api/blog-post/{ids[2]}", {"title": "Résumé tips"})


def test_bad_searches_are_400_naming_what_was_expected(posts):
    server, ids = posts
    before = server.get("/api/blog-post").json
    cases = {
        "search=": "search '' holds no word: expected one or more words of letters or digits "
        "(at most 16, each a prefix of a word of the record)",
        "search=%20!?": "search ' !?' holds no word: expected one or more words of letters or digits "
        "(at most 16, each a prefix of a word of the record)",
        "search=a&search=b": "'search' given more than once",
        "search=" + "%20".join(f"w{i}" for i in range(17)): "search 'w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 "
        "w14 w15 w16' holds 17 words: expected at most 16",
        "search=" + "x" * 65: f"search word {'x' * 60 + '...'!r} is 65 characters long: "
        "expected at most 64 characters a word",
    }
    for query, detail in cases.items():
        reply = server.get(f"/api/blog-post?{query}")
        assert reply.status == 400, (query, reply)
        assert (reply.json["code"], reply.json["detail"]) == ("bad_query", detail), query
    reply = server.get("/api/user?search=ann")  # User has no @search field
    assert reply.status == 400
    assert reply.json["detail"] == (
        "unknown query parameter 'search'; allowed: filters on email, name, role; "
        "sort, limit, offset, cursor, projection, as_of; operators __gt, __gte, __lt, __lte on name, age, joined; "
        "__prefix on name; __null on age"
    )
    assert server.get("/api/blog-post").json == before  # nothing lost


@pytest.mark.slow  # two servers and `dbsvc compact`: tests/storage/test_storage_search.py covers it in process
def test_the_index_is_rebuilt_at_open_and_after_compaction(tmp_path):
    data = tmp_path / "data"
    server = start_server(ROOT / "schemas" / "blog.dbs", data)
    try:
        author = server.post("/api/user", {"email": "c@example.com", "name": "C"}).json["id"]
        for i, title in enumerate(["alpha beta", "beta gamma", "gamma delta"]):
            server.post("/api/blog-post", {"author_id": author, "title": title, "body": "x", "score": i})
        server.request("PATCH", "/api/blog-post/1", {"title": "omega beta"})
        server.request("DELETE", "/api/blog-post/3")
    finally:
        server.stop()
    compact = subprocess.run(
        [sys.executable, "dbsvc.py", "compact"],
        cwd=ROOT,
        env=service_env(data, {"SERVICE_TENANT": "default"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert compact.returncode == 0, compact.stderr
    server = start_server(ROOT / "schemas" / "blog.dbs", data)
    try:
        assert found(server, "search=beta") == [1, 2]
        assert found(server, "search=alph") == []
        assert found(server, "search=omeg") == [1]
        assert found(server, "search=gamma") == [2]
        assert found(server, "search=delta") == []
        server.post("/api/blog-post", {"author_id": author, "title": "delta beta", "body": "x", "score": 9})
        assert found(server, "search=beta%20delt") == [4]
    finally:
        server.stop()


def test_a_live_query_with_search_adds_and_removes_as_the_text_changes(serve):
    server = serve()

    async def body():
        await post(server, "/api/user", {"email": "l@x.io", "name": "L"})
        await post(server, "/api/blog-post", {"author_id": 1, "title": "Hello world", "body": "b", "score": 1})
        await post(server, "/api/blog-post", {"author_id": 1, "title": "Other", "body": "b", "score": 1})
        async with open_ws(server, "/live-query/BlogPost?search=wor") as ws:
            init = await recv_json(ws)
            assert [r["id"] for r in init["records"]] == [1]
            await request(server, "PATCH", "/api/blog-post/2", {"body": "Wörld news"})  # enters
            await request(server, "PATCH", "/api/blog-post/1", {"score": 2})  # changes inside
            await request(server, "PATCH", "/api/blog-post/1", {"title": "Hello"})  # leaves
            await post(server, "/api/blog-post", {"author_id": 1, "title": "x", "body": "y", "score": 1})  # outside
            got = await recv_n(ws, 3)
            assert [(d["type"], d.get("id", d.get("record", {}).get("id"))) for d in got] == [
                ("Added", 2),
                ("Updated", 1),
                ("Removed", 1),
            ]
            assert await nothing_within(ws, 0.2)

    run(body())
