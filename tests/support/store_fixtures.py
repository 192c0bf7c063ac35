"""The `stores` fixture, for every test folder (tests/conftest.py loads this as a plugin).

Factory: stores(directory, **kw) -> a blog `Store` (support.storage `open_store`), or with
`module=` a compiled schema's (its MODELS and DESCRIPTION), closed when the test ends, passed
or failed. A test that closed its store as its last line left it open
(its lock, its committer thread, a compaction thread) whenever an assertion before failed,
and the next test in the worker ran beside it; a test that never closed it left it to the
garbage collector. A test may still close a store itself, to reopen its tenant or to look at
its files: a second close of a closed store does nothing (storage/store.py `close`).
"""

from __future__ import annotations

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
