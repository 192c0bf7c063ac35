"""Fixtures shared by the data tools' tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def data(tmp_path) -> Path:
    """The SERVICE_DATA directory of a test (tenants are created in it)."""
    return tmp_path / "data"
