"""Child of the fsync audit: tenant create, concurrent durable creates, compaction, reopen.

Writes a marker to fd 1 with a raw os.write after every acknowledgement (`ACK`) and at every
phase boundary (`PHASE name`), so the strace log shows where acknowledgements happen.
"""

from __future__ import annotations

import asyncio
import os
import sys

# Run by path as a child process: tests/ on sys.path for the shared kit, `support`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.storage import open_store, post, user


def mark(text: str) -> None:
    os.write(1, (text + "\n").encode())


async def writes(store, base: int) -> None:
    async def one(i: int) -> None:
        await store.insert("User", user(base + i))
        mark("ACK")

    await asyncio.gather(*(one(i) for i in range(20)))
    await store.insert("BlogPost", post(None, author=base))
    mark("ACK")
    await store.delete("User", base + 19)
    mark("ACK")


def main() -> None:
    data = sys.argv[1]
    mark("PHASE create")
    tenant = create_tenant(data, "audit")
    mark("PHASE open")
    store = open_store(tenant)
    mark("PHASE write")
    asyncio.run(writes(store, 1))
    store.close()
    mark("PHASE compact")
    compact_tenant(data, "audit")
    mark("PHASE reopen")
    store = open_store(tenant)
    asyncio.run(writes(store, 100))
    store.close()
    mark("PHASE done")


main()
