"""Fixtures: one shared demo server per module, and a factory for servers with their own limits.

Every server these tests start runs the HTTP parser named by DBSVC_TEST_HTTP_PARSER: the
fast path by default, h11 alone with `h11` (.ci/run runs the folder both ways). It reaches
demo_app.py through SERVICE_HTTP_PARSER in the environment the servers inherit.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from support.httpkit import DemoServer, start_demo

HTTP_PARSER = os.environ.get("DBSVC_TEST_HTTP_PARSER", "fast")
os.environ["SERVICE_HTTP_PARSER"] = HTTP_PARSER


def pytest_report_header(config):
    return f"http parser: {HTTP_PARSER} (DBSVC_TEST_HTTP_PARSER)"


@pytest.fixture(scope="module")
def server():
    demo = start_demo(["--cors", "https://app.example"])
    yield demo
    demo.cleanup()


@pytest.fixture
def make_server():
    started: list[DemoServer] = []

    def make(args: list[str] | None = None, env: dict[str, str] | None = None, *, child: bool = False) -> DemoServer:
        demo = start_demo(args, env, child=child)
        started.append(demo)
        return demo

    yield make
    for demo in started:
        demo.cleanup()


@pytest.fixture
def debug_log() -> Iterator[None]:
    """The http layer's debug lines (deadline closes, refused connections) in the servers' logs."""
    logger = logging.getLogger("dbsvc.http")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield
    logger.setLevel(level)
