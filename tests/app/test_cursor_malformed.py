"""Every `cursor` text a client can send is decoded or refused by the decoder itself as a
malformed cursor (`MalformedCursor`, a 400 `bad_query`; docs/guide/queries.md "Cursor
pages"): nothing else leaves `decode_cursor`, so no cursor is answered 500 however the
list reaches it (readcache.py `at_page`, which catches BadQuery alone, or the generated
parser of the whole pairs).

Before session 23 arrays nested past the JSON scanner's depth (about 1,000 `[`, well inside
the 4,096 characters a cursor may have) raised RecursionError out of the decode, a 500;
and an int key or id past the signed 64-bit range was taken as a key, where our indexes
hold int64 (it answered an empty page or one from the start, never an error). A fuzz of the
decoder in process over texts, base64 of bytes, JSON of every type in and out of the
cursor's shape, huge ints and nesting; then each kind found over a real server.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dbsvc.cursors import MAX_CURSOR, decode_cursor, decode_whole, encode_cursor
from dbsvc.errors import BadQuery, MalformedCursor

KINDS = {"score": "f", "title": "s", "n": "i", "pinned": "b"}
SORTS = [(), (("score", True),), (("n", False), ("title", True)), (("pinned", False),)]
TYPES = {"i": int, "f": float, "s": str, "b": bool}
INT64 = (-(1 << 63), (1 << 63) - 1)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def nested(depth: int, head: bytes = b"") -> str:
    """A cursor text of `depth` nested empty arrays, after `head`."""
    return b64(head + b"[" * depth + b"]" * depth)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.sampled_from([INT64[0] - 1, INT64[1] + 1, 10**400])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
SHAPED = st.tuples(  # the cursor's array, each part right or any JSON
    st.sampled_from(["c1", "c2"]) | JSON,
    st.just("Post") | JSON,
    st.sampled_from(["", "-score", "n,-title", "pinned"]) | JSON,
    st.lists(JSON, max_size=3) | JSON,
    JSON,
).map(list)


def _as_json(value: object, compact: bool) -> bytes:
    return json.dumps(value, separators=(",", ":") if compact else None).encode()


TEXTS = (
    st.text(max_size=80)
    | st.binary(max_size=200).map(b64)
    | st.builds(_as_json, JSON, st.booleans()).map(b64)
    | st.builds(_as_json, SHAPED, st.booleans()).map(b64)
    | st.integers(min_value=1, max_value=1500).map(nested)
    | st.integers(min_value=1, max_value=1450).map(lambda n: nested(n, b'["c1","Post","-score",['))
)


def decoded_or_refused(decode, text: str, sort, id_kind: str) -> None:  # noqa: ANN001
    """Decode `text`; a refusal must be a BadQuery, an answer keys of the sort's kinds and
    an id of `id_kind`, every int in the signed 64-bit range. Anything else fails the test."""
    try:
        keys, id_ = decode(text, "Post", sort, KINDS, id_kind)
    except BadQuery:
        return
    assert len(keys) == len(sort)
    for key, (field, _desc) in zip(keys, sort):
        assert key is None or type(key) is TYPES[KINDS[field]], (field, key)
    assert type(id_) is TYPES[id_kind]
    for value in (*keys, id_):
        if type(value) is int:
            assert INT64[0] <= value <= INT64[1]


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, sort=st.sampled_from(SORTS), id_kind=st.sampled_from(["i", "s"]))
@example(text=nested(1500), sort=SORTS[1], id_kind="i")
@example(text=b64(_as_json(["c1", "Post", "", [], INT64[1] + 1], True)), sort=(), id_kind="i")
def test_the_decoder_answers_or_refuses_every_text_with_a_bad_query(text, sort, id_kind):
    """Fails before session 23 on its first example (RecursionError) and its second (an id
    past int64 accepted)."""
    decoded_or_refused(decode_cursor, text, sort, id_kind)
    decoded_or_refused(decode_whole, text, sort, id_kind)


@pytest.mark.parametrize(
    "text, sort",
    [
        (nested(1500), SORTS[1]),
        (nested(1400, b'["c1","Post","-score",['), SORTS[1]),
        (b64(_as_json(["c1", "Post", "-score", [1.5], INT64[1] + 1], True)), SORTS[1]),
        (b64(_as_json(["c1", "Post", "n,-title", [INT64[0] - 1, "t"], 7], True)), SORTS[2]),
    ],
    ids=["nested", "nested-after-head", "id-past-int64", "key-past-int64"],
)
def test_each_kind_found_is_a_malformed_cursor_from_both_decodes(text, sort):
    """The refusal is the typed one, in the same words from the decode after the head and
    from the whole decode."""
    words = []
    for decode in (decode_cursor, decode_whole):
        with pytest.raises(MalformedCursor) as caught:
            decode(text, "Post", sort, KINDS, "i")
        words.append(str(caught.value))
    assert words[0] == words[1] and words[0].startswith("malformed cursor")


def test_the_int64_bounds_themselves_are_keys():
    for bound in INT64:
        text = encode_cursor("Post", (("n", False), ("title", True)), [bound, "t"], bound)
        assert decode_cursor(text, "Post", (("n", False), ("title", True)), KINDS, "i") == ((bound, "t"), bound)


SERVED = [  # (list target before the cursor, cursor text)
    ("/api/user?limit=2", nested(1500)),
    ("/api/user?limit=2", nested(1450, b'["c1","User","",[')),
    ("/api/blog-post?sort=-score&limit=2", nested(1400, b'["c1","BlogPost","-score",[')),
    ("/api/blog-post?author_id=1&sort=-score", nested(1500)),
    ("/api/user?limit=2", b64(_as_json(["c1", "User", "", [], INT64[1] + 1], True))),
    ("/api/user?limit=2", b64(_as_json(["c1", "User", "", [], INT64[0] - 1], True))),
    ("/api/user?sort=age", b64(_as_json(["c1", "User", "age", [10**30], 1], True))),
    ("/api/user?sort=-joined", b64(_as_json(["c1", "User", "-joined", [INT64[1] + 1], 1], True))),
    ("/api/blog-post?sort=-score", b64(b'["c1","BlogPost","-score",[NaN],1]')),
    ("/api/blog-post?sort=-score", b64(b'["c1","BlogPost","-score",[1e999],1]')),
    ("/api/blog-post?sort=title", b64(b'["c1","BlogPost","title",["\xed\xa0\x80"],1]')),
    ("/api/user?limit=2", b64(_as_json({"c1": "User"}, True))),
    ("/api/user?limit=2", b64(b'"c1"')),
    ("/api/user?limit=2", b64(b"null")),
    ("/api/user?limit=2", b64(b"9" * 3000)),
    ("/api/user?limit=2", "!!!not base64"),
    ("/api/user?limit=2", "\u00e9t\u00e9"),
    ("/api/user?limit=2", "A" * (MAX_CURSOR + 1)),
]


@pytest.mark.parametrize("target, text", SERVED, ids=[f"{i}" for i in range(len(SERVED))])
def test_a_malformed_cursor_is_a_400_problem_over_a_real_server(blog, target, text):
    """Each kind of malformed cursor, at a page a list parses (`at_page`) and beside a
    filter, over a real server: 400 problem+json, `bad_query`, "malformed cursor". The
    first four were 500s before session 23, the next four pages (200)."""
    reply = blog.get(f"{target}&cursor={quote(text, safe='')}")
    assert reply.status == 400, reply
    assert reply.headers["content-type"] == "application/problem+json"
    body = reply.json
    assert body["code"] == "bad_query" and body["status"] == 400
    assert body["detail"].startswith("malformed cursor "), body
    assert blog.get("/health").status == 200
