"""Child process of the crash tests: concurrent writers on one Store, one line per ack.

    python crash_child.py TENANT_DIR SEED [WRITERS]

Prints `READY <head>` once open, then for every acknowledged write one JSON line
`{"kind", "model", "id", "record"}` (flushed before the next write starts). Runs until killed.
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

# Run by path as a child process: tests/ on sys.path for the shared kit, `support`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


async def writer(store, rnd: random.Random) -> None:
    users = store.tables["User"].records
    posts = store.tables["BlogPost"].records
    while True:
        op = rnd.random()
        try:
            if op < 0.25 or not users:
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
