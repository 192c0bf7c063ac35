"""Fixtures for the storage tests: a fresh tenant directory per test."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG


@pytest.fixture
def tenant(tmp_path) -> str:
    return create_tenant(str(tmp_path / "data"), "t")


@pytest.fixture
def blog():
    return BLOG


@pytest.fixture
def scratch(tmp_path):
    """A directory in memory when there is one: the check phase's real fsyncs (open, the
    write after the restart) cost nothing there, and durability is the simulator's job."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="dbsvc-powerloss-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)
