"""Fixtures for the storage tests: a fresh tenant directory per test."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from storage_helpers import BLOG

from dbsvc.storage.tenants import create_tenant


@pytest.fixture
def tenant(tmp_path) -> str:
    return create_tenant(str(tmp_path / "data"), "t")


@pytest.fixture
def blog():
    return BLOG
