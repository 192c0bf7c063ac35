"""The intake of one request body: its size limit, its pace, its share of the body memory.

Job: a `BodyIntake` per connection collects the body of the current request as the wire
hands it over, and says at the head and after every piece whether the body may go on and
until when; the connection answers a refusal and closes (connection.py rules 4, 5, 11).
No transport and no parser here: the only I/O-side thing read is the loop's clock.
Imports errors.py, and the hub and the head as types only; nothing of connection.py, h11 or
wsproto.

Rules:
1. A head with both Content-Length and Transfer-Encoding is refused (400) before anything
   else (RFC 9112 §6.3 item 3, connection.py rule 4): where its body ends is ambiguous.
2. A declared Content-Length over `max_body` is refused at the head (413), before any body
   byte is read; a body without one (chunked) is refused (413) at the piece that takes it
   over `max_body`.
3. All unfinished bodies of one server together hold at most `body_memory` bytes
   (`Hub.body_bytes` counts them): a declared length that does not fit in what is left, or
   a piece that takes the total over, is refused 503 `unavailable` with `Retry-After: 1`.
   Rule 2 is checked first: a body that could never be taken is 413, not "retry later".
4. Every byte counted in `Hub.body_bytes` is given back once: when the body goes to the
   application (`take_body`) or when it is dropped (`drop`: a refusal, a timeout, a crash,
   a lost connection).
5. A body must keep coming. Its deadline (`give_up_at`) is the earlier of `idle_timeout`
   after its last byte and, when `min_body_rate` is on, the moment its average rate since
   the head falls under that rate once `body_rate_grace` has passed (Kestrel's
   MinRequestBodyDataRate: 240 bytes/s after 5 s), so a byte every few seconds cannot hold
   a connection. Before the first byte it is `Hub.body_wait` after the head: the earlier of
   `idle_timeout` and the grace. Past it the client gets 408 (`timeout_error`).
6. The body grows in one buffer: the first piece is kept as the wire handed it over (a
   buffer of its own), later pieces are appended to one bytearray, not kept as a list.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dbsvc.errors import BadRequest, PayloadTooLarge, RequestError, RequestTimeout, Unavailable

if TYPE_CHECKING:
    from dbsvc.http.hub import Hub
    from dbsvc.http.message import Head

__all__ = ["BodyIntake"]


class BodyIntake:
    """The body of one connection's current request, counted in its hub's body memory."""

    __slots__ = ("_hub", "_body", "size", "started", "give_up_at")

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._body: bytes | bytearray = b""
        self.size = 0  # bytes received, counted in hub.body_bytes (rule 4)
        self.started = 0.0  # the loop's time when the head was read
        self.give_up_at = math.inf  # rule 5

    def refusal_of(self, head: Head) -> RequestError | None:
        """Rules 1, 2 and 3 for the body `head` announces: the error to answer, or None."""
        declared = head.content_length
        if declared is None:
            return None
        if head.chunked:
            return BadRequest("request has both content-length and transfer-encoding")
        hub = self._hub
        max_body = hub.settings.max_body
        if declared > max_body:
            return PayloadTooLarge(
                f"request body of {declared} bytes is over the limit of {max_body} bytes", limit=max_body
            )
        if declared > hub.body_memory - hub.body_bytes:
            return self._memory_full(declared)
        return None

    def begin(self) -> None:
        """The head was read and accepted: the body's clock starts (rule 5)."""
        now = self._hub.clock()
        self.started = now
        self.give_up_at = now + self._hub.body_wait

    def take(self, data: bytes) -> RequestError | None:
        """Add a piece of the body; the error that refuses it (rules 2, 3), or None and
        `give_up_at` moved on (rule 5)."""
        hub = self._hub
        size = self.size + len(data)
        max_body = hub.settings.max_body
        if size > max_body:
            return PayloadTooLarge(f"request body is over the limit of {max_body} bytes", limit=max_body)
        hub.body_bytes += len(data)
        self.size = size
        if hub.body_bytes > hub.body_memory:
            return self._memory_full(size)
        body = self._body
        if not body:
            self._body = data  # rule 6: the wire's own fresh buffer
        else:
            if type(body) is not bytearray:
                body = self._body = bytearray(body)
            body += data
        now = hub.clock()
        deadline = now + hub.idle_timeout
        rate = hub.settings.min_body_rate
        if rate:
            by_rate = self.started + max(hub.settings.body_rate_grace, size / rate)
            if by_rate < deadline:
                deadline = by_rate
        self.give_up_at = deadline
        return None

    def take_body(self) -> bytes | bytearray:
        """The whole body, for the application; its bytes leave the hub's count (rule 4)."""
        body = self._body
        self.drop()
        return body

    def drop(self) -> None:
        """Forget the body, and give its bytes back to the hub's count (rule 4)."""
        if self.size:
            self._hub.body_bytes -= self.size
            self.size = 0
        self._body = b""

    def timeout_error(self) -> RequestTimeout:
        """The 408 for a body past `give_up_at` (rule 5)."""
        return RequestTimeout(
            f"request body too slow: {self.size} bytes received in {self._hub.clock() - self.started:.1f} s"
        )

    def _memory_full(self, size: int) -> Unavailable:
        hub = self._hub
        error = Unavailable(
            f"request bodies being received hold {hub.body_bytes} bytes; a body of {size} bytes "
            f"would pass the limit of {hub.body_memory} bytes: retry later"
        )
        error.headers = [("Retry-After", "1")]
        return error
