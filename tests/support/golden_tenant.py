"""The golden tenants of tests/storage/test_storage_object_form.py: how they were written,
and the answers a store gives on them.

`python tests/support/golden_tenant.py OUT` with an older tree first on PYTHONPATH
writes OUT/data/format3 (the tenant, a compacted snapshot in that tree's format plus a log
tail) and OUT/format3.answers.json (what that tree's store answered on it: every record
by id, `as_of` reads, list pages). The files kept in tests/storage/golden/ were written by the tree
at c99385c (snapshot format 3, session 26), before records were held as their objects;
the test opens a copy with this tree and compares its answers to the kept ones, byte for
byte as compact JSON.

Imports only dbsvc's storage, runtime and compiler, as both trees have them.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from dbsvc.compiler import compile_schema
from dbsvc.runtime import Query, compact_json
from dbsvc.schema import load_schema
from dbsvc.storage import Store
from dbsvc.storage.tenants import compact_tenant, create_tenant

ROOT = Path(__file__).resolve().parents[2]
BLOG = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
USERS, POSTS = 40, 160
# Values of every kind a record carries: commas, quotes, brackets, escapes, non-ASCII
# (Hangul starts with 0xED in UTF-8), `%`, and json values nested or flat.
TEXTS = ["plain", "a, b", 'q"uote\\back', "tab\tnl\n\x1f", "[,]", "{,}", "%s%%", "ünïcödé ✓ 🙂", "한국어", ""]
TAGS = [None, [], ["one"], ["a", "b,c"], {"k": "v"}, {"a": [1, {"b": None}]}, [[]], "s", 3]
SCORES = [0.0, -0.0, 2.5, 1e300, 5e-324, 0.1 + 0.2, 7.0, -123.456]


def write(tenant: str, seed: int = 27) -> None:
    """Users and posts written, some replaced and deleted, compacted offline, then a log
    tail of more of each: the snapshot and the replay both have rows to read."""
    rng = random.Random(seed)

    def user(i: int) -> dict[str, Any]:
        return {
            "id": i,
            "email": f"u{i}@example.com",
            "name": rng.choice(TEXTS[:-1]) + f" {i}",
            "age": rng.choice([None, 20 + i, 150]),
            "role": rng.choice(["admin", "editor", "reader"]),
            "joined": f"2026-01-{1 + i % 28:02d}T00:00:00.{i:06d}Z",
            "profile": rng.choice(TAGS),
        }

    def post(i: int) -> dict[str, Any]:
        return {
            "id": i,
            "author_id": rng.randint(1, USERS // 2),
            "title": rng.choice(TEXTS) + f" {i}",
            "body": rng.choice(TEXTS),
            "published": rng.random() < 0.5,
            "score": rng.choice(SCORES),
            "tags": rng.choice(TAGS),
        }

    async def first(s: Store) -> None:
        for i in range(1, USERS // 2 + 1):
            await s.insert("User", user(i))
        for i in range(1, POSTS // 2 + 1):
            await s.insert("BlogPost", post(i))
        for i in range(3, POSTS // 2, 7):
            await s.replace("BlogPost", i, {**post(i), "author_id": 1 + i % (USERS // 2)})
        for i in range(5, POSTS // 2, 11):
            await s.delete("BlogPost", i)

    async def tail(s: Store) -> None:
        for i in range(USERS // 2 + 1, USERS + 1):
            await s.insert("User", user(i))
        for i in range(POSTS // 2 + 1, POSTS + 1):
            await s.insert("BlogPost", {**post(i), "author_id": rng.randint(1, USERS)})
        for i in range(2, POSTS, 9):
            if i % 11 != 5 or i > POSTS // 2:
                await s.replace("BlogPost", i, {**post(i), "author_id": rng.randint(1, USERS)})
        for i in range(4, POSTS, 13):
            if i % 11 != 5 or i > POSTS // 2:
                await s.delete("BlogPost", i)

    for step in (first, tail):
        s = Store.open(tenant, BLOG.MODELS, BLOG.DESCRIPTION, sync="off")
        try:
            asyncio.run(step(s))
        finally:
            s.close()
        if step is first:
            compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))


def queries(model: str, watermark: int) -> list[tuple[str, Query]]:
    """The list shapes asked: id order, a sort each way, a filter with a sort, offsets,
    `as_of` below the head (before the tail, and inside the snapshot's rows)."""
    up, down, flag = ("name", "age", "role") if model == "User" else ("title", "score", "published")
    out = []
    for offset in (0, 17, 60):
        out.append((f"ids+{offset}", Query(limit=25, offset=offset)))
        out.append((f"-{down}+{offset}", Query(sort=((down, True),), limit=25, offset=offset)))
        out.append((f"{up}+{offset}", Query(sort=((up, False),), limit=25, offset=offset)))
    if model == "BlogPost":
        for author in (1, 3, 7):
            shape = Query(filters={"author_id": frozenset([author])}, sort=(("score", True),))
            out.append((f"author{author}-score", shape))
    value = True if model == "BlogPost" else "editor"
    out.append((flag, Query(filters={flag: frozenset([value])}, limit=50)))
    for n in (1, watermark // 3, watermark // 2, watermark - 1):
        out.append((f"as_of{n}", Query(as_of=n, limit=100)))
        out.append((f"as_of{n}-{down}", Query(as_of=n, sort=((down, True),), limit=30)))
    return out


def answers(s: Store) -> dict[str, Any]:
    """Everything compared: each model's records by id, at the head and `as_of` a few
    watermarks, and the list pages of `queries`, as JSON (the text, byte for byte)."""
    out: dict[str, Any] = {}
    for model in ("User", "BlogPost"):
        table = s.table(model)
        mark = table.watermark
        ids = sorted(table.live)
        out[model] = {
            "watermark": mark,
            "get": [[i, s.get(model, i)[0]] for i in range(0, max(ids) + 2)],
            "as_of": [[n, i, s.get(model, i, n)[0]] for n in (1, mark // 3, mark // 2) for i in ids[::5]],
            "lists": [[name, *s.list_page(model, q)] for name, q in queries(model, mark)],
        }
    return json.loads(compact_json(out))


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    tenant = create_tenant(str(out / "data"), "format3")
    write(tenant)
    s = Store.open(tenant, BLOG.MODELS, BLOG.DESCRIPTION, readonly=True)
    try:
        (out / "format3.answers.json").write_text(compact_json(answers(s)) + "\n", encoding="utf-8")
    finally:
        s.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
