"""A list page under a `projection`: each record's projected JSON encoded once per record
version, as the whole record's is (readcache.py `EncodedRecords`, issue 36's list matrix)."""

from __future__ import annotations

import json

from dbsvc.readcache import EncodedRecords
from support.blog import BLOG

MODULE = BLOG  # compiled once per process (tests/support/blog.py)
POST = MODULE.BY_NAME["BlogPost"]


def post(id_: int, title: str) -> dict:
    return {"id": id_, "author_id": 1, "title": title, "body": "b", "published": True, "score": 1.5, "tags": None}


def test_a_projected_page_is_encoded_once_per_record_version():
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    records = [post(1, "a"), post(2, "b")]
    first = cache.projected(POST, "summary", records)
    assert [json.loads(p) for p in first] == [
        {"id": 1, "title": "a", "score": 1.5},
        {"id": 2, "title": "b", "score": 1.5},
    ]
    again = cache.projected(POST, "summary", records)
    assert all(a is b for a, b in zip(again, first))  # kept, not encoded again
    replaced = [post(1, "new"), records[1]]  # a new version of record 1
    third = cache.projected(POST, "summary", replaced)
    assert json.loads(third[0])["title"] == "new" and third[1] is first[1]
    # the whole record's cache is its own: the projection never answers for it
    assert json.loads(cache.encode(POST, records[1])) == records[1]
    cache.projected(POST, "summary", [post(3, "c")])  # capacity 2: the oldest goes
    assert cache.projected(POST, "summary", replaced)[0] is not third[0]
