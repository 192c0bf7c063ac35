"""readcache.py's two caches at their decisions, in process, with exact expectations: an
entry is fresh only for the very record object (`is`), the oldest goes at `capacity` (and
only when a new key comes), an encoding over `largest` bytes is never kept and drops the
stale entry of its key, and a parsed query or a next-page prefix is kept per model and
distinct pairs, never for a target over `longest` or a query that fails to parse.
Fixture-free: bench/mutation_inprocess.py runs them per mutant (docs/mutation.md)."""

from __future__ import annotations

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.errors import BadQuery
from dbsvc.http.types import Request
from dbsvc.parsedlists import ParsedQueries
from dbsvc.readcache import EncodedRecords
from dbsvc.schema import parse_schema

SCHEMA = """
model Note {
  id    int   @id
  title str   @filter @sort
  body  str?
  @projection(card, id, title)
  @projection(text, id, body)
}

model Tag {
  id    int   @id
  name  str
}
"""
MODULE = compile_schema(parse_schema(SCHEMA, "cache.dbs"))
NOTE, TAG = MODULE.BY_NAME["Note"], MODULE.BY_NAME["Tag"]


def note(id_: int, title: str = "t", body: str | None = None) -> dict:
    return {"id": id_, "title": title, "body": body}


def request(target: str, pairs: list[tuple[str, str]], path: str = "/api/note") -> Request:
    return Request("GET", target, path, pairs, [])


# -- EncodedRecords ----------------------------------------------------------------------


def test_the_defaults_are_documented_bounds():
    cache = EncodedRecords([NOTE])
    assert (cache.capacity, cache.largest) == (65536, 4096)
    queries = ParsedQueries()
    assert (queries.capacity, queries.longest) == (1024, 512)


def test_a_record_is_encoded_once_per_object_and_again_for_an_equal_copy():
    cache = EncodedRecords([NOTE, TAG], capacity=4)
    record = note(1, "a")
    first = cache.encode(NOTE, record)
    assert first == b'{"id":1,"title":"a","body":null}'
    assert cache.encode(NOTE, record) is first
    copy = dict(record)  # equal, not the same version object: encoded again
    again = cache.encode(NOTE, copy)
    assert again == first and again is not first
    assert cache.encode(NOTE, copy) is again  # and kept for the new object
    assert cache.encode(TAG, {"id": 1, "name": "x"}) == b'{"id":1,"name":"x"}'  # models apart


def test_the_oldest_goes_at_capacity_and_only_for_a_new_key():
    cache = EncodedRecords([NOTE], capacity=2)
    one, two = note(1), note(2)
    kept_one, kept_two = cache.encode(NOTE, one), cache.encode(NOTE, two)
    newer = note(2, "newer")  # a new version of a held key: replaces it, evicts nothing
    cache.encode(NOTE, newer)
    assert cache.encode(NOTE, one) is kept_one
    assert cache.encode(NOTE, two) is not kept_two  # replaced by `newer`'s entry
    three = note(3)
    cache.encode(NOTE, three)  # a third key read once: kept nowhere, nothing goes
    assert cache.encode(NOTE, one) is kept_one
    cache.encode(NOTE, three)  # read twice: kept, and the oldest (1) goes
    assert cache.encode(NOTE, one) is not kept_one


def test_an_encoding_over_largest_is_not_kept_and_drops_the_old_entry():
    cache = EncodedRecords([NOTE], capacity=4, largest=40)
    small = note(1, "a")
    small_bytes = cache.encode(NOTE, small)  # 32 bytes: kept
    assert len(small_bytes) == 32
    edge = note(2, "x" * 9)  # exactly 40 bytes: kept
    edge_bytes = cache.encode(NOTE, edge)
    assert len(edge_bytes) == 40 and cache.encode(NOTE, edge) is edge_bytes
    big = note(1, "x" * 10)  # 41 bytes, a new version of 1: not kept, 1's entry dropped
    big_bytes = cache.encode(NOTE, big)
    assert len(big_bytes) == 41 and cache.encode(NOTE, big) is not big_bytes
    assert cache.encode(NOTE, small) is not small_bytes  # its entry went with it
    cache.encode(NOTE, note(3, "y" * 10))  # over, with no entry to drop
    assert cache.encode(NOTE, edge) is edge_bytes


def test_encode_page_joins_with_commas_and_hits_the_cache():
    cache = EncodedRecords([NOTE], capacity=4)
    a, b = note(1, "a"), note(2, "b")
    assert cache.encode_page(NOTE, []) == b""
    page = cache.encode_page(NOTE, [a, b])
    assert page == b'{"id":1,"title":"a","body":null},{"id":2,"title":"b","body":null}'
    kept = cache.encode(NOTE, a)
    assert cache.encode_page(NOTE, [a]) == kept
    newer = note(1, "c")
    assert cache.encode_page(NOTE, [newer, b]) == b'{"id":1,"title":"c","body":null},{"id":2,"title":"b","body":null}'


