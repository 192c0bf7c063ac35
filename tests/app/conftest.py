"""Fixtures over `support.server`: servers started per test or per module, killed afterwards.
(`stores`, blog stores opened in process and closed when the test ends, is every folder's:
tests/support/store_fixtures.py.)"""

from __future__ import annotations

import pytest

from support.server import ROOT, server_pool, start_server


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
