"""Operators and cursor pages as a user meets them over REST (issue 34 items 1 and 3).

The blog demo schema, one server per module (BlogPost: `score float @filter @sort`,
`title str @sort`); the compaction test has a server of its own, stopped, compacted with
`dbsvc compact` and started again. docs/guide/queries.md, "Operators" and "Cursor pages".
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import parse_qsl, urlsplit

import pytest

from support.server import ROOT, service_env, start_server


def next_path(reply) -> str | None:
    link = reply.headers.get("link")
    if link is None:
        return None
    assert link.startswith("</api/") and link.endswith('>; rel="next"'), link
    return link[1 : link.index(">")]


def walk(server, path: str) -> tuple[list[int], list[str]]:
    """Every page from `path` by its Link headers: (the ids in order, the paths followed)."""
    ids, paths = [], []
    while path is not None:
        paths.append(path)
        reply = server.get(path)
        assert reply.status == 200, (path, reply)
        ids += [r["id"] for r in reply.json["data"]]
        path = next_path(reply)
        assert len(paths) < 100
    return ids, paths


@pytest.fixture(scope="module")
def posts(blog):
    """Ten posts with scores 0..4 twice and titles ab0/ab1/ba0...: (server, ids)."""
    author = blog.request("POST", "/api/user", {"email": "ops@example.com", "name": "Ops"}).json["id"]
    ids = []
    for i in range(10):
        body = {"author_id": author, "title": ("ab" if i % 2 else "ba") + str(i), "body": "b", "score": i % 5}
        reply = blog.request("POST", "/api/blog-post", body)
        assert reply.status == 201, reply
        ids.append(reply.json["id"])
    return blog, ids


def test_a_range_sorted_by_its_field_pages_by_cursor_to_the_end(posts):
    server, ids = posts
    first = server.get("/api/blog-post?score__gte=3&sort=-score&limit=2")
    assert first.status == 200
    # scores 4: ids[4], ids[9]; 3: ids[3], ids[8]; ties on the id ascending
    assert [r["id"] for r in first.json["data"]] == [ids[4], ids[9]]
    assert first.json["total"] == 4
    link = next_path(first)
    params = parse_qsl(urlsplit(link).query)
    assert [k for k, _v in params] == ["score__gte", "sort", "limit", "cursor"]
    walked, paths = walk(server, "/api/blog-post?score__gte=3&sort=-score&limit=2")
    assert walked == [ids[4], ids[9], ids[3], ids[8]]
    assert len(paths) == 2  # no Link on the last page
    # `score__gte=3` matches the stored 3.0, as a filter does
    assert server.get("/api/blog-post?score__gte=3&score__lte=3").json["total"] == 2


def test_prefix_and_null_tests(posts):
    server, ids = posts
    page = server.get("/api/blog-post?title__prefix=ab&limit=20").json
    assert [r["id"] for r in page["data"]] == ids[1::2]
    assert server.get("/api/user?age__null=true&name__prefix=Op").json["total"] == 1
    assert server.get("/api/user?age__null=false&name__prefix=Op").json["total"] == 0


def test_an_offset_page_links_to_the_next_by_cursor(posts):
    server, ids = posts
    reply = server.get("/api/blog-post?sort=title&limit=3&offset=3")
    link = next_path(reply)
    assert "offset" not in dict(parse_qsl(urlsplit(link).query))
    every = [r["id"] for r in server.get("/api/blog-post?sort=title&limit=100").json["data"]]
    assert [r["id"] for r in reply.json["data"]] + walk(server, link)[0] == every[3:]


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("body__gt=x", "cannot use 'body__gt': 'body' is not marked @sort"),
        ("score__gte=lots", "invalid value 'lots' for 'score__gte': expected a number"),
        ("score__prefix=1", "cannot use 'score__prefix': 'score' is float, not str"),
        ("title__null=true", "cannot use 'title__null': 'title' is not nullable"),
        ("cursor=bm9wZQ", "malformed cursor 'bm9wZQ'"),
        ("cursor=x&offset=2", "'cursor' and 'offset' cannot be combined"),
    ],
)
def test_bad_operator_queries_are_400_naming_what_is_allowed_and_change_nothing(posts, query, detail):
    server, _ids = posts
    before = server.get("/api/blog-post?limit=1000").json, server.get("/snapshot").json["watermarks"]
    reply = server.get(f"/api/blog-post?{query}")
    assert (reply.status, reply.json["code"]) == (400, "bad_query"), reply
    assert reply.json["detail"].startswith(detail), reply.json["detail"]
    if "allowed" in reply.json["detail"]:
        assert "__prefix on title" in reply.json["detail"]
    assert (server.get("/api/blog-post?limit=1000").json, server.get("/snapshot").json["watermarks"]) == before


def test_a_cursor_of_another_sort_is_400(posts):
    server, _ids = posts
    link = next_path(server.get("/api/blog-post?sort=-score&limit=2"))
    cursor = dict(parse_qsl(urlsplit(link).query))["cursor"]
    reply = server.get(f"/api/blog-post?sort=score&cursor={cursor}")
    assert (reply.status, reply.json["code"]) == (400, "bad_query")
    assert "was made for sort='-score', and this request sorts by 'score'" in reply.json["detail"]


def test_a_cursor_walk_at_as_of_does_not_see_later_writes(posts):
    server, ids = posts
    watermark = server.get("/snapshot").json["watermarks"]["BlogPost"]
    start = f"/api/blog-post?sort=-score&limit=3&as_of={watermark}"
    page = server.get(start)
    author = server.get(f"/api/blog-post/{ids[0]}").json["author_id"]
    extra = server.request("POST", "/api/blog-post", {"author_id": author, "title": "zz", "body": "b", "score": 9})
    walked, paths = walk(server, start)
    assert len(paths) > 1 and all(f"as_of={watermark}" in p for p in paths)
    whole = server.get(f"/api/blog-post?sort=-score&limit=1000&as_of={watermark}").json["data"]
    assert walked == [r["id"] for r in whole] and walked[:3] == [r["id"] for r in page.json["data"]]
    assert extra.json["id"] not in walked
    assert server.request("DELETE", f"/api/blog-post/{extra.json['id']}").status == 204


def test_a_cursor_stays_valid_across_a_compaction(tmp_path):
    data = tmp_path / "data"
    server = start_server(ROOT / "schemas" / "blog.dbs", data, env={"SERVICE_SYNC": "off"})
    try:
        author = server.request("POST", "/api/user", {"email": "c@example.com", "name": "C"}).json["id"]
        ids = []
        for i in range(8):
            body = {"author_id": author, "title": f"t{i}", "body": "b", "score": i % 3}
            ids.append(server.request("POST", "/api/blog-post", body).json["id"])
        # deleted records make the compaction renumber nothing but drop rows
        for gone in ids[:2]:
            assert server.request("DELETE", f"/api/blog-post/{gone}").status == 204
        first = server.get("/api/blog-post?sort=score,-title&limit=2")
        link = next_path(first)
        epoch = server.get("/snapshot").json["epoch"]
        rest_before = walk(server, link)[0]
    finally:
        server.stop()
    env = service_env(data, {"SERVICE_TENANT": "default"})
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    server = start_server(ROOT / "schemas" / "blog.dbs", data, env={"SERVICE_SYNC": "off"})
    try:
        assert server.get("/snapshot").json["epoch"] != epoch
        assert walk(server, link)[0] == rest_before
        assert [r["id"] for r in first.json["data"]] + rest_before == [
            r["id"] for r in server.get("/api/blog-post?sort=score,-title").json["data"]
        ]
    finally:
        server.stop()
