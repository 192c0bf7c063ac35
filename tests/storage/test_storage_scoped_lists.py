"""Lists under an access rule's row test (`Query.where_row`, set by the app from a `Scope`):
`total`, the sort and the page cover only the records that pass, live and `as_of`, with or
without filters, and match a brute-force list over dicts that applies the same test."""

from __future__ import annotations

import asyncio
import random

import pytest

from dbsvc.runtime import Query
from support.storage import BLOG, open_store, post, reference_list, user

POST = BLOG.BY_NAME["BlogPost"]
SCORE = POST.fields.index("score")
PUBLISHED = POST.fields.index("published")


def high_row(values) -> bool:
    return values[SCORE] >= 0.5


def high(record: dict) -> bool:
    return record["score"] >= 0.5


def expected(records: dict, query: Query, test) -> tuple[list[dict], int]:
    kept = {k: r for k, r in records.items() if test(r)}
    return reference_list(kept, POST, query)


@pytest.fixture
def filled(tenant):
    """A store of 3 users and 300 posts of random scores and authors, and the posts as dicts
    after 300 inserts (watermark 300) and after 40 more updates."""
    s = open_store(tenant, sync="off")
    rnd = random.Random(31)

    async def fill():
        for i in (1, 2, 3):
            await s.insert("User", user(i))
        for i in range(1, 301):
            await s.insert(
                "BlogPost",
                post(i, author=rnd.choice((1, 2, 3)), score=round(rnd.random(), 2), published=rnd.random() < 0.3),
            )
        first = {r["id"]: r for r in s.list_records("BlogPost", Query(limit=1000))[0]}
        for i in rnd.sample(range(1, 301), 40):
            await s.replace("BlogPost", i, {**first[i], "score": round(rnd.random(), 2)})
        return first

    first = asyncio.run(fill())
    yield s, first
    s.close()


QUERIES = [
    Query(),
    Query(limit=7, offset=3),
    Query(sort=(("score", True),), limit=20),
    Query(sort=(("score", False),), limit=5, offset=100),
    Query(sort=(("title", False), ("score", True)), limit=15, offset=10),
    Query(filters={"author_id": frozenset({2})}, limit=10),
    Query(filters={"author_id": frozenset({1, 3})}, sort=(("score", True),), limit=10, offset=5),
    Query(filters={"author_id": frozenset({1}), "published": frozenset({True})}, sort=(("score", False),)),
    Query(filters={"published": frozenset({False})}, sort=(("title", True), ("score", False)), limit=12),
    Query(offset=1000),
    Query(limit=0),
]


@pytest.mark.parametrize("query", QUERIES, ids=range(len(QUERIES)))
def test_a_live_list_counts_sorts_and_pages_only_the_records_the_test_passes(filled, query):
    s, _first = filled
    live = {r["id"]: r for r in s.list_records("BlogPost", Query(limit=1000))[0]}
    tested = Query(query.filters, query.sort, query.limit, query.offset, where_row=high_row)
    page, total, watermark = s.list_records("BlogPost", tested)
    assert (page, total) == expected(live, query, high)
    assert 0 < total < 300 or query.filters  # the test really hides records
    assert watermark == 340


@pytest.mark.parametrize("query", QUERIES, ids=range(len(QUERIES)))
def test_an_as_of_list_applies_the_test_to_the_records_as_they_were(filled, query):
    s, first = filled
    tested = Query(query.filters, query.sort, query.limit, query.offset, as_of=300, where_row=high_row)
    page, total, watermark = s.list_records("BlogPost", tested)
    assert (page, total, watermark) == (*expected(first, query, high), 300)


def test_a_test_no_record_passes_is_an_empty_page_and_a_total_of_zero(filled):
    s, _first = filled
    assert s.list_records("BlogPost", Query(where_row=lambda values: False)) == ([], 0, 340)
    assert s.list_records("BlogPost", Query(as_of=10, where_row=lambda values: False)) == ([], 0, 10)


def test_a_test_every_record_passes_lists_as_the_plain_query_does(filled):
    s, _first = filled
    for query in QUERIES:
        plain = s.list_records("BlogPost", query)
        tested = Query(query.filters, query.sort, query.limit, query.offset, where_row=lambda values: True)
        assert s.list_records("BlogPost", tested) == plain


def test_the_test_is_given_each_records_stored_values(filled):
    s, _first = filled
    seen: list[tuple] = []

    def spy(values) -> bool:
        seen.append(tuple(values))
        return bool(values[PUBLISHED])

    page, total, _ = s.list_records("BlogPost", Query(filters={"author_id": frozenset({2})}, where_row=spy))
    assert all(len(values) == len(POST.fields) for values in seen)
    assert {values[0] for values in seen} == {
        r["id"] for r in s.list_records("BlogPost", Query(filters={"author_id": frozenset({2})}, limit=1000))[0]
    }  # only the filter's matches
    assert total == sum(1 for values in seen if values[PUBLISHED]) and all(r["published"] for r in page)
