"""Fixtures for the `dbsvc replicate` tests: real servers (tests/app/app_harness.py) and the
consumer as a subprocess, every wait bounded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "app"))

from app_harness import ROOT, Server, start_server  # noqa: E402


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema=..., env={...}, data_dir=...) -> Server, killed after the test."""
    servers: list[Server] = []

    def factory(schema: str | Path = ROOT / "schemas" / "blog.dbs", env: dict | None = None,
                data_dir: Path | None = None) -> Server:
        server = start_server(schema, data_dir or tmp_path / "data", env)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)
