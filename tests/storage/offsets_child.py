"""Child process of the offset tests: writers under compaction, one line per committed row.

    python offsets_child.py TENANT_DIR SEED COMPACT_BYTES RETAIN_BYTES

Opens the store (which may compact at open), prints `READY <head> <oldest>`, then runs 8
writers over 10 users (inserts when missing, replaces, deletes) so the log keeps passing
COMPACT_BYTES and the store compacts online. Every committed row is printed from the
change stream as `C <offset> <kind> <model> <id>`, flushed, before the writer that made
it is told. Runs until killed.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

# Run by path as a child process: tests/ on sys.path for the shared kit, `support`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dbsvc.errors import NotFound, UniqueViolation
from support.storage import open_store, user


def committed(event, _frame) -> None:
    sys.stdout.write(f"C {event.offset} {event.kind.value} {event.model} {event.id}\n")
    sys.stdout.flush()


async def writer(store, rnd: random.Random) -> None:
    users = store.tables["User"].records
    while True:
        i = rnd.randrange(1, 11)
        try:
            if i not in users:
                await store.insert("User", user(i))
            elif rnd.random() < 0.1:
                await store.delete("User", i)
            else:
                await store.replace("User", i, user(i, name=f"n{rnd.randrange(10**6)}"))
        except (UniqueViolation, NotFound):
            await asyncio.sleep(0)


async def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    compact_bytes, retain_bytes = int(sys.argv[3]), int(sys.argv[4])
    store = open_store(directory, compact_bytes=compact_bytes, retain_bytes=retain_bytes)
    store.subscribe(committed)
    print(f"READY {store.head_offset} {store.oldest_offset}", flush=True)
    await asyncio.gather(*(writer(store, random.Random(seed * 100 + k)) for k in range(8)))


if __name__ == "__main__":
    asyncio.run(main())
