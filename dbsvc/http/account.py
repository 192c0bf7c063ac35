"""What the protocol layer records of each response it sends: the span log line and the
route's request meter (dbsvc/metrics.py, through the `Meter` protocol of types.py).

`account` is called once per response by the connection (connection.py), with the seconds
since the request's head was parsed (the connection reads the clock, both times). The span is written only when the span logger is on; the
meter always counts: the request's own (the application set it once it knew the route),
else the hub's meter of unmatched requests, else nothing (a server with no meters).
Imports logs and types; nothing of the connection, the server or the application.
"""

from __future__ import annotations

from typing import Any

from dbsvc.http.types import Meter
from dbsvc.logs import log_request


def account(
    span: bool, unmatched: Meter | None, request: Any, status: int, size: int, request_id: str, seconds: float
) -> None:
    """Log the span (when `span`) and count the response on its meter (module docstring)."""
    if request is None:  # refused before a request existed
        if span:
            log_request("-", "-", status, 0.0, size, request_id)
        if unmatched is not None:
            unmatched.observe("OTHER", status, 0.0)
        return
    if span:
        log_request(request.method, request.path, status, seconds * 1000.0, size, request.request_id)
    meter = request.meter or unmatched
    if meter is not None:
        meter.observe(request.method, status, seconds)
