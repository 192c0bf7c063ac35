"""An opening handshake and the frames after it -> the protocol layer's upgrade path.

Input: `header lines \\0 bytes after the head`. The request is `GET /upgrade` of the demo
app (an echo socket) with the fuzzed header lines, so the handshake check
(`websocket.handshake_headers`), the 101 through h11, the hand-over of the bytes that
arrived with the head and the WebSocket connection that reads them are all reached.

Invariants, besides `fuzz.wire`'s: the first answer is a 101 or a refusal (426 without a
version-13 handshake, 400 for a malformed one, 4xx from h11 for a malformed head); a 101
carries the Sec-WebSocket-Accept RFC 6455 §4.2.2 computes from the request's key; and
every byte the server sends after it parses as server frames for an independent client.
"""

from __future__ import annotations

import base64
import hashlib

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import CloseConnection

from fuzz.http_connection import APP, MAX_INPUT, WIRE
from fuzz.wire import check_exchange

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
REQUEST_LINE = b"GET /upgrade HTTP/1.1\r\nHost: fuzz\r\n"


def _key(head: bytes) -> bytes | None:
    """The first Sec-WebSocket-Key as the server reads it: h11 ends a header line at LF (a
    CR before it optional), and the value is stripped like any `str` (so U+0085 and
    U+00A0 go too, not only the SP and HTAB of RFC 9110's OWS)."""
    for line in head.split(b"\n"):
        name, _colon, value = line.rstrip(b"\r").partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            return value.decode("latin-1").strip().encode("latin-1")
    return None


def TestOneInput(data: bytes) -> None:
    if len(data) > MAX_INPUT:
        return
    headers, _sep, after = data.partition(b"\0")
    head = REQUEST_LINE + headers.strip(b"\r\n") + b"\r\n\r\n"
    APP.paths = []
    exchange = WIRE.exchange(head + after)
    answers = check_exchange(WIRE, exchange)
    if not answers:
        return
    first = answers[0]
    if first.status != 101:
        assert 400 <= first.status < 500, first
        return
    key = _key(head)
    assert key is not None, "101 without a Sec-WebSocket-Key"
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode("ascii")
    assert first.headers.get("sec-websocket-accept") == accept, (first.headers, key)
    frames = exchange.received.partition(b"\r\n\r\n")[2]
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(frames)
    for event in client.events():
        # A close frame the server sent moves the client out of OPEN; wsproto reports a
        # frame it cannot parse as a CloseConnection too, but leaves the state alone.
        if isinstance(event, CloseConnection):
            assert client.state is not ConnectionState.OPEN, f"bad server frames: {event.reason}"
            break
