"""Fixtures: one shared demo server per module, and a factory for servers with their own limits."""

from __future__ import annotations

import pytest
from httpkit import DemoServer, start_demo


@pytest.fixture(scope="module")
def server():
    demo = start_demo(["--cors", "https://app.example"])
    yield demo
    demo.cleanup()


@pytest.fixture
def make_server():
    started: list[DemoServer] = []

    def make(args: list[str] | None = None, env: dict[str, str] | None = None) -> DemoServer:
        demo = start_demo(args, env)
        started.append(demo)
        return demo

    yield make
    for demo in started:
        demo.cleanup()
