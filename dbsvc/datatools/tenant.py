"""Which tenant a data tool works on, and opening it locked as a server would lock it.

The tools find their tenant like `dbsvc compact` and `dbsvc serve` do, through the one
`Config` (`dbsvc.config`): `SERVICE_DATA` (default `data`) and `SERVICE_TENANT` (default
`default`), the name checked by the one tenant-name rule (a bad name is a usage error, exit
status 2). `existing_tenant` is where a missing one is refused.

`locked_snapshot` takes the tenant's writer lock (`TenantLocked`, exit 2, while a server
holds it: the tool sees exactly what is on disk and nothing changes underneath it), then
opens the store *read-only*: a read-only open truncates, renames and writes nothing
(storage/recovery.py), so a tool that only reads, or that refuses its input, leaves every
byte of the tenant as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dbsvc.errors import TenantError
from dbsvc.launch import program
from dbsvc.storage import Store
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.tenants import tenant_dir


def existing_tenant(data_dir: str, name: str) -> str:
    """The tenant's directory; `TenantError` naming `dbsvc tenant create` when it is missing."""
    path = tenant_dir(data_dir, name)
    if not os.path.isdir(path):
        raise TenantError(
            f"tenant {name!r} does not exist under {data_dir!r}: create it with `{program()} tenant create {name}`"
        )
    return path


@contextmanager
def locked_snapshot(directory: str, module: Any) -> Iterator[tuple[WriterLock, Store]]:
    """(the held writer lock, a read-only store) for the duration of the block."""
    lock = WriterLock.acquire(directory)
    try:
        store = Store.open(directory, module.MODELS, module.DESCRIPTION, readonly=True, ring_capacity=0)
        try:
            yield lock, store
        finally:
            store.close()
    finally:
        lock.release()
