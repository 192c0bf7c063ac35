"""Driving the explorer page in a real browser: Selenium over Debian's chromium + chromium-driver.

`open_driver()` starts headless Chromium through `chromedriver` found on PATH (or `$CHROMEDRIVER`),
with the browser binary that tests/support/browser.py finds; it skips the calling test when selenium,
the browser or the driver is missing (`.ci/run` installs `chromium-driver`). Selenium Manager is
never asked for anything: both paths are given, so nothing is downloaded.

The page marks what it shows for tests to wait on, not to sleep: `#records[data-state]` is
`page` (a list read answered), `live` (a live query applied) or `error`; `data-url` is the API
path the page read; rows carry `data-id`, cells `data-field`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from support.browser import chromium_binary

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "img"
WAIT = 30.0  # seconds: generous, for a loaded 2-core machine
T = TypeVar("T")


def chromedriver_binary() -> str | None:
    explicit = os.environ.get("CHROMEDRIVER")
    if explicit:
        return shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
    for candidate in ("chromedriver", "/usr/lib/chromium/chromedriver"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def open_driver() -> Any:
    """A headless Chromium WebDriver (1400x900 window), or skip the test with the reason."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    browser, driver = chromium_binary(), chromedriver_binary()
    if browser is None or driver is None:
        pytest.skip("no Chromium or chromedriver found (Debian: apt-get install chromium-driver; .ci/run does it)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--password-store=basic",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(driver: Any, probe: Callable[[], T], what: str, timeout: float = WAIT) -> T:
    """Poll `probe()` until it returns something truthy; fail with the page's state and log."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as exc:  # the DOM is being replaced: ask again
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})\n{page_report(driver)}")
        time.sleep(0.05)


def page_report(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    try:
        status = driver.find_element(By.ID, "status").text
        table = driver.find_element(By.ID, "records")
        state = (table.get_attribute("data-state"), table.get_attribute("data-url"))
        log = "\n".join(str(e) for e in driver.get_log("browser"))
    except Exception as exc:
        return f"(no page state: {exc})"
    return f"status={status!r} table={state!r}\nbrowser log:\n{log}"


def open_explorer(driver: Any, port: int, fragment: str = "") -> None:
    driver.get(f"http://127.0.0.1:{port}/_/{fragment}")


def wait_for_page(driver: Any, url: str | None = None, state: str = "page") -> None:
    """Wait until the table shows an answered read (of `url`, when given)."""
    from selenium.webdriver.common.by import By

    def shown() -> bool:
        table = driver.find_element(By.ID, "records")
        return table.get_attribute("data-state") == state and (url is None or table.get_attribute("data-url") == url)

    wait_for(driver, shown, f"the table showing {url or 'a page'} ({state})")


def row_ids(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [row.get_attribute("data-id") for row in driver.find_elements(By.CSS_SELECTOR, "#records tbody tr")]


def cell(driver: Any, record_id: Any, field: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(
        By.CSS_SELECTOR, f'#records tbody tr[data-id="{record_id}"] td[data-field="{field}"]'
    ).text


def screenshot(driver: Any, name: str) -> Path:
    """Save the window as docs/img/<name>.png (the guide's pictures stay current)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
