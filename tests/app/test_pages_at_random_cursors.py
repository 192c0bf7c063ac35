"""Pages at many cursors and offsets, served (issue 36 item 2, 20,000 posts' many-target
rows; bench/README.md, wt-rand7): each answer is the reference's, asked once, twice and
again, before and after writes.

The rows ask pages a client walking many lists asks: a cursor at random sorted by -score
(float keys in ~2 posts a key, the seed's short runs: the page's batch is a slice of its
sublist's descending order, kept from the second ask, storage/keptparts.py
`_whole_descending`), a cursor at random in id order under an author filter, a page at an
offset at random (the list's query at that cursor or offset made by readcache.py
`with_cursor` / `with_offset`), and the pages at the list's end; in id order each page's
`Link` is followed too (its last record comes with its id alone: storage/shown.py
`_sent_id`, wt-rand10). 1,300
posts make two or three sublists (LOAD 512), so batches lie at sublists' starts, middles
and ends. A write that moves a score a little keeps its post in its sublist, whose kept
order it must drop: the pages around it are asked before and after it.
"""

from __future__ import annotations

import random
from urllib.parse import parse_qsl, urlsplit

from dbsvc.cursors import encode_cursor

POSTS, AUTHORS, PAGE = 1300, 5, 20
SCORE = (("score", True),)


def seeded(serve):
    """A server over AUTHORS users and POSTS posts whose scores take ~600 values (runs of
    ~2): the server and {id: (author, score)}."""
    server = serve(env={"SERVICE_SYNC": "off"})
    for n in range(1, AUTHORS + 1):
        assert server.post("/api/user", {"email": f"u{n}@x.io", "name": f"u{n}"}).status == 201
    rng = random.Random(20)
    posts = {}
    for _ in range(POSTS):
        author, score = rng.randint(1, AUTHORS), rng.randrange(600) / 4
        reply = server.post("/api/blog-post", {"author_id": author, "title": "t", "body": "b", "score": score})
        assert reply.status == 201, reply.body
        posts[reply.json["id"]] = (author, score)
    return server, posts


def ids_and_link(server, target: str) -> tuple[list[int], str | None]:
    reply = server.get(target)
    assert reply.status == 200, (target, reply.body)
    return [record["id"] for record in reply.json["data"]], reply.headers.get("link")


def cursor_of(link: str) -> str:
    return dict(parse_qsl(urlsplit(link[1 : link.index(">")]).query))["cursor"]


def descending_page(server, posts, key: float, id_: int) -> None:
    """The page after (key, id_) sorted by -score, asked three times (made, then kept from
    the second ask, then found kept), is the reference's; and the page its Link names."""
    order = sorted(posts, key=lambda i: (-posts[i][1], i))  # -score, ties by id ascending
    after = [i for i in order if (posts[i][1], -i) < (key, -id_)]  # what follows (key, id_) in that order
    cursor = encode_cursor("BlogPost", SCORE, [key], id_)
    target = f"/api/blog-post?sort=-score&limit={PAGE}&cursor={cursor}"
    for ask in range(3):
        ids, link = ids_and_link(server, target)
        assert ids == after[:PAGE], (key, id_, ask)
        assert (link is not None) == (len(after) > PAGE), (key, id_, ask)
    if link is not None:  # the Link's cursor continues the walk where this page ends
        ids, _link = ids_and_link(server, f"/api/blog-post?sort=-score&limit={PAGE}&cursor={cursor_of(link)}")
        assert ids == after[PAGE : 2 * PAGE], (key, id_)


def check_descending_pages(server, posts, rng) -> None:
    keys = sorted({score for _author, score in posts.values()})
    cursors = [(rng.choice(keys), rng.choice(sorted(posts))) for _ in range(40)]
    cursors += [(keys[0], max(posts)), (keys[1], 0), (keys[-1] + 1.0, 0)]  # the end, near it, before the top
    for key, id_ in cursors:
        descending_page(server, posts, key, id_)


def test_pages_at_random_cursors_and_offsets_are_the_reference_before_and_after_writes(serve):
    server, posts = seeded(serve)
    rng = random.Random(7)
    check_descending_pages(server, posts, rng)
    for author in range(1, AUTHORS + 1):  # id order under a filter, at cursors at random
        mine = sorted(i for i, (a, _s) in posts.items() if a == author)
        for id_ in [rng.choice(mine) for _ in range(6)] + [mine[-1], mine[-2]]:
            cursor = encode_cursor("BlogPost", (), [], id_)
            want = [i for i in mine if i > id_]
            for ask in range(3):  # made, kept from its second ask, found kept
                target = f"/api/blog-post?author_id={author}&limit={PAGE}&cursor={cursor}"
                ids, link = ids_and_link(server, target)
                assert ids == want[:PAGE] and (link is not None) == (len(want) > PAGE), (author, id_, ask)
                if link is not None:  # id order: the Link is made from the last record's id alone
                    target = f"/api/blog-post?author_id={author}&limit={PAGE}&cursor={cursor_of(link)}"
                    assert ids_and_link(server, target)[0] == want[PAGE : 2 * PAGE], (author, id_, ask)
    everyone = sorted(posts)
    for offset in [rng.randrange(POSTS) for _ in range(15)] + [POSTS - PAGE, POSTS - 1, POSTS]:
        for ask in range(3):
            ids, link = ids_and_link(server, f"/api/blog-post?limit={PAGE}&offset={offset}")
            assert ids == everyone[offset : offset + PAGE], (offset, ask)
            assert (link is not None) == (offset + PAGE < POSTS), (offset, ask)
            if link is not None:  # the next page after the last record's id, by cursor
                following = ids_and_link(server, f"/api/blog-post?limit={PAGE}&cursor={cursor_of(link)}")[0]
                assert following == everyone[offset + PAGE : offset + 2 * PAGE], (offset, ask)
    for id_ in rng.sample(sorted(posts), 12):  # a score moved a little: its sublist's kept order dropped
        author, before = posts[id_]
        for key in (before + 1.0, before + 0.5):  # pages whose batches hold it: orders kept
            descending_page(server, posts, key, 0)
        score = before + rng.choice([-0.5, -0.25, 0.25, 0.5])
        reply = server.request(
            "PUT", f"/api/blog-post/{id_}", {"author_id": author, "title": "t", "body": "b", "score": score}
        )
        assert reply.status == 200, reply.body
        posts[id_] = (author, score)
        for key in (before + 1.0, before + 0.5, score + 0.5):  # the same pages, and one at its new place
            descending_page(server, posts, key, 0)
    check_descending_pages(server, posts, rng)
