"""dbsvc.http.message: the path and query pairs a request target becomes (query strings with
nothing to decode take a fast split that must agree with parse_qsl), and the checks on the
application's response headers (known names and digit values skip the regexes, nothing
invalid gets through)."""

from __future__ import annotations

from urllib.parse import parse_qsl

import h11
import pytest

from dbsvc.http.message import response_headers, split_target
from dbsvc.http.types import Response

QUERIES = [
    "published=true&sort=-score&limit=20",
    "a=1&&b=2",
    "x",
    "=v",
    "a=b=c",
    "&",
    "a=&b",
    "a&a=1&a",
    "name=a%20b",
    "name=a+b",
    "q=%zz",
    "q=%C3%A9",
    "k%3D=v",
    "a=1;b=2",
    "e=",
]


@pytest.mark.parametrize("query", QUERIES)
def test_query_pairs_are_what_parse_qsl_keeps(query):
    path, pairs = split_target(f"/api/user?{query}")
    assert path == "/api/user"
    assert pairs == parse_qsl(query, keep_blank_values=True)


@pytest.mark.parametrize(
    "target, path, pairs",
    [
        ("/api/user", "/api/user", []),
        ("/api/user?", "/api/user", []),
        ("/api/us%20er?a=1", "/api/us er", [("a", "1")]),
        ("http://example.com/api/user?a=1", "/api/user", [("a", "1")]),
        ("http://example.com", "/", []),
        ("*", "*", []),
    ],
)
def test_targets_split_into_a_decoded_path_and_pairs(target, path, pairs):
    assert split_target(target) == (path, pairs)


def test_response_headers_check_every_application_header_every_time():
    good = Response(200, b"{}", [("Dbsvc-Offset", "42"), ("Location", "/api/user/7")])
    for _ in range(2):  # the second time the names are known
        headers = response_headers(good, "r-1", None, False)
        assert (b"Dbsvc-Offset", b"42") in headers and (b"Location", b"/api/user/7") in headers
    for bad in [
        ("Dbsvc-Offset", "4\r\nSet-Cookie: x=1"),
        ("Location", " leading-space"),
        ("Bad Name", "1"),
        ("Bad\r\nName", "1"),
        ("Dbsvc-Offset", "\u0663"),
    ]:
        for _ in range(2):
            with pytest.raises((h11.LocalProtocolError, UnicodeEncodeError)):
                response_headers(Response(200, b"{}", [bad]), "r-1", None, False)
