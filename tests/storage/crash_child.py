"""Child process of the crash tests: concurrent writers on one Store, one line per ack.

    python crash_child.py TENANT_DIR SEED [WRITERS]

Prints `READY <head>` once open, then for every acknowledged write one JSON line
`{"kind", "model", "id", "record"}` (flushed before the next write starts); about one write
in seven is a batch (`Store.begin_batch`) of 2 to 5 rows, one line per row once it is durable. Runs until killed.
The store's frames hold at most LIMIT bytes (test_storage_crash.py checks the log against
it); some posts are near the record limit, a few over it, and those are refused
(`PayloadTooLarge`, nothing written, nothing printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

# Run by path as a child process: tests/ on sys.path for the shared kit, `support`, and this
# checkout's root before it, so `dbsvc` is this checkout's, not an installed one.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(TESTS), TESTS]

from dbsvc.errors import ForeignKeyViolation, NotFound, PayloadTooLarge, Referenced, UniqueViolation
from dbsvc.storage.events import record_limit
from support.storage import open_store, post, user

LIMIT = 16384  # max_payload: the same value as test_storage_crash.py's
RECORD = record_limit(LIMIT)


def body(rnd: random.Random) -> str:
    """A post's body: mostly short, one in eight near the record limit (under or over)."""
    if rnd.random() < 0.125:
        return "b" * (RECORD - 120 + rnd.randrange(-60, 40))
    return "body"


def emit(kind: str, model: str, id_, record) -> None:
    sys.stdout.write(json.dumps({"kind": kind, "model": model, "id": id_, "record": record}) + "\n")
    sys.stdout.flush()


async def write_batch(store, rnd: random.Random, posts) -> None:
    """A batch (storage/batchwrite.py): a user, one to three posts of theirs, perhaps a
    replaced post; acknowledged, one line per row, once the whole batch is durable."""
    batch = store.begin_batch()
    rows = []
    try:
        u = batch.insert("User", user(None, email=f"e{rnd.randrange(400)}@x", name=f"n{rnd.randrange(99)}"))
        rows.append(("insert", "User", u["id"], u))
        for _ in range(rnd.randint(1, 3)):
            p = batch.insert("BlogPost", post(None, author=u["id"], title="b" * rnd.randrange(1, 300), body=body(rnd)))
            rows.append(("insert", "BlogPost", p["id"], p))
        if rnd.random() < 0.5:
            pid = rnd.choice(list(posts))
            _prev, r = batch.replace("BlogPost", pid, post(pid, author=u["id"], title=f"r{rnd.random()}"))
            rows.append(("update", "BlogPost", pid, r))
    except BaseException:
        batch.abort()
        raise
    await batch.commit()
    for row in rows:
        emit(*row)


async def writer(store, rnd: random.Random) -> None:
    users = store.tables["User"].records
    posts = store.tables["BlogPost"].records
    while True:
        op = rnd.random()
        try:
            if rnd.random() < 0.15:
                await write_batch(store, rnd, posts)
            elif op < 0.25 or not users:
                email = f"e{rnd.randrange(400)}@x"
                rec = await store.insert("User", user(None, email=email, name=f"n{rnd.randrange(99)}"))
                emit("insert", "User", rec["id"], rec)
            elif op < 0.65:
                author = rnd.choice(list(users))
                rec = await store.insert(
                    "BlogPost",
                    post(
                        None,
                        author=author,
                        title="t" * rnd.randrange(1, 300),
                        score=float(rnd.randrange(10)),
                        body=body(rnd),
                    ),
                )
                emit("insert", "BlogPost", rec["id"], rec)
            elif op < 0.8 and posts:
                pid = rnd.choice(list(posts))
                author = rnd.choice(list(users))
                _prev, rec = await store.replace(
                    "BlogPost", pid, post(pid, author=author, title=f"r{rnd.random()}", body=body(rnd))
                )
                emit("update", "BlogPost", pid, rec)
            elif op < 0.95 and posts:
                pid = rnd.choice(list(posts))
                rec = await store.delete("BlogPost", pid)
                emit("delete", "BlogPost", pid, rec)
            else:
                uid = rnd.choice(list(users))
                rec = await store.delete("User", uid)
                emit("delete", "User", uid, rec)
        except (UniqueViolation, ForeignKeyViolation, NotFound, Referenced, PayloadTooLarge):
            await asyncio.sleep(0)


async def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    writers = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    store = open_store(directory, max_payload=LIMIT)
    print(f"READY {store.head_offset}", flush=True)
    await asyncio.gather(*(writer(store, random.Random(seed * 100 + i)) for i in range(writers)))


if __name__ == "__main__":
    asyncio.run(main())
