"""Logging into a string for a test's block: what dbsvc.logs writes, read back as text.

Three tests/http files (the line shapes, the escaping of what a client controls, the line
breaks every reader splits on) each wrote this same context manager; it is written once here.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

from dbsvc.logs import configure_logging


@contextlib.contextmanager
def logging_to(fmt: str = "text", spec: str = "info") -> Iterator[io.StringIO]:
    """Logging configured by `spec` (RUST_LOG's syntax) in format `fmt` into a StringIO for the
    block, then back to a quiet default, so no later test writes into a stream it never reads."""
    stream = io.StringIO()
    try:
        configure_logging(spec, fmt, stream=stream)
        yield stream
    finally:
        configure_logging("info", "text", stream=io.StringIO())
