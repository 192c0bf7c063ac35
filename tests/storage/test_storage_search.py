"""Text search in the store: under a row test (access rules), in a live query's Init ids,
and in the index after replaces, deletes, an `as_of` list and a compaction (storage/words.py, seek.py);
kept searches (storage/searches.py) exact under writes, an aborted batch and a compaction."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import tempfile

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.rows import unpack
from dbsvc.storage.tenants import compact_tenant, create_tenant
from dbsvc.textsearch import matches
from support.query_oracle import SCHEMA, body

MODULE = compile_schema(parse_schema(SCHEMA, "items.dbs"))
ITEM = MODULE.BY_NAME["Item"]
TEXTS = ["red apple", "green apple", "red pepper", "apple pie", "blue sky"]


def row(i: int, text: str) -> dict:
    return {"n": i, "f": None, "s": None, "t": f"t{i}", "b": i % 2 == 0, "dt": None, "g": None, "w": text}


async def fill(store: Store) -> list[int]:
    return [(await store.insert("Item", ITEM.validate_create(body(row(i, t)))))["id"] for i, t in enumerate(TEXTS)]


def ids_of(store: Store, pairs: list[tuple[str, str]], **changes) -> tuple[list[int], int]:
    query = dataclasses.replace(ITEM.parse_list_query(pairs), **changes)
    page, total, _watermark, _more = store.list_page("Item", query)
    return [r["id"] for r in page], total


def test_a_row_test_keeps_only_visible_matches_in_total_and_page():
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(create_tenant(tmp, "t"), MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:
            ids = asyncio.run(fill(store))
            n_at = ITEM.fields.index("n")
            even = lambda values: values[n_at] % 2 == 0  # noqa: E731 - an access rule's row test
            assert ids_of(store, [("search", "app")]) == ([ids[0], ids[1], ids[3]], 3)
            assert ids_of(store, [("search", "app")], where_row=even) == ([ids[0]], 1)
            assert ids_of(store, [("search", "app"), ("sort", "-n")], where_row=even) == ([ids[0]], 1)
            assert ids_of(store, [("search", "red"), ("b", "true")]) == ([ids[0], ids[2]], 2)
            assert store.live_ids("Item", {}, search=("app", "red")) == [ids[0]]
            assert store.live_ids("Item", {"b": frozenset({False})}, search=("app",)) == [ids[1], ids[3]]
        finally:
            store.close()


def test_the_index_follows_writes_and_is_rebuilt_by_a_compaction():
    with tempfile.TemporaryDirectory() as tmp:
        directory = create_tenant(tmp, "t")
        store = Store.open(directory, MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:
            ids = asyncio.run(fill(store))
            record = ITEM.validate_create(body(row(0, "yellow banana")))
            asyncio.run(store.replace("Item", ids[0], {**record, "id": ids[0]}))
            asyncio.run(store.delete("Item", ids[3]))
            assert ids_of(store, [("search", "apple")]) == ([ids[1]], 1)
            assert ids_of(store, [("search", "yel ban")]) == ([ids[0]], 1)
            # the as_of list reads the past records' words
            assert ids_of(store, [("search", "apple"), ("as_of", "5")]) == ([ids[0], ids[1], ids[3]], 3)
            words = store.table("Item").words
            assert words is not None and "red" in words.postings and "pie" not in words.postings
        finally:
            store.close()
        compact_tenant(tmp, "t")
        store = Store.open(directory, MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:
            assert ids_of(store, [("search", "apple")]) == ([ids[1]], 1)
            assert ids_of(store, [("search", "red")]) == ([ids[2]], 1)
            assert ids_of(store, [("search", "yellow")]) == ([ids[0]], 1)
            assert ids_of(store, [("search", "pie")]) == ([], 0)
        finally:
            store.close()


def test_kept_searches_stay_exact_under_writes_an_aborted_batch_and_a_compaction():
    """Every search below reads under KEEP_AT ids, so each is kept in the cheap pool
    (storage/searches.py) by its first list; between two lists come inserts, replaces into
    and out of the matches, deletes, a batch applied then aborted (its rows undone), an
    online compaction with writes while it runs, and a reopen. Each list is held to the
    records' own words (textsearch's rule), sorted and paged."""
    rng = random.Random(36)
    vocabulary = ["red", "green", "apple", "pepper", "pie", "sky", "rare", "ripe", "raw"]
    queries = [("red", "apple"), ("r", "p"), ("ripe", "pie"), ("ra", "sky", "green"), ("gre", "pep")]

    def text() -> str:
        return " ".join(rng.sample(vocabulary, rng.randint(1, 3)))

    def check(s: Store) -> None:
        records = [ITEM.decode(unpack(stored)) for stored in s.table("Item").live.values()]
        for query in queries:
            whole, total = ids_of(s, [("search", " ".join(query)), ("limit", "1000")])
            want = sorted(r["id"] for r in records if matches([r["t"], r["w"]], query))
            assert (whole, total) == (want, len(want)), query
            by_n, _ = ids_of(s, [("search", " ".join(query)), ("sort", "-n"), ("limit", "7"), ("offset", "3")])
            assert by_n == sorted(want, key=lambda i: -i)[3:10], query  # n is the id here
        words = s.table("Item").words
        assert words is not None and set(words.cheap) == set(queries) and not words.kept

    with tempfile.TemporaryDirectory() as tmp:
        directory = create_tenant(tmp, "t")
        store = Store.open(directory, MODULE.MODELS, MODULE.DESCRIPTION, sync="off")

        async def go() -> None:
            for i in range(1, 301):
                await store.insert("Item", ITEM.validate_create(body({**row(i, text()), "n": i})))
            check(store)
            for step in range(8):
                await store.insert("Item", ITEM.validate_create(body({**row(300 + step, text()), "n": 301 + step})))
                check(store)
                i = rng.randint(1, 300)
                if store.table("Item").live.get(i) is not None:
                    record = ITEM.validate_create(body({**row(i, text()), "n": i}))
                    await store.replace("Item", i, {**record, "id": i})
                    check(store)
                i = rng.randint(1, 300)
                if store.table("Item").live.get(i) is not None:
                    await store.delete("Item", i)
                    check(store)
            batch = store.begin_batch()
            batch.insert("Item", ITEM.validate_create(body({**row(0, "red apple ripe pie"), "n": 999})))
            kept = next(i for i in range(1, 300) if store.table("Item").live.get(i) is not None)
            record = ITEM.validate_create(body({**row(kept, "sky raw green"), "n": kept}))
            batch.replace("Item", kept, {**record, "id": kept})
            check(store)  # the batch's rows applied: every list sees them
            batch.abort()
            check(store)  # and undone: none sees them
            task = store.compact_now()
            for i in range(10, 60, 7):
                if store.table("Item").live.get(i) is not None:
                    await store.replace("Item", i, {**ITEM.validate_create(body({**row(i, text()), "n": i})), "id": i})
            await task
            check(store)

        try:
            asyncio.run(go())
        finally:
            store.close()
        store = Store.open(directory, MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:
            check(store)
        finally:
            store.close()
