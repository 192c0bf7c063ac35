"""Access rules on the REST routes: what a rule costs a list and a GET (issue 31).

    python bench/rules_bench.py [--records 100000] [--users 1000] [--rounds 7] [--seconds 1]

Seeds a tenant with N blog posts spread over the users, then answers requests through the
`Application` in process (`dispatch`, exactly what the protocol layer calls, with the
token's claims), timing each request's CPU in the app and storage (no HTTP around it, so
the rule's share is not diluted by the protocol layer's ~100 us a request):

1. list: `GET /api/blog-post?limit=20` under `record.author_id == token.uid` (a Scope pinned
   on the `@filter` field, answered from its hash index) versus `GET
   /api/blog-post?author_id=<uid>&limit=20` with no rules. Target: within 10%.
2. the same list with the rule written so it leaves a row test
   (`record.published == true or record.author_id == token.uid`): what a rule no index
   answers costs (O(candidates)), for the record.
3. GET one record: with the owner rule versus without rules. Target: within 5%.

Each figure is the median over `--rounds` rounds of microseconds per request, the two
sides of a comparison alternating round by round so a neighbour's load hits both alike.
The rules are built by hand, as the compiler emits them (a `ModelRules` of plain
functions, dbsvc/rules.py), so the figure is the cost of the app's use of them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbsvc.app import Application  # noqa: E402
from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.http.message import split_target  # noqa: E402
from dbsvc.http.types import Request  # noqa: E402
from dbsvc.realtime.broker import Broker  # noqa: E402
from dbsvc.rules import NOTHING, ModelRules, Scope, claim, same  # noqa: E402
from dbsvc.schema import load_schema  # noqa: E402
from dbsvc.storage import Store  # noqa: E402
from dbsvc.storage.tenants import create_tenant  # noqa: E402

BLOG = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
POST = BLOG.BY_NAME["BlogPost"]
AUTHOR, PUBLISHED = POST.fields.index("author_id"), POST.fields.index("published")
AUTHOR_KEY = POST.keys["author_id"]


def owner_scope(claims: Any) -> Scope:
    me = claim(claims, ("uid",))
    if type(me) is not int:
        return NOTHING
    return Scope(field="author_id", keys=frozenset({AUTHOR_KEY(me)}), key=AUTHOR_KEY)


def public_or_owner_scope(claims: Any) -> Scope:
    me = claim(claims, ("uid",))
    return Scope(
        where=lambda r: same(r["published"], True) or same(r["author_id"], me),
        where_row=lambda v: same(v[PUBLISHED], True) or same(v[AUTHOR], me),
    )


def owner_rules(read: Callable[[Any], Scope]) -> ModelRules:
    def mine(record: dict, claims: Any) -> bool:
        return same(record["author_id"], claim(claims, ("uid",)))

    return ModelRules(
        list=read,
        subscribe=read,
        get=mine,
        create=mine,
        update=lambda before, after, claims: mine(before, claims) and mine(after, claims),
        delete=mine,
        text={},
    )


def application(store: Store, post_model: Any) -> Application:
    by_name = {**BLOG.BY_NAME, "BlogPost": post_model}
    module = types.SimpleNamespace(
        MODELS=tuple(by_name.values()),
        ROUTES={m.kebab: m for m in by_name.values()},
        BY_NAME=by_name,
        DESCRIPTION=BLOG.DESCRIPTION,
        RULES=post_model.rules is not None,
    )
    return Application(module, store, Broker(store, by_name, 64))


def seed(directory: str, records: int, users: int) -> Store:
    store = Store.open(directory, BLOG.MODELS, BLOG.DESCRIPTION, sync="off")
    user = BLOG.BY_NAME["User"]
    store.insert_batch(
        [("User", user.validate_create({"email": f"u{i}@bench.io", "name": f"user {i}"})) for i in range(1, users + 1)]
    )
    chunk = 10_000
    for start in range(0, records, chunk):
        rows = []
        for i in range(start, min(records, start + chunk)):
            body = {
                "author_id": 1 + i % users,
                "title": f"post {i}",
                "body": "x" * 40,
                "published": i % 7 == 0,
                "score": (i * 7919) % 1000 / 10,
            }
            rows.append(("BlogPost", POST.validate_create(body)))
        store.insert_batch(rows)
    return store


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def per_request_us(app: Application, target: str, segment: str | None, claims: Any, seconds: float) -> float:
    """CPU microseconds per request, over as many requests as fit in `seconds`."""
    model = app.models["blog-post"]
    req = request(target)
    answer = app.dispatch(req, model, segment, claims)
    assert answer.status == 200, (target, answer.status)
    count, start = 0, time.process_time()
    deadline = start + seconds
    while True:
        for _ in range(200):
            app.dispatch(req, model, segment, claims)
        count += 200
        now = time.process_time()
        if now >= deadline:
            return (now - start) / count * 1e6


def compare(
    name: str,
    left: tuple[Application, str, str | None, Any],
    right: tuple[Application, str, str | None, Any],
    rounds: int,
    seconds: float,
) -> dict[str, float]:
    a, b = [], []
    for _ in range(rounds):
        a.append(per_request_us(*left, seconds=seconds))
        b.append(per_request_us(*right, seconds=seconds))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{name}: with rule {ma:8.1f} us   without {mb:8.1f} us   ratio {ma / mb:.3f}")
    return {"with_rule_us": ma, "without_us": mb, "ratio": ma / mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = seed(create_tenant(tmp, "bench"), args.records, args.users)

        async def run() -> None:
            plain = application(store, POST)
            owned = application(store, dataclasses.replace(POST, rules=owner_rules(owner_scope)))
            mixed = application(store, dataclasses.replace(POST, rules=owner_rules(public_or_owner_scope)))
            me = {"uid": 7}
            print(f"{args.records} posts, {args.users} users ({args.records // args.users} posts each)")
            compare(
                "list limit 20, owner rule vs ?author_id=",
                (owned, "/api/blog-post?limit=20", None, me),
                (plain, "/api/blog-post?author_id=7&limit=20", None, {}),
                args.rounds,
                args.seconds,
            )
            compare(
                "list limit 20, owner rule vs ?author_id=, sort=-score",
                (owned, "/api/blog-post?limit=20&sort=-score", None, me),
                (plain, "/api/blog-post?author_id=7&limit=20&sort=-score", None, {}),
                args.rounds,
                args.seconds,
            )
            compare(
                "list limit 20, published-or-owner (row test) vs ?author_id=",
                (mixed, "/api/blog-post?limit=20", None, me),
                (plain, "/api/blog-post?author_id=7&limit=20", None, {}),
                max(1, args.rounds // 3),
                args.seconds,
            )
            compare(
                "GET one record, owner rule vs no rules",
                (owned, "/api/blog-post/7", "7", me),
                (plain, "/api/blog-post/7", "7", {}),
                args.rounds,
                args.seconds,
            )

        asyncio.run(run())
        store.close()


if __name__ == "__main__":
    main()
