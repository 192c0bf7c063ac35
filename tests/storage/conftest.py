"""Fixtures for the storage tests: a fresh tenant directory per test."""

from __future__ import annotations

import pytest

from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG


@pytest.fixture
def tenant(tmp_path) -> str:
    return create_tenant(str(tmp_path / "data"), "t")


@pytest.fixture
def blog():
    return BLOG
