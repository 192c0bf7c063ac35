"""Fixtures for the `dbsvc replicate` tests: real servers (tests/support/server.py), the
consumer as a subprocess, and scripted primaries (tests/support/replica_kit.py) for the
in-process consumer tests; every wait bounded."""

from __future__ import annotations

import pytest

from support.replica_kit import Primary
from support.server import server_pool


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema=..., env={...}, data_dir=...) -> Server, killed after the test."""
    with server_pool(tmp_path / "data") as pool:
        yield pool


@pytest.fixture
def primary():
    """Factory: primary(plan, **kw) -> a scripted primary on a loopback port, closed after the test."""
    made: list[Primary] = []

    def make(plan, **kw) -> Primary:
        made.append(Primary(plan, **kw))
        return made[-1]

    yield make
    for p in made:
        p.close()
