"""dbsvc.http.message.split_target: the path and query pairs a request target becomes.
Query strings with nothing to decode take a fast split; it must agree with parse_qsl."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from dbsvc.http.message import split_target

QUERIES = [
    "published=true&sort=-score&limit=20", "a=1&&b=2", "x", "=v", "a=b=c", "&", "a=&b",
    "a&a=1&a", "name=a%20b", "name=a+b", "q=%zz", "q=%C3%A9", "k%3D=v", "a=1;b=2", "e=",
]


@pytest.mark.parametrize("query", QUERIES)
def test_query_pairs_are_what_parse_qsl_keeps(query):
    path, pairs = split_target(f"/api/user?{query}")
    assert path == "/api/user"
    assert pairs == parse_qsl(query, keep_blank_values=True)


@pytest.mark.parametrize("target, path, pairs", [
    ("/api/user", "/api/user", []),
    ("/api/user?", "/api/user", []),
    ("/api/us%20er?a=1", "/api/us er", [("a", "1")]),
    ("http://example.com/api/user?a=1", "/api/user", [("a", "1")]),
    ("http://example.com", "/", []),
    ("*", "*", []),
])
def test_targets_split_into_a_decoded_path_and_pairs(target, path, pairs):
    assert split_target(target) == (path, pairs)
