"""A page of 20 made afresh costs less (issue 36 item 2, bench/README.md "A page of 20 made
afresh") and says what it said: the next page's `Link`, made once per distinct list
(cursors.py `NextLinks`, kept with the parsed query by readcache.py `ParsedList`), is the very text
of the cursor and prefix it was composed of before, for every sort the blog schema allows and
any record; over a real server with no kept answers (`SERVICE_LIST_CACHE_BYTES=0`), a walk by
`Link` headers reads each header byte for byte and every record once, in order.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.cursors import NextLinks, encode_cursor, link_prefix, next_link
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.parsedlists import ParsedQueries
from support.blog import BLOG

MODULE = BLOG  # compiled once per process (tests/support/blog.py)
POST = MODULE.BY_NAME["BlogPost"]
USER = MODULE.BY_NAME["User"]


def composed(model, request: Request, sort, record: dict) -> str:
    """The `Link` value as app.py composed it before `NextLinks` (commit ea2962a)."""
    keys = [model.keys[f](record[f]) for f, _desc in sort]
    return next_link(
        link_prefix(request.path, request.query), encode_cursor(model.name, sort, keys, record[model.id_field])
    )


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


POST_SORTS = st.lists(st.sampled_from(["title", "-title", "score", "-score"]), max_size=2, unique_by=lambda s: s[-4:])
USER_SORTS = st.lists(st.sampled_from(["name", "-name", "age", "-age", "joined", "-joined"]), max_size=3)
TEXT = st.text(max_size=12)


@given(
    sort=POST_SORTS,
    record=st.fixed_dictionaries(
        {
            "id": st.integers(min_value=1, max_value=2**62),
            "title": TEXT,
            "score": st.floats(allow_nan=False, allow_infinity=False),
        }
    ),
    extra=st.lists(st.tuples(st.sampled_from(["published", "author_id", "title__prefix", "offset"]), TEXT), max_size=3),
)
@settings(max_examples=60, deadline=None)
def test_a_posts_next_link_is_the_composed_one(sort, record, extra):
    pairs = [("sort", ",".join(sort))] if sort else []
    target = "/api/blog-post?" + "&".join(f"{k}={v}" for k, v in pairs)
    req = Request("GET", target, "/api/blog-post", pairs + extra, [])
    query = POST.parse_list_query(pairs)
    made = NextLinks(link_prefix(req.path, req.query), POST.name, query.sort, POST.keys, POST.id_field)
    assert made.after(record) == composed(POST, req, query.sort, record)


@given(
    sort=USER_SORTS.filter(lambda s: len({f.lstrip("-") for f in s}) == len(s)),
    name=TEXT,
    age=st.one_of(st.none(), st.integers(min_value=0, max_value=150)),
    joined=st.datetimes(min_value=dt.datetime(1000, 1, 1)),
)
@settings(max_examples=60, deadline=None)
def test_a_users_next_link_is_the_composed_one_for_nulls_and_datetimes(sort, name, age, joined):
    pairs = [("sort", ",".join(sort))] if sort else []
    req = Request("GET", "/api/user", "/api/user", pairs, [])
    query = USER.parse_list_query(pairs)
    stored = joined.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a datetime as stored: canonical text
    record = {"id": 9, "email": "a@b.c", "name": name, "age": age, "role": "reader", "joined": stored}
    made = NextLinks(link_prefix(req.path, req.query), USER.name, query.sort, USER.keys, USER.id_field)
    assert made.after(record) == composed(USER, req, query.sort, record)


def test_link_after_keeps_one_maker_per_list_and_none_for_a_long_target():
    queries = ParsedQueries(capacity=1, longest=60)
    one = {"id": 3, "title": "a", "score": 2.5}
    two = {"id": 4, "title": "b", "score": -1.0}
    sorted_ = request("/api/blog-post?sort=-score&limit=2")
    query = queries.list_query(POST, sorted_)
    first = queries.link_after(POST, query, sorted_, one)
    assert first == composed(POST, sorted_, query.sort, one)
    assert queries.link_after(POST, query, sorted_, two) == composed(POST, sorted_, query.sort, two)
    listing = queries.listing(POST, sorted_)
    assert listing.query is query
    again = request("/api/blog-post?sort=-score&limit=2")
    made = queries.link_after(POST, query, again, one)
    assert made == first
    assert listing.link_after(POST, again, one) is made  # one maker, its last Link kept
    plain = request("/api/blog-post?limit=2")  # capacity 1: the other list goes
    plain_query = queries.list_query(POST, plain)
    assert queries.link_after(POST, plain_query, plain, one) == composed(POST, plain, (), one)
    assert queries.listing(POST, sorted_) is not listing  # made again
    long = request("/api/blog-post?sort=-score&title__prefix=" + "x" * 40)
    long_query = POST.parse_list_query(long.query)
    assert queries.link_after(POST, long_query, long, two) == composed(POST, long, long_query.sort, two)
    assert queries.listing(POST, long) is not queries.listing(POST, long)  # not kept


def test_a_walk_made_afresh_reads_each_link_as_composed_and_every_post_once(serve):
    """A real server keeping no answers: every page is made, and its `Link` is the one a
    client gets from the page's last record."""
    server = serve(env={"SERVICE_LIST_CACHE_BYTES": "0"})
    user = server.post("/api/user", {"email": "ann@example.com", "name": "Ann"}).json["id"]
    scores = [2.5, -1.0, 2.5, 1e16, 0.1, 7.0, 2.5]
    for n, score in enumerate(scores):
        title = f"t\u00e9 {n % 3}"
        assert (
            server.post("/api/blog-post", {"author_id": user, "title": title, "body": "b", "score": score}).status
            == 201
        )
    target = "/api/blog-post?sort=-score,title&limit=3"
    seen: list[int] = []
    while target:
        reply = server.get(target)
        assert reply.status == 200
        page = reply.json["data"]
        seen += [p["id"] for p in page]
        link = reply.headers.get("link")
        if link is None:
            break
        req = request(target)
        assert link == composed(POST, req, POST.parse_list_query(req.query).sort, page[-1])
        assert link.endswith('>; rel="next"')
        target = urlsplit(link[1 : link.index(">")])._replace(scheme="", netloc="").geturl()
    everything = server.get("/api/blog-post?sort=-score,title&limit=100").json["data"]
    assert seen == [p["id"] for p in everything] and len(seen) == len(scores)


