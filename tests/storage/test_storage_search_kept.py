"""Text search's matches kept between lists (storage/searches.py) on a `Table` in memory: a
search of several words whose match reads KEEP_AT ids or more is kept in the table's word
index and brought up to date from the rows written since (inserts, replaces into and out of
the matches, deletes), matched again when those rows are many or when `undo_last` popped the
row it was kept at, and dropped by a snapshot's load; after every step each kept query's
matches are the records' and every page is the reference's (ASCII words: a record matches
when each query word starts one of its words)."""

from __future__ import annotations

import random

import pytest

from dbsvc.storage import query as plans
from dbsvc.storage.rows import pack
from dbsvc.storage.searches import KEEP_AT, KEPT_SEARCHES
from dbsvc.storage.table import Table
from support.churn import undo_last
from tests.storage.test_storage_plan_units import ITEM

COUNT = 4000
WORDS = ["alpha", "alps", "beta", "bet", "gamma", "delta", "omega", "zeta"]
QUERIES = [("al", "be"), ("gamma", "delta"), ("omega", "alps", "bet")]  # kept: each reads >= KEEP_AT ids
SMALL = [("zeta",), ("ta",), ("ze", "omega")]  # one word's postings (never kept, "ta" is "tau"); a kept pair
RARE = ["rho", "rhea", "tau"]  # each in ~1 record in 20: under KEEP_AT ids
CHEAP = [("rho", "al"), ("rh", "gamma", "delta"), ("tau", "rhea"), ("rh",)]  # kept in the cheap pool
PAGES = [(20, 0), (7, 100), (0, 0)]


def row(rng: random.Random, i: int) -> dict:
    w = " ".join(rng.sample(WORDS, 3) + [r for r in RARE if rng.random() < 0.05]) if rng.random() < 0.9 else None
    return {"id": i, "n": rng.choice([None, 1, 2]), "f": 1.0, "s": None, "k": "x", "g": None, "w": w}


def holds(query):
    return lambda r: r["w"] is not None and all(any(w.startswith(q) for w in r["w"].split()) for q in query)


def reference(records: dict[int, dict], test, sort: list[tuple[str, bool]]) -> list[int]:
    """The matching ids in id order, or by `n` descending (nulls first), ties on the id."""
    chosen = sorted(i for i, r in records.items() if test(r))
    if sort:
        chosen.sort(key=lambda i: (records[i]["n"] is not None, -(records[i]["n"] or 0)))
    return chosen


def filled(count: int = COUNT, seed: int = 1) -> tuple[Table, dict[int, dict]]:
    rng = random.Random(seed)
    table, records = Table(ITEM), {}
    for i in range(1, count + 1):
        records[i] = row(rng, i)
        table.insert(ITEM.row(records[i]))
    return table, records


def check(table: Table, records: dict[int, dict]) -> None:
    split = {i: set(r["w"].split()) for i, r in records.items() if r["w"] is not None}
    matched = {
        query: {i for i, ws in split.items() if all(any(w.startswith(q) for w in ws) for q in query)}
        for query in QUERIES + SMALL + CHEAP
    }
    for query in QUERIES + SMALL + CHEAP:
        for sort in ([], [("n", True)]):
            want = reference(records, lambda r, m=matched[query]: r["id"] in m, sort)
            for limit, offset in PAGES:
                params = [("search", " ".join(query)), ("limit", str(limit)), ("offset", str(offset))]
                params += [("sort", ",".join(("-" if d else "") + f for f, d in sort))] if sort else []
                page, total, more = plans.list_page(table, ITEM.parse_list_query(params))
                assert ([r["id"] for r in page], total) == (want[offset : offset + limit], len(want)), params
                assert more == (limit > 0 and offset + limit < len(want)), params
    assert table.words is not None
    for query, (found, count, _last, _cost) in [*table.words.kept.items(), *table.words.cheap.items()]:
        assert count == len(table.rows)
        assert found == matched[query], query


