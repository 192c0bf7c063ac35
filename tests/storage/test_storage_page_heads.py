"""A bucket ordered for one page (seek.py `ordered_ids` with the page's end): ordered by the
first sort key alone, cut after the run of equal first keys that holds the page's last id,
and only that head ordered by the whole sort. Runs of equal first keys straddle every page
end here (four scores over 300 posts, titles in ten values, nulls of the nullable `age`),
and every page is held to the brute-force list (`support.storage.reference_list`)."""

from __future__ import annotations

import random

import pytest

from dbsvc.runtime import Query
from support.storage import BLOG, open_store, post, reference_list, run, user


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = open_store(str(tmp_path_factory.mktemp("heads")), sync="off")
    rng = random.Random(36)

    async def fill() -> None:
        for i in range(1, 61):
            await s.insert("User", user(i, name=f"n{rng.randrange(6)}", age=rng.choice([None, 20, 30, 40])))
        for i in range(1, 301):
            score = float(rng.choice([1, 2, 2, 3]))
            await s.insert("BlogPost", post(i, author=1 + i % 5, title=f"t{rng.randrange(10)}", score=score))

    run(fill())
    yield s
    s.close()


SORTS = [(("score", True), ("title", False)), (("score", False), ("title", True)), (("title", False), ("score", True))]


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize(("offset", "limit"), [(0, 1), (0, 20), (7, 13), (19, 2), (40, 10), (0, 200)])
def test_a_bucket_page_ordered_by_its_head_is_the_full_orders_page(store, sort, offset, limit):
    query = Query(filters={"author_id": frozenset({1})}, sort=sort, limit=limit, offset=offset)
    want, want_total = reference_list(store.table("BlogPost").records, BLOG.BY_NAME["BlogPost"], query)
    got, total, _watermark, _more = store.list_page("BlogPost", query)
    assert [r["id"] for r in got] == [r["id"] for r in want] and total == want_total == 60


@pytest.mark.parametrize("sort", [(("age", False), ("name", True)), (("age", True), ("name", False))])
@pytest.mark.parametrize("offset", [0, 5, 17, 30])
def test_a_page_head_cut_in_a_run_of_nulls_keeps_the_order(store, sort, offset):
    query = Query(filters={"role": frozenset({"reader"})}, sort=sort, limit=10, offset=offset)
    want, want_total = reference_list(store.table("User").records, BLOG.BY_NAME["User"], query)
    got, total, _watermark, _more = store.list_page("User", query)
    assert [r["id"] for r in got] == [r["id"] for r in want] and total == want_total == 60
