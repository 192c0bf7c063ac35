"""A kept search's matches in id order (storage/searches.py `in_id_order`, bucketplan.py
`_search_plan`): a search alone in id order is answered by slicing its kept matches sorted,
kept beside the entry and moved by a bisect when a replayed row enters or leaves them.

Held to a plain model, a dict of id -> text matched by textsearch's own rule, through
inserts, replaces, deletes, `undo_last` and a snapshot's load (a compaction's new table):
every page (offsets, a cursor walk to the end, `limit=0`) and `total` are the model's, and
every kept id order is its entry's matches sorted."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.cursors import encode_cursor
from dbsvc.storage import query as plans
from dbsvc.storage.rows import pack
from dbsvc.storage.searches import CHEAP_KEPT, KEEP_AT, KEPT_SEARCHES
from dbsvc.storage.table import Table
from dbsvc.textsearch import matches
from support.churn import undo_last
from tests.storage.test_storage_plan_units import ITEM

WORDS = ["alpha", "alps", "beta", "bet", "gamma", "omega"]
QUERIES = [("al", "be"), ("alpha", "gamma"), ("bet", "om", "al")]  # several words: kept


def record(i: int, text: str | None) -> dict:
    return {"id": i, "n": 1, "f": 1.0, "s": None, "k": "x", "g": None, "w": text}


def page(table: Table, query: tuple[str, ...], limit: int, offset: int = 0, after: int | None = None):
    params = [("search", " ".join(query)), ("limit", str(limit))]
    if after is not None:
        params.append(("cursor", encode_cursor("Item", (), [], after)))
    elif offset:
        params.append(("offset", str(offset)))
    found, total, more = plans.list_page(table, ITEM.parse_list_query(params))
    return [r["id"] for r in found], total, more


def check(table: Table, records: dict[int, dict]) -> None:
    for query in QUERIES:
        want = sorted(i for i, r in records.items() if matches([r["w"]], query))
        assert page(table, query, 0) == ([], len(want), False)
        for limit, offset in [(3, 0), (2, 5), (1000, 0)]:
            more = offset + limit < len(want)
            assert page(table, query, limit, offset) == (want[offset : offset + limit], len(want), more), query
        walked, after = [], None  # a cursor walk to the end, 3 a page
        while True:
            ids, total, more = page(table, query, 3, after=after)
            assert total == len(want)
            walked += ids
            if not more:
                break
            after = ids[-1]
        assert walked == want, query
    words = table.words
    assert words is not None
    for query, order in words.in_order.items():
        entry = words.kept.get(query) or words.cheap[query]
        assert order == sorted(entry[0]), query


def test_a_kept_search_in_id_order_is_sliced_from_its_matches_sorted():
    """Fails before session 11 (no `in_order`: each list sorted the kept matches again)."""
    table = Table(ITEM)
    for i in range(1, 41):
        table.insert(ITEM.row(record(i, "alpha beta" if i % 3 == 0 else "alpha")))
    assert page(table, ("al", "be"), 4) == ([3, 6, 9, 12], 13, True)
    assert table.words is not None
    order = table.words.in_order[("al", "be")]
    assert order == list(range(3, 40, 3))
    table.insert(ITEM.row(record(41, "alps bet")))  # enters: replayed, moved in by a bisect
    table.replace(table.live[6], ITEM.row(record(6, "gamma")))  # leaves
    assert page(table, ("al", "be"), 4, 2) == ([12, 15, 18, 21], 13, True)
    assert table.words.in_order[("al", "be")] is order and order == [3, *range(9, 40, 3), 41]
    assert page(table, ("al", "be"), 4, after=39) == ([41], 13, False)


def test_a_search_beside_another_condition_a_sort_or_alone_as_one_word_is_planned_as_before():
    """Only a kept search alone in id order is sliced: beside a filter, a range, a null test,
    a sort or a row test, and for a one-word query (its postings never kept), each page is
    the matching records' in the list's order, as seek.py plans it."""
    table, texts = Table(ITEM), {}
    for i in range(1, 61):
        texts[i] = "alpha beta" if i % 2 else "alpha"
        n = None if i % 5 == 0 else i % 7
        table.insert(ITEM.row({**record(i, texts[i]), "n": n}))
    both = [i for i in range(1, 61) if i % 2]
    n_of = {i: (None if i % 5 == 0 else i % 7) for i in range(1, 61)}
    cases = [
        ([("n", "3")], [i for i in both if n_of[i] == 3]),
        ([("n__gte", "4")], [i for i in both if n_of[i] is not None and n_of[i] >= 4]),
        ([("n__null", "true")], [i for i in both if n_of[i] is None]),
        ([("sort", "-n")], sorted(both, key=lambda i: (n_of[i] is not None, -(n_of[i] or 0)))),
    ]
    for extra, want in cases:
        query = ITEM.parse_list_query([("search", "al be"), ("limit", "100"), *extra])
        found, total, _more = plans.list_page(table, query)
        assert ([r["id"] for r in found], total) == (want, len(want)), extra
    query = replace(ITEM.parse_list_query([("search", "al be"), ("limit", "100")]), where_row=lambda v: v[0] > 30)
    found, total, _more = plans.list_page(table, query)
    assert ([r["id"] for r in found], total) == ([i for i in both if i > 30], len(both) // 2)
    assert page(table, ("beta",), 3) == ([1, 3, 5], 30, True)  # one word: seek.py's plan


TEXT = st.one_of(st.none(), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join))
STEP = st.one_of(
    st.tuples(st.just("insert"), TEXT),
    st.tuples(st.just("replace"), st.integers(0, 60), TEXT),
    st.tuples(st.just("delete"), st.integers(0, 60)),
    st.tuples(st.just("undo")),
    st.tuples(st.just("reload")),
    st.tuples(st.just("check")),
)


@settings(max_examples=60, deadline=None)
@given(start=st.lists(TEXT, min_size=0, max_size=40), steps=st.lists(STEP, max_size=25))
def test_kept_id_orders_follow_a_plain_model(start, steps):
    table, records = Table(ITEM), {}
    for i, text in enumerate(start, 1):
        records[i] = record(i, text)
        table.insert(ITEM.row(records[i]))
    next_id = len(start) + 1
    check(table, records)
    for step in steps:
        kind = step[0]
        if kind == "insert":
            records[next_id] = record(next_id, step[1])
            table.insert(ITEM.row(records[next_id]))
            next_id += 1
        elif kind in ("replace", "delete") and records:
            id_ = sorted(records)[step[1] % len(records)]
            if kind == "replace":
                records[id_] = record(id_, step[2])
                table.replace(table.live[id_], ITEM.row(records[id_]))
            else:
                table.delete(id_, table.live[id_])
                del records[id_]
        elif kind == "undo" and table.rows:
            undo_last(table, ITEM, records)
        elif kind == "reload":  # a compaction's new table: the snapshot's records, no rows
            table = Table(ITEM)
            values = [ITEM.row(records[i]) for i in sorted(records)]
            table.load_base(
                [pack(ITEM.fields, v) for v in values],
                {p: [ITEM.keys[ITEM.fields[p]](v[p]) for v in values] for p in table.columns},
                max(records, default=0),
            )
        elif kind == "check":
            check(table, records)
    check(table, records)


def test_a_query_dropped_from_the_cheap_pool_drops_its_id_order():
    """The oldest cheap query pushed out by CHEAP_KEPT others, then a write into its matches:
    listed again, it is matched afresh and ordered afresh, never from its old order."""
    table = Table(ITEM)
    for i in range(1, 21):
        table.insert(ITEM.row(record(i, f"alpha w{i} beta")))
    assert page(table, ("al", "be"), 100)[0] == list(range(1, 21))
    for i in range(1, CHEAP_KEPT + 1):  # each a cheap query of its own: the first is dropped
        page(table, ("al", f"w{i}"), 5)
    assert table.words is not None and ("al", "be") not in table.words.cheap
    assert set(table.words.in_order) <= set(table.words.cheap)
    table.delete(3, table.live[3])
    assert page(table, ("al", "be"), 100) == ([i for i in range(1, 21) if i != 3], 19, False)


def test_a_costly_query_dropped_with_its_pool_drops_its_id_order():
    """KEPT_SEARCHES + 1 costly queries (each reading KEEP_AT ids or more): the last drops
    them all, their id orders with them; a delete after, the first listed again is exact."""
    words = [f"v{i}" for i in range(7)]
    table = Table(ITEM)
    for i in range(1, KEEP_AT + 11):
        table.insert(ITEM.row(record(i, " ".join(words))))
    pairs = [(a, b) for a in words for b in words if a < b][: KEPT_SEARCHES + 1]
    assert page(table, pairs[0], 2)[0] == [1, 2]
    assert table.words is not None and pairs[0] in table.words.in_order
    for pair in pairs[1:]:
        page(table, pair, 2)
    assert set(table.words.in_order) <= set(table.words.kept) == {pairs[-1]}
    table.delete(1, table.live[1])
    assert page(table, pairs[0], 2) == ([2, 3], KEEP_AT + 9, True)