def test_no_page_is_kept_when_pages_is_zero():
    """`pages=0` turns the page cache off; it once raised KeyError from an empty OrderedDict."""
    cache = EncodedRecords([NOTE], capacity=4, pages=0)
    a, b = note(1, "a"), note(2, "b")
    first = cache.encode_page(NOTE, [a, b])
    assert first == b'{"id":1,"title":"a","body":null},{"id":2,"title":"b","body":null}'
    assert cache.encode_page(NOTE, [a, b]) == first and cache.encode(NOTE, a) == first[:32]


def test_a_new_page_whose_misses_evict_its_own_hits_still_joins_every_record():
    """The kept JSON of a page not kept is found all at once (session 13, wt-cur5); a miss
    encoded afterwards may evict a record found before it, which still answers its JSON."""
    cache = EncodedRecords([NOTE], capacity=2, pages=1)
    a, b, c = note(1, "a"), note(2, "b"), note(3, "c")
    held_a, held_b = cache.encode(NOTE, a), cache.encode(NOTE, b)
    assert cache.encode_page(NOTE, [b, a]) == held_b + b"," + held_a  # both kept: found in C
    page = cache.encode_page(NOTE, [c, a, b])  # c's encoding evicts a, found just before
    assert page == b'{"id":3,"title":"c","body":null},' + held_a + b"," + held_b
    assert cache.encode(NOTE, b) is held_b and cache.encode(NOTE, c) == page[:32]  # b and c kept
    assert cache.encode(NOTE, a) is not held_a  # a was not encoded again by the page


def test_a_projected_page_answers_a_new_version_among_kept_records():
    """A projected page whose records are all held under their ids, one of them by an
    older version, answers that record's new JSON and keeps it (session 17, wt-m1m2: the
    test of a C lookup of the kept entries, measured slower than the loop and not kept)."""
    cache = EncodedRecords([NOTE], capacity=4)
    a, b = note(1, "a"), note(2, "b")
    first = cache.projected(NOTE, "card", [a, b])
    newer = note(2, "B")
    page = cache.projected(NOTE, "card", [a, newer])
    assert page == [b'{"id":1,"title":"a"}', b'{"id":2,"title":"B"}'] and page[0] is first[0]
    assert cache.projected(NOTE, "card", [a, newer])[1] is page[1]


def test_a_projection_is_kept_like_the_whole_record_under_its_own_bounds():
    cache = EncodedRecords([NOTE], capacity=2, largest=20)
    a, b, c = note(1, "a", "long body"), note(2, "b"), note(3, "c")
    first = cache.projected(NOTE, "card", [a, b])
    assert first == [b'{"id":1,"title":"a"}', b'{"id":2,"title":"b"}']  # 20 bytes each: kept
    again = cache.projected(NOTE, "card", [a, b])
    assert again[0] is first[0] and again[1] is first[1]
    newer = note(2, "B")  # a new version of a held key: replaced, nothing evicted
    cache.projected(NOTE, "card", [newer])
    assert cache.projected(NOTE, "card", [a])[0] is first[0]
    cache.projected(NOTE, "card", [c])  # a third key: the oldest (1) goes
    assert cache.projected(NOTE, "card", [a])[0] is not first[0]
    over = note(2, "toolong")  # 26 bytes: not kept, and 2's entry dropped
    out = cache.projected(NOTE, "card", [over])
    assert out == [b'{"id":2,"title":"toolong"}'] and cache.projected(NOTE, "card", [over])[0] is not out[0]
    kept_c = cache.projected(NOTE, "card", [c])[0]
    assert cache.projected(NOTE, "card", [note(4, "toolong")]) == [b'{"id":4,"title":"toolong"}']
    assert cache.projected(NOTE, "card", [c])[0] is kept_c  # the unkept one evicted nothing
    assert cache.encode(NOTE, c) == b'{"id":3,"title":"c","body":null}'  # the whole record apart


def test_each_projection_keeps_its_own_entries_and_a_large_version_drops_the_old_one():
    cache = EncodedRecords([NOTE, TAG], capacity=4, largest=30)
    a = note(1, "a", "b")
    card = cache.projected(NOTE, "card", [a])[0]
    text = cache.projected(NOTE, "text", [a])[0]
    assert (card, text) == (b'{"id":1,"title":"a"}', b'{"id":1,"body":"b"}')
    assert cache.projected(NOTE, "card", [a])[0] is card and cache.projected(NOTE, "text", [a])[0] is text
    large = note(1, "a" * 20)  # a new version of 1 over `largest`: not kept, and 1's entry dropped
    assert cache.projected(NOTE, "card", [large]) == [b'{"id":1,"title":"' + b"a" * 20 + b'"}']
    assert cache.projected(NOTE, "card", [a])[0] is not card  # the old version's entry went
    assert cache.projected(NOTE, "text", [a])[0] is text  # the other projection's stays


