"""Fixtures for the `dbsvc replicate` tests: real servers (tests/app/app_harness.py) and the
consumer as a subprocess, every wait bounded."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "app"))

from app_harness import server_pool  # noqa: E402


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema=..., env={...}, data_dir=...) -> Server, killed after the test."""
    with server_pool(tmp_path / "data") as pool:
        yield pool
