"""The per-record JSON cache: fresh exactly while the store still holds the same record object."""

from __future__ import annotations

import json

from dbsvc.app import EncodedRecords
from support.blog import BLOG

MODULE = BLOG  # compiled once per process (tests/support/blog.py)
USER = MODULE.BY_NAME["User"]


def user(id_: int, name: str) -> dict:
    return {
        "id": id_,
        "email": f"{id_}@x.io",
        "name": name,
        "age": None,
        "role": "reader",
        "joined": "2024-01-01T00:00:00Z",
        "profile": None,
    }


def test_same_record_object_is_encoded_once():
    cache = EncodedRecords(list(MODULE.MODELS))
    record = user(1, "Ann")
    first = cache.encode(USER, record)
    assert cache.encode(USER, record) is first
    assert json.loads(first) == record


def test_a_replaced_record_with_the_same_id_is_encoded_again():
    cache = EncodedRecords(list(MODULE.MODELS))
    cache.encode(USER, user(1, "Ann"))
    assert json.loads(cache.encode(USER, user(1, "Bea")))["name"] == "Bea"


def test_capacity_evicts_the_oldest_entry():
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    records = [user(i, f"n{i}") for i in range(3)]
    encoded = [cache.encode(USER, r) for r in records]
    kept_2 = cache.encode(USER, records[2])  # full: kept on its second read, 0 evicted
    assert kept_2 == encoded[2] and cache.encode(USER, records[2]) is kept_2
    assert cache.encode(USER, records[1]) is encoded[1]
    assert cache.encode(USER, records[0]) is not encoded[0]  # evicted, encoded afresh
    assert cache.encode(USER, records[0]) == encoded[0]


def test_a_full_cache_keeps_a_record_read_once_only_on_its_second_read():
    """Reads over many more records than the cache holds evict nothing for a record read
    once (session 14, wt-rand); below the capacity every record is kept at once, and a
    write's record (its JSON given) is kept whether or not it was read."""
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    a, b, c, d = (user(i, f"n{i}") for i in range(1, 5))
    kept_a = cache.encode(USER, a)
    cache.encode(USER, b)
    once = cache.encode(USER, c)
    assert cache.encode(USER, a) is kept_a and cache.refused == 1  # c took nobody's place
    twice = cache.encode(USER, c)
    assert twice is not once and cache.encode(USER, c) is twice and cache.refused == 1
    assert cache.encode(USER, a) is not kept_a  # c's second read pushed out a, the oldest
    written = b'{"id":4}'
    assert cache.encode(USER, d, written) is written and cache.encode(USER, d) is written


def test_a_full_cache_forgets_reads_once_past_its_capacity_of_them():
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    for r in (user(1, "a"), user(2, "b")):
        cache.encode(USER, r)
    c = user(3, "c")
    cache.encode(USER, c)  # read once: 3 remembered
    cache.encode(USER, user(5, "e"))  # two ids remembered: the next one forgets both
    cache.encode(USER, user(6, "f"))
    assert cache.encode(USER, c) is not cache.encode(USER, c)  # 3 forgotten: read "once" again


def test_a_page_with_a_record_not_kept_is_not_kept_whole():
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    a, b, c = (user(i, f"n{i}") for i in range(1, 4))
    cache.encode(USER, a)
    cache.encode(USER, b)
    first = cache.encode_page(USER, [a, c])  # c not kept: nor is the page
    assert first == cache.encode(USER, a) + b"," + json.dumps(c, separators=(",", ":")).encode()
    second = cache.encode_page(USER, [a, c])  # c kept now (a pushed out: capacity 2); the page
    assert second == first and second is not first  # joined once with all kept: not kept yet
    cache.encode_page(USER, [a, c])  # a read once since it went: refused, the page not kept
    fourth = cache.encode_page(USER, [a, c])  # a kept again, the page from its second join
    assert fourth == first and cache.encode_page(USER, [a, c]) is fourth


def test_an_encoding_over_the_largest_is_not_kept_nor_its_record():
    cache = EncodedRecords(list(MODULE.MODELS), largest=200)
    small, big = user(1, "Ann"), user(2, "x" * 300)
    cache.encode(USER, small)
    first = cache.encode(USER, big)
    assert json.loads(first) == big and cache.encode(USER, big) is not first  # encoded each time
    assert cache.kept_ids(USER) == [1]  # no entry holds the big dict
    grown = user(1, "y" * 300)  # a record that grew past it
    cache.encode(USER, grown)
    assert cache.kept_ids(USER) == [] and json.loads(cache.encode(USER, grown)) == grown


def test_a_second_page_with_a_record_not_kept_is_not_kept_either():
    """The refusals are counted, not flagged: a page refused after another is left out too."""
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    a, b, c, d = (user(i, f"n{i}") for i in range(1, 5))
    cache.encode(USER, a)
    cache.encode(USER, b)
    cache.encode_page(USER, [a, c])  # c refused
    first = cache.encode_page(USER, [b, d])  # d refused: not kept
    assert cache.encode_page(USER, [b, d]) is not first and cache.refused == 2
