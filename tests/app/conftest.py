"""Fixtures over `support.server`: servers started per test or per module, killed afterwards;
and `stores`, blog stores opened in process and closed when the test ends."""

from __future__ import annotations

from typing import Any

import pytest

from dbsvc.storage import Store
from support.server import ROOT, server_pool, start_server
from support.storage import open_store


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema="schemas/blog.dbs", env={...}) -> Server, stopped after the test."""
    with server_pool(tmp_path / "data") as pool:
        yield pool


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    """One blog server shared by a module's tests (each test makes its own unique rows)."""
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path_factory.mktemp("blog") / "data")
    yield server
    server.stop()


@pytest.fixture
def stores():
    """Factory: stores(directory, **kw) -> a blog `Store` (support.storage `open_store`),
    closed when the test ends, passed or failed: a test that closed its store as its last
    line left it open (its lock, its committer thread) whenever an assertion before failed,
    and a test that never closed it left it to the garbage collector."""
    opened: list[Store] = []

    def open_(directory: str, **kw: Any) -> Store:
        store = open_store(directory, **kw)
        opened.append(store)
        return store

    yield open_
    for store in reversed(opened):
        store.close()  # a second close of a store the test closed itself does nothing