def test_a_search_of_several_words_is_kept_and_answered_from_it():
    table, records = filled()
    assert table.words is not None and table.words.kept == {}
    check(table, records)
    kept, cheap = table.words.kept, table.words.cheap
    assert set(kept) == {*QUERIES, ("ze", "omega")}, set(kept)
    assert set(cheap) == set(CHEAP), set(cheap)
    assert all(table.words.cost(q) >= KEEP_AT for q in kept)
    assert all(0 < table.words.cost(q) < KEEP_AT for q in cheap)
    objects = {q: entry[0] for q, entry in [*kept.items(), *cheap.items()]}
    check(table, records)  # no write between: the same sets, none matched again
    assert all({**kept, **cheap}[q][0] is found for q, found in objects.items())


@pytest.mark.parametrize("seed", [1])
def test_writes_and_undo_keep_every_kept_search_exact(seed):
    rng = random.Random(seed)
    table, records = filled(seed=seed)
    check(table, records)
    next_id = COUNT + 1
    for step in range(12):
        for _ in range(rng.choice([1, 1, 2, 40])):  # a few rows (replayed) or many (matched again)
            kind = rng.random()
            if kind < 0.3:
                records[next_id] = row(rng, next_id)
                table.insert(ITEM.row(records[next_id]))
                next_id += 1
            elif kind < 0.8:
                id_ = rng.choice(list(records))
                changed = dict(records[id_], w=row(rng, id_)["w"])
                table.replace(table.live[id_], ITEM.row(changed))
                records[id_] = changed
            else:
                id_ = rng.choice(list(records))
                table.delete(id_, table.live[id_])
                del records[id_]
        if step % 3 == 0:  # undo the last row: the next write takes its place in the rows
            undo_last(table, ITEM, records)
        check(table, records)


def test_a_snapshots_load_and_a_bulk_insert():
    rng = random.Random(4)
    table, records = filled(count=2000)
    check(table, records)
    batch = []
    for i in range(2001, 4501):  # larger than the table: insert_many
        records[i] = row(rng, i)
        batch.append(ITEM.row(records[i]))
    table.insert_many(batch)
    check(table, records)
    base = Table(ITEM)
    values = [ITEM.row(records[i]) for i in sorted(records)]
    base.load_base(
        [pack(ITEM.fields, v) for v in values],
        {p: [ITEM.keys[ITEM.fields[p]](v[p]) for v in values] for p in base.columns},
        max(records),
    )
    assert base.words is not None and base.words.kept == {}
    check(base, records)
    assert base.words.kept


def test_at_most_kept_searches_a_table():
    table, records = filled()
    pairs = [(a, b) for a in WORDS for b in WORDS if a < b][: KEPT_SEARCHES + 3]
    for query in pairs:
        page, total, _more = plans.list_page(table, ITEM.parse_list_query([("search", " ".join(query))]))
        assert total == len(reference(records, holds(query), []))
        assert table.words is not None and 0 < len(table.words.kept) <= KEPT_SEARCHES


def test_a_row_undone_and_written_over_is_not_trusted():
    """Kept at row count c, then `undo_last` pops row c and another write takes its place:
    the count is c again but the state differs, so the query is matched again."""
    rng = random.Random(8)
    table, records = filled()
    query = QUERIES[0]
    records[COUNT + 1] = dict(row(rng, COUNT + 1), w="alpha beta")  # a match
    table.insert(ITEM.row(records[COUNT + 1]))
    check(table, records)  # kept at this row count, its last row the insert
    assert table.words is not None and COUNT + 1 in table.words.kept[query][0]
    table.undo_last(table.max_id)
    del records[COUNT + 1]
    records[COUNT + 2] = dict(row(rng, COUNT + 2), w="gamma")  # no match, in the same place
    table.insert(ITEM.row(records[COUNT + 2]))
    check(table, records)
    assert COUNT + 1 not in table.words.kept[query][0]
