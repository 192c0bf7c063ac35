"""Raw bytes -> one HTTP connection of the real protocol layer serving the demo app
(tests/support/demo_app.py: echo, coroutine, Deferred, error and upgrade routes), with CORS on.

The promises checked are `fuzz.wire`'s (nothing escapes the connection, one response per
request, well-formed responses, the connection closes). Besides: a 500 only ever answers
a route of the demo app that fails on purpose. The demo app's waits and sizes come from
the query string; they are capped here so one input cannot sleep or allocate without bound.
"""

from __future__ import annotations

import sys

from dbsvc.http.types import AppResult, HttpSettings, Request
from fuzz.common import ROOT
from fuzz.wire import Wire, check_exchange

sys.path.insert(0, str(ROOT / "tests" / "support"))
import demo_app  # noqa: E402

MAX_INPUT = 64 * 1024
# Routes that answer 500 by design, or when their parameter or body is not what they parse.
FAILING_ROUTES = frozenset(
    {
        "/error",
        "/async-error",
        "/none",
        "/bad-header",
        "/deferred-error",
        "/slow",
        "/deferred",
        "/big",
        "/echo-error",
        "/unrenderable",
        "/bad-body",
        "/bad-status",
    }
)
_CAPS = {"/slow": 20, "/deferred": 20, "/big": 100_000}


def _bounded(value: str, cap: int) -> str:
    try:
        number = int(value)
    except ValueError:
        return value  # the demo app's own 500
    return str(max(0, min(number, cap)))


class BoundedDemo:
    """The demo app with its waits and sizes capped; remembers the paths it was asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, request: Request) -> AppResult:
        self.paths.append(request.path)
        cap = _CAPS.get(request.path)
        if cap is not None:
            request.query = [(name, _bounded(value, cap)) for name, value in request.query]
        return demo_app.app(request)


APP = BoundedDemo()
SETTINGS = HttpSettings(max_body=4096, cors_origins=("https://app.example",), ws_close_timeout=0.5)
WIRE = Wire(APP, SETTINGS)


def TestOneInput(data: bytes) -> None:
    if len(data) > MAX_INPUT:
        return
    APP.paths = []
    exchange = WIRE.exchange(data)
    answers = check_exchange(WIRE, exchange)
    if any(answer.status == 500 for answer in answers):
        assert any(path in FAILING_ROUTES or path.startswith("/leaky-error") for path in APP.paths), (
            APP.paths,
            exchange.received[:500],
        )
