"""Server-to-client WebSocket frames, built once and shared by every receiver (RFC 6455 §5.2).

A server's frames are never masked (RFC 6455 §5.1), so the wire bytes of a message do not
depend on the socket: a change-feed event going to a thousand subscribers is framed once
and the same `bytes` object is written to every transport. Only unfragmented data frames
are built here (FIN set, RSV bits clear: no extension is ever negotiated); control frames
(ping, pong, close) and everything a client sends go through wsproto in `ws/server.py`.

Layout of the header::

    byte 0:  FIN (0x80) | opcode (0x1 text, 0x2 binary)
    byte 1:  payload length 0..125, or 126 (16-bit length follows), or 127 (64-bit follows)
    then:    the extended length, big-endian, then the payload

Imports nothing from dbsvc; no wsproto, so the realtime layer may use it.
"""

from __future__ import annotations

import struct

_TEXT = 0x81
_BINARY = 0x82
_U16 = struct.Struct("!BBH")
_U64 = struct.Struct("!BBQ")


def _frame(first: int, payload: bytes | memoryview) -> bytes:
    n = len(payload)
    if n < 126:
        return bytes((first, n)) + payload
    if n < 65536:
        return _U16.pack(first, 126, n) + payload
    return _U64.pack(first, 127, n) + payload


def text_frame(payload: bytes | memoryview) -> bytes:
    """A complete text frame carrying `payload` (UTF-8 bytes, not checked here)."""
    return _frame(_TEXT, payload)


def binary_frame(payload: bytes) -> bytes:
    """A complete binary frame carrying `payload`."""
    return _frame(_BINARY, payload)
