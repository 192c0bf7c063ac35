"""A sorted page sent whole takes its `Link`'s keys from the store's key columns, not from
its last record's dict (storage/shown.py `SentRecord.sort_keys`, session 32): the columns
move with every write, so after updates of the sort fields (the last record of a page among
them), deletes and new records, each `Link` is still json.dumps' text of the keys the page's
last record shows, and a walk by the `Link`s still reaches every record once in the sort's
order. On a real server, every sort key kind the columns hold (a float and an int in arrays,
a datetime's microseconds, a str, a bool, nulls, the id itself when it is @sort)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from dbsvc.compiler import compile_schema
from dbsvc.operators import sort_text
from dbsvc.schema import parse_schema
from support.sortorder import ids_in_sort_order

SCHEMA = """
model Item {
  id    int       @id @sort
  n     int       @sort
  score float?    @sort
  title str?      @sort
  done  bool?     @sort
  at    datetime? @sort
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "items.dbs")).BY_NAME["Item"]
SORTS = ["-score", "score", "n", "-title", "at", "-at", "done", "-score,title", "-n,-at,done", "-id", "done,-id"]
END = '>; rel="next"'


def sort_of(text: str) -> tuple[tuple[str, bool], ...]:
    return tuple((f.lstrip("-"), f.startswith("-")) for f in text.split(",") if f)


def dumped(sort: tuple[tuple[str, bool], ...], record: dict) -> str:
    """The cursor json.dumps writes for `record` as served: the oracle."""
    keys = [ITEM.keys[f](record[f]) for f, _desc in sort]
    value = ["c1", ITEM.name, sort_text(sort), keys, record["id"]]
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def row(rng: random.Random) -> dict:
    return {
        "n": rng.choice([rng.randint(-5, 5), 2**62 + rng.randint(0, 3)]),
        "score": rng.choice([None, rng.choice([0.5, -1e-300, 3.0]), round(rng.uniform(-50, 50), 3)]),
        "title": rng.choice([None, "", "é", "a\nb", rng.choice("abc") * rng.randint(1, 3)]),
        "done": rng.choice([None, True, False]),
        "at": rng.choice(
            [None, f"2026-12-0{rng.randint(1, 3)}T0{rng.randint(0, 9)}:00:00.{rng.randint(0, 999999):06d}Z"]
        ),
    }


def walk(server, sort: str, records: list[dict]) -> None:  # noqa: ANN001 (support.server.Server)
    spec = sort_of(sort)
    target, seen, links = f"/api/item?limit=4&sort={sort}", [], 0
    for _ in range(40):
        reply = server.get(target)
        assert reply.status == 200, (target, reply)
        data = reply.json["data"]
        seen += [r["id"] for r in data]
        link = reply.headers.get("link")
        if link is None:
            break
        assert link.endswith(END), link
        cursor = parse_qs(urlsplit(link[1 : -len(END)]).query)["cursor"][0]
        assert cursor == dumped(spec, data[-1]), (sort, data[-1])
        links += 1
        target = link[1 : -len(END)]
    assert seen == ids_in_sort_order(records, spec, ITEM.keys), sort
    assert links >= len(records) // 4 - 1


def test_links_read_the_keys_each_write_left(serve, tmp_path):
    schema = Path(tmp_path / "items.dbs")
    schema.write_text(SCHEMA)
    server = serve(schema=schema)
    rng = random.Random(32)
    for _ in range(30):
        assert server.post("/api/item", row(rng)).status == 201
    for _step in range(4):
        records = server.get("/api/item?limit=100").json["data"]
        for sort in SORTS:
            walk(server, sort, records)
        # the last record of a page of each sort, and others at random, change their keys;
        # some are deleted, some are new
        lasts = {server.get(f"/api/item?limit=4&sort={s}").json["data"][-1]["id"] for s in SORTS}
        for id_ in sorted(lasts) + rng.sample([r["id"] for r in records], 5):
            reply = server.request("PATCH", f"/api/item/{id_}", body=row(rng))
            assert reply.status == 200, reply
        for id_ in rng.sample([r["id"] for r in records if r["id"] not in lasts], 3):
            assert server.request("DELETE", f"/api/item/{id_}").status == 204
        for _ in range(4):
            assert server.post("/api/item", row(rng)).status == 201
    final = server.get("/api/item?limit=100").json["data"]
    assert len(final) == 30 + 4 * (4 - 3)
    for sort in SORTS:
        walk(server, sort, final)
