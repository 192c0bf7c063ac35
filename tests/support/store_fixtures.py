"""The `stores` fixture, for every test folder (tests/conftest.py loads this as a plugin).

Factory: stores(directory, **kw) -> a blog `Store` (support.storage `open_store`), or with
`module=` a compiled schema's (its MODELS and DESCRIPTION), closed when the test ends, passed
or failed. A test that closed its store as its last line left it open
(its lock, its committer thread, a compaction thread) whenever an assertion before failed,
and the next test in the worker ran beside it; a test that never closed it left it to the
garbage collector. A test may still close a store itself, to reopen its tenant or to look at
its files: a second close of a closed store does nothing (storage/store.py `close`).
After the closes, the stores are let go (`release`): one frozen with the heap by a later
open in its test is unfrozen and collected, so no store outlives its test.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def stores() -> Iterator[Any]:
    from dbsvc.storage import Store  # imported on use: collecting a test file opens nothing
    from support.storage import open_store

    opened: list[Any] = []

    def open_(directory: str, module: Any = None, **kw: Any) -> Any:
        store = (
            open_store(directory, **kw)
            if module is None
            else Store.open(directory, module.MODELS, module.DESCRIPTION, **kw)
        )
        opened.append(store)
        return store

    yield open_
    for store in reversed(opened):
        store.close()
    release(opened)


def release(opened: list[Any]) -> None:
    """Let the closed stores go. Closing leaves a store's cycles (its commit queue) to the
    collector; a store that was alive when another open or a compaction froze the heap
    (recovery.py, compactor.py: gc.freeze) sits in the permanent generation, which no
    collection looks at, for the rest of the worker's life: a test that reopened its
    tenant, or loaded it beside its store (the recovery tests), left every store of it
    there. So: collect, and if one of them is still alive, it is frozen: unfreeze and
    collect again (a full collection, paid only by those tests)."""
    gone = [weakref.ref(store) for store in opened]
    opened.clear()
    gc.collect()
    if any(ref() is not None for ref in gone):
        gc.unfreeze()
        gc.collect()
