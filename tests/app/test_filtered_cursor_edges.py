"""A page in id order under an author filter at a cursor, served, at the edges a cut of the
filtered cursor path could get wrong (issue 36 item 2, "cursor at random + filter",
wt-filt): a cursor on a deleted record, on another author's record, on the author's last
post and the one before it, before every id and past every id; an author with no posts and
an author id no user has; and the walk by `Link` from the first page to the last. Each
answer is worked out here from the posts made (docs/guide/queries.md#sorting-and-pages)."""

from __future__ import annotations

import random
from urllib.parse import parse_qsl, urlsplit

from dbsvc.cursors import encode_cursor


def users(blog, tag: str, n: int) -> list[int]:
    made = []
    for i in range(n):
        reply = blog.post("/api/user", {"email": f"{tag}{i}@edges.io", "name": f"{tag}{i}"})
        assert reply.status == 201, reply.body
        made.append(reply.json["id"])
    return made


def page(blog, author: int, after: int, limit: int = 5) -> tuple[list[int], int, str | None]:
    """(ids, total, Link) of the page of `author`'s posts after the id `after`."""
    cursor = encode_cursor("BlogPost", (), [], after)
    reply = blog.get(f"/api/blog-post?author_id={author}&limit={limit}&cursor={cursor}")
    assert reply.status == 200, reply.body
    return [r["id"] for r in reply.json["data"]], reply.json["total"], reply.headers.get("link")


def test_filtered_pages_at_edge_cursors_are_the_posts_after_the_cursor(blog):
    mine, other, empty = users(blog, "filt-edge-", 3)
    rng = random.Random(36)
    posts: dict[int, int] = {}  # id -> author
    for n in range(40):
        author = rng.choice([mine, other])
        reply = blog.post("/api/blog-post", {"author_id": author, "title": f"t{n}", "body": "b", "score": 1.0})
        assert reply.status == 201, reply.body
        posts[reply.json["id"]] = author
    ids = sorted(i for i, a in posts.items() if a == mine)
    deleted = [ids[1], ids[len(ids) // 2], ids[-1]]  # a cursor's record gone; the last post too
    for i in deleted:
        assert blog.request("DELETE", f"/api/blog-post/{i}").status == 204
    live = [i for i in ids if i not in deleted]
    others = [i for i, a in posts.items() if a == other]
    cursors = [*ids, *deleted, others[0], others[-1], 0, -5, max(posts) + 1000]
    for after in cursors:
        want = [i for i in live if i > after]
        got, total, link = page(blog, mine, after)
        assert (got, total) == (want[:5], len(live)), after
        assert (link is not None) == (len(want) > 5), after
    # the author's last live post: nothing after it; the one before it: one post, no Link
    assert page(blog, mine, live[-1]) == ([], len(live), None)
    assert page(blog, mine, live[-2], limit=1) == ([live[-1]], len(live), None)
    for after in (0, live[0], max(posts) + 1):  # no posts, and no such user: nothing at any cursor
        assert page(blog, empty, after) == ([], 0, None)
        assert page(blog, 10**9, after) == ([], 0, None)


def test_a_walk_by_link_under_a_filter_reads_each_post_once(blog):
    (mine,) = users(blog, "filt-walk-", 1)
    made = []
    for n in range(23):
        reply = blog.post("/api/blog-post", {"author_id": mine, "title": f"w{n}", "body": "b", "score": 2.0})
        made.append(reply.json["id"])
    assert blog.request("DELETE", f"/api/blog-post/{made[10]}").status == 204
    seen, target = [], f"/api/blog-post?author_id={mine}&limit=4"
    for _ in range(10):
        reply = blog.get(target)
        seen += [r["id"] for r in reply.json["data"]]
        link = reply.headers.get("link")
        if link is None:
            break
        cursor = dict(parse_qsl(urlsplit(link[1 : link.index(">")]).query))["cursor"]
        target = f"/api/blog-post?author_id={mine}&limit=4&cursor={cursor}"
    assert seen == [i for i in made if i != made[10]]
