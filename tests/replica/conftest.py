"""Fixtures for the `dbsvc replicate` tests: real servers (tests/support/server.py), the
consumer as a subprocess, and scripted primaries (tests/support/replica_kit.py) for the
in-process consumer tests; and in-process replicas over a scripted primary
(tests/support/follower_kit.py's `Replica`) for the follower's tests; every wait bounded."""

from __future__ import annotations

from typing import Any

import pytest

from support.consumer_kit import kill_leftover_consumers
from support.replica_kit import Primary
from support.server import server_pool


@pytest.fixture(autouse=True)
def _no_consumer_left():
    """A `dbsvc replicate` subprocess a test started and left running (support/consumer_kit.py)
    is killed after it, whatever the test's outcome; nothing to do for the other tests."""
    yield
    kill_leftover_consumers()


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


@pytest.fixture
def replica(tmp_path):
    """Factory: replica(primary, directory="replica", **Follower options) -> an in-process
    replica (tests/support/follower_kit.py's `Replica`), closed after the test."""
    from support.follower_kit import Replica

    made: list[Any] = []

    def make(primary: Any, directory: str = "replica", **options: Any) -> Any:
        (tmp_path / directory).mkdir(exist_ok=True)
        node = Replica(str(tmp_path / directory), primary, **options)
        made.append(node)
        return node

    yield make
    for node in made:
        node.close()