def test_the_link_after_the_same_record_object_is_kept_and_a_new_version_makes_its_own():
    req = request("/api/blog-post?sort=-score&limit=2")
    query = POST.parse_list_query(req.query)
    made = NextLinks(link_prefix(req.path, req.query), POST.name, query.sort, POST.keys, POST.id_field)
    old = {"id": 3, "title": "a", "score": 2.5}
    first = made.after(old)
    assert made.after(old) is first  # the same version object: the same text, not made again
    newer = {"id": 3, "title": "a", "score": 9.0}  # record 3 written again: another object
    assert made.after(newer) == composed(POST, req, query.sort, newer) != first
    assert made.after(old) == first == composed(POST, req, query.sort, old)
    equal = dict(old)  # equal values, another object: made again, the same text
    assert made.after(equal) == first


LIST_PAIRS = st.lists(
    st.tuples(
        st.sampled_from(["sort", "limit", "offset", "title__prefix", "published", "score__gte"]),
        st.sampled_from(["-score", "title", "2", "5", "ab", "true", "50", "x" * 30]),
    ).filter(lambda p: p[0] != "sort" or p[1] in ("-score", "title")),
    max_size=3,
    unique_by=lambda p: p[0],
)
VALID = {
    "limit": ("2", "5", "50"),
    "offset": ("2", "5", "50"),
    "published": ("true",),
    "score__gte": ("2", "5", "50"),
    "title__prefix": ("ab", "2", "5", "50", "true", "x" * 30),
}


@given(
    lists=st.lists(
        st.tuples(
            LIST_PAIRS.filter(lambda ps: all(k == "sort" or v in VALID[k] for k, v in ps)),
            st.integers(min_value=1, max_value=5),
        ),
        min_size=1,
        max_size=12,
    ),
    capacity=st.integers(min_value=1, max_value=3),
)
@settings(max_examples=80, deadline=None)
def test_a_kept_listing_answers_what_the_parser_and_the_composed_link_do(lists, capacity):
    """Many lists asked in turn of one small `ParsedQueries` (so entries go and come back,
    the no-pairs list and a target over `longest` among them): each answer's query is the
    generated parser's and each `Link` the composed one, for whichever record ends the page."""
    queries = ParsedQueries(capacity=capacity, longest=60)
    for pairs, n in lists:
        target = "/api/blog-post" + ("?" + "&".join(f"{k}={v}" for k, v in pairs) if pairs else "")
        req = Request("GET", target, "/api/blog-post", list(pairs), [])
        listing = queries.listing(POST, req)
        assert listing.query == POST.parse_list_query(list(pairs))
        record = {"id": n, "title": f"t{n}", "score": n / 3}
        expected = composed(POST, req, listing.query.sort, record)
        assert listing.link_after(POST, req, record) == expected
        assert queries.link_after(POST, listing.query, req, record) == expected
