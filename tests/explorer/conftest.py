"""Fixtures of the explorer tests: real servers (tests/support/server.py) and, for the
browser tests, one headless Chromium driven through Selenium and Debian's chromium-driver."""

from __future__ import annotations

import pytest

from support.explorer_kit import open_driver
from support.server import server_pool


@pytest.fixture
def serve(tmp_path):
    """Factory: serve(schema=..., env={...}, data_dir=...) -> Server, killed after the test."""
    with server_pool(tmp_path / "data") as pool:
        yield pool


@pytest.fixture(scope="module")
def driver():
    """One headless Chromium per module (skips when selenium, chromium or the driver is missing)."""
    browser = open_driver()
    yield browser
    browser.quit()


@pytest.fixture
def page(driver):
    """The module's browser with a clean tab state: session storage and cookies of the
    previous test's origin gone (each test's server has its own port, hence origin)."""
    yield driver
    driver.get("about:blank")
