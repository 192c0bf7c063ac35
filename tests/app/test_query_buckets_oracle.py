"""SQLite as the oracle of lists served from a filter's bucket kept in sort order
(storage/buckets.py, bucketplan.py: buckets of at least BUCKET_AT ids), over the REST API of
one real server on 127.0.0.1.

tests/app/test_query_oracle.py's records are a dozen at most, so no bucket there is ever
kept in order; here 700 Items spread over three `g` values (and null) make buckets of ~175,
drawn from the same small domains (equal keys, nulls, extremes). Each list shape the new
plans serve (one filter sorted by another field in either direction, two sort keys, two
filters with and without a sort, counted per pair of values or not, a range on a sort field
with a filter, a prefix sorted by another field, kept in that order or not) is asked at several
offsets and walked to its end by the `next` links (cursors), and must hold the SQL answer's
ids in order and its total. Then writes move records between buckets and between keys
(patches of `g`, `n`, `f`, `s`; deletes; creates: one `POST /batch`) and every shape is asked again, and as it was
before the writes (`as_of` the watermark read then) against the SQL of the old records.
"""

from __future__ import annotations

import random
from urllib.parse import quote, urlencode

import pytest

from support.query_oracle import SCHEMA, Twin, body
from support.server import start_server
from tests.app.test_query_oracle import next_path

COUNT = 700
# (query parameters, SQL where, its args, SQL order)
SHAPES = [
    ([("g", "1"), ("sort", "n")], "g = 1", [], "n ASC NULLS LAST, id"),
    ([("g", "0"), ("sort", "-n")], "g = 0", [], "n DESC NULLS FIRST, id"),
    ([("g", "2"), ("sort", "-f")], "g = 2", [], "f DESC NULLS FIRST, id"),
    ([("g", "1"), ("sort", "s")], "g = 1", [], "s ASC NULLS LAST, id"),
    ([("g", "2"), ("sort", "-dt,n")], "g = 2", [], "dt DESC NULLS FIRST, n ASC NULLS LAST, id"),
    ([("g", "0"), ("sort", "f,-s")], "g = 0", [], "f ASC NULLS LAST, s DESC NULLS FIRST, id"),
    ([("g", "1"), ("b", "true"), ("sort", "-n")], "g = 1 AND b = 1", [], "n DESC NULLS FIRST, id"),
    ([("g", "2"), ("b", "false")], "g = 2 AND b = 0", [], "id"),
    ([("g", "0"), ("n__gte", "1")], "g = 0 AND n >= 1", [], "id"),
    ([("g", "1"), ("f__lt", "1.0"), ("sort", "-f")], "g = 1 AND f < 1.0", [], "f DESC NULLS FIRST, id"),
    ([("g", "2"), ("n__gt", "0"), ("sort", "n")], "g = 2 AND n > 0", [], "n ASC NULLS LAST, id"),
    # two filters counted per pair of values (g's bucket kept), and under BUCKET_AT (n=2's: not)
    ([("g", "0"), ("n", "1"), ("sort", "-f")], "g = 0 AND n = 1", [], "f DESC NULLS FIRST, id"),
    ([("n", "2"), ("b", "false")], "n = 2 AND b = 0", [], "id"),
    # a prefix (~175 ids) sorted by another field: a walk for a first page of 20, kept in order past it
    ([("s__prefix", "a"), ("sort", "-n")], "substr(s, 1, 1) = 'a'", [], "n DESC NULLS FIRST, id"),
    ([("s__prefix", "a"), ("sort", "f,-n")], "substr(s, 1, 1) = 'a'", [], "f ASC NULLS LAST, n DESC NULLS FIRST, id"),
]
PAGES = [(20, 0), (7, 11), (20, 150), (0, 0)]
INSTANTS = [0, 1, 86_400_000_000, 1_700_000_000_500_000, -1_000_000]


def row(rng: random.Random) -> dict:
    """A record of tests/support/query_oracle.py's domains (few values: equal keys are common)."""
    pick = rng.choice
    dt = None if rng.random() < 0.2 else (pick(INSTANTS), pick([0, 60, -330]))
    return {
        "n": pick([None, 0, 1, 2, -1, 7, 2**53, -(2**63), 2**63 - 1]),
        "f": pick([None, 0.0, -0.0, 0.5, 1.0, 2.0, -2.5, 1e308, -1e308, 5e-324, 3]),
        "s": pick([None, "a", "b", "ab", "é", "Z", "😀", ""]),
        "t": pick(["a", "b", "ab"]),
        "b": rng.random() < 0.5,
        "dt": dt,
        "g": pick([0, 1, 2, None]),
        "w": None,
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("buckets")
    schema = root / "items.dbs"
    schema.write_text(SCHEMA)
    served = start_server(schema, root / "data", env={"SERVICE_SYNC": "off"})
    yield served
    served.stop()


def batch(server, ops: list[dict]) -> list[int]:
    """`POST /batch` of `ops`: each op's id."""
    reply = server.post("/batch", {"ops": ops})
    assert reply.status == 200, reply
    return [result["id"] for result in reply.json["results"]]


def check(server, twin: Twin, extra: list[tuple[str, str]] = ()) -> None:
    for params, where, args, order in SHAPES:
        want = twin.expected(where, args, order)
        for limit, offset in PAGES:
            query = params + list(extra) + [("limit", str(limit)), ("offset", str(offset))]
            reply = server.get("/api/item?" + urlencode(query, quote_via=quote))
            assert reply.status == 200, (query, reply)
            got = [r["id"] for r in reply.json["data"]]
            assert (got, reply.json["total"]) == (want[offset : offset + limit], len(want)), query
        walked, path = [], "/api/item?" + urlencode(params + list(extra) + [("limit", "40")], quote_via=quote)
        for _ in range(len(want) // 40 + 2):
            reply = server.get(path)
            assert reply.status == 200, (path, reply)
            assert reply.json["total"] == len(want), path
            walked += [r["id"] for r in reply.json["data"]]
            path = next_path(reply)
            if path is None:
                break
        assert walked == want, params


def test_lists_over_kept_buckets_agree_with_sqlite_before_and_after_writes(server):
    rng = random.Random(36)
    rows: dict[int, dict] = {}
    made = [row(rng) for _ in range(COUNT)]
    for id_, record in zip(batch(server, [{"op": "create", "model": "item", "record": body(r)} for r in made]), made):
        rows[id_] = record
    before = Twin()
    before.fill(sorted(rows.items()))
    check(server, before)
    watermark = server.get("/api/item?limit=0").headers["dbsvc-watermark"]

    ops, changed = [], {}
    for id_ in rng.sample(sorted(rows), 150):  # between buckets, between keys, to null and back
        change = {f: row(rng)[f] for f in rng.sample(["g", "n", "f", "s"], rng.randint(1, 3))}
        ops.append({"op": "patch", "model": "item", "id": id_, "record": change})
        changed[id_] = {**rows[id_], **change}
    rows.update(changed)
    for id_ in rng.sample(sorted(rows), 40):
        ops.append({"op": "delete", "model": "item", "id": id_})
        del rows[id_]
    made = [row(rng) for _ in range(40)]
    ops += [{"op": "create", "model": "item", "record": body(r)} for r in made]
    for id_, record in zip(batch(server, ops)[-40:], made):
        rows[id_] = record
    after = Twin()
    after.fill(sorted(rows.items()))
    check(server, after)
    check(server, before, [("as_of", watermark)])