# -- ParsedQueries -----------------------------------------------------------------------


def test_a_query_is_parsed_once_per_model_and_pairs():
    cache = ParsedQueries(capacity=2, longest=40)
    pairs = [("title", "a"), ("sort", "-title")]
    first = cache.list_query(NOTE, request("/api/note?title=a&sort=-title", pairs))
    assert first.sort == (("title", True),) and first.filters["title"] == frozenset({"a"})
    assert cache.list_query(NOTE, request("/api/note?title=a&sort=-title", list(pairs))) is first
    other = cache.list_query(TAG, request("/api/tag?limit=3", [("limit", "3")]))
    assert other.limit == 3 and cache.list_query(TAG, request("/api/tag?limit=3", [("limit", "3")])) is other


def test_no_pairs_or_a_long_target_is_parsed_without_being_kept():
    cache = ParsedQueries(capacity=1, longest=24)
    edge = "/api/note?limit=12345678"  # 24 characters: kept
    assert len(edge) == 24
    kept = cache.list_query(NOTE, request(edge, [("limit", "12345678")]))
    assert cache.list_query(NOTE, request(edge, [("limit", "12345678")])) is kept
    assert cache.list_query(NOTE, request("/api/note", [])).limit == 100  # not kept: evicts nothing
    long = "/api/note?limit=123456789"  # 25: parsed, not kept, evicts nothing
    parsed = cache.list_query(NOTE, request(long, [("limit", "123456789")]))
    assert cache.list_query(NOTE, request(long, [("limit", "123456789")])) is not parsed
    assert parsed.limit == kept.limit == 1000  # clamped to the largest limit
    assert cache.list_query(NOTE, request(edge, [("limit", "12345678")])) is kept


def test_the_oldest_query_goes_at_capacity_and_a_refused_one_is_never_kept():
    cache = ParsedQueries(capacity=2, longest=100)
    one = cache.list_query(NOTE, request("/api/note?limit=1", [("limit", "1")]))
    two = cache.list_query(NOTE, request("/api/note?limit=2", [("limit", "2")]))
    for _ in range(2):
        with pytest.raises(BadQuery):
            cache.list_query(NOTE, request("/api/note?nope=1", [("nope", "1")]))
    assert cache.list_query(NOTE, request("/api/note?limit=1", [("limit", "1")])) is one  # nothing evicted
    cache.list_query(NOTE, request("/api/note?limit=3", [("limit", "3")]))  # the oldest (1) goes
    assert cache.list_query(NOTE, request("/api/note?limit=2", [("limit", "2")])) is two
    assert cache.list_query(NOTE, request("/api/note?limit=1", [("limit", "1")])) is not one


def test_the_next_link_keeps_its_prefix_per_path_and_pairs():
    cache = ParsedQueries(capacity=1, longest=40)
    pairs = [("title", "a b"), ("offset", "20"), ("limit", "5")]
    target, query = "/api/note?title=a%20b&offset=20&limit=5", NOTE.parse_list_query(pairs)
    link = cache.link_after(NOTE, query, request(target, pairs), note(3))
    assert link == '</api/note?title=a%20b&limit=5&cursor=WyJjMSIsIk5vdGUiLCIiLFtdLDNd>; rel="next"'
    again = cache.link_after(NOTE, query, request(target, pairs), note(4))
    assert again == '</api/note?title=a%20b&limit=5&cursor=WyJjMSIsIk5vdGUiLCIiLFtdLDRd>; rel="next"'
    tags = TAG.parse_list_query([])
    other = cache.link_after(TAG, tags, request("/api/tag", [], "/api/tag"), {"id": 7})  # capacity 1: the other goes
    assert other == '</api/tag?cursor=WyJjMSIsIlRhZyIsIiIsW10sN10>; rel="next"'
    last = cache.link_after(TAG, tags, request("/api/tag", [], "/api/tag"), {"id": 8})
    assert last == '</api/tag?cursor=WyJjMSIsIlRhZyIsIiIsW10sOF0>; rel="next"'
    long = "/api/note?" + "title=" + "x" * 40
    longer = [("title", "x" * 40)]
    assert (
        cache.link_after(NOTE, NOTE.parse_list_query(longer), request(long, longer), note(9))
        == f'</api/note?title={"x" * 40}&cursor=WyJjMSIsIk5vdGUiLCIiLFtdLDld>; rel="next"'
    )
