"""Fixtures over `app_harness`: servers started per test or per module, killed afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from app_harness import ROOT, Server, start_server


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema="schemas/blog.dbs", env={...}) -> Server, stopped after the test."""
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


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    """One blog server shared by a module's tests (each test makes its own unique rows)."""
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path_factory.mktemp("blog") / "data")
    yield server
    server.stop()
