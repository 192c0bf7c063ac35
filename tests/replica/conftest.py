"""Fixtures for the `dbsvc replicate` tests: real servers (tests/support/server.py) and the
consumer as a subprocess, every wait bounded."""

from __future__ import annotations

import pytest

from support.server import server_pool


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema=..., env={...}, data_dir=...) -> Server, killed after the test."""
    with server_pool(tmp_path / "data") as pool:
        yield pool
