"""WebSocket input per turn of the loop and the control-frame bound (dbsvc/http/ws/server.py
rule 10), on a `WebSocketConnection` over an in-memory transport (the kernel's side of a
socket, not a layer of ours), then one end-to-end flood through a real server."""

from __future__ import annotations

import asyncio
import os
import struct

from dbsvc.http.output import Outbox
from dbsvc.http.types import HttpSettings, Request, Upgrade
from dbsvc.http.ws.server import CONTROL_BURST, EVENT_BUDGET, FEED_SIZE, TURN_BYTES, WebSocketConnection
from support.wskit import raw_websocket


class MemoryTransport:
    """What asyncio's transport offers a protocol: writes kept, pauses counted."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.buffer = 0  # bytes "not yet sent" (a slow peer)
        self.reading = True
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data
        if self.buffer:  # behind a backlog, as asyncio queues it
            self.buffer += len(data)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return self.buffer

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Counting:
    """A session that counts the messages it gets."""

    def __init__(self) -> None:
        self.messages = 0
        self.closed: int | None = None

    def on_open(self, channel) -> None:
        pass

    def on_message(self, data) -> None:
        self.messages += 1

    def on_writable(self) -> None:
        pass

    def on_close(self, code: int) -> None:
        self.closed = code


def masked(opcode: int, payload: bytes = b"") -> bytes:
    mask = os.urandom(4)
    return bytes((0x80 | opcode, 0x80 | len(payload))) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def open_socket(
    loop: asyncio.AbstractEventLoop, settings: HttpSettings | None = None
) -> tuple[WebSocketConnection, MemoryTransport, Counting]:
    settings = settings or HttpSettings()
    transport = MemoryTransport()
    out = Outbox(lambda box: loop.call_soon(box.flush))
    out.transport = transport
    session = Counting()
    request = Request("GET", "/ws", "/ws", [], [])
    return WebSocketConnection(out, loop, settings, Upgrade(session), request, b""), transport, session


def close_code(written: bytes) -> int | None:
    """The code of the first close frame the server wrote (server frames are unmasked)."""
    i = 0
    while i + 2 <= len(written):
        opcode, n = written[i] & 0x0F, written[i + 1] & 0x7F
        i += 2
        if n == 126:
            n, i = struct.unpack(">H", written[i : i + 2])[0], i + 2
        if opcode == 8:
            return struct.unpack(">H", written[i : i + 2])[0]
        i += n
    return None


def test_one_read_of_empty_text_frames_is_acted_on_a_budget_per_turn():
    async def body():
        loop = asyncio.get_running_loop()
        ws, transport, session = open_socket(loop)
        # 8,000 six-byte frames in one read: 31 budgets, and three of FEED_SIZE's pieces, so
        # the same turns and feeds as a whole 256 KiB read's 43,000 at a fifth of the CPU.
        # 43,000 (0.9 s of CPU) outlasted bench/mutation_pytest.py's 10 s bound unmutated,
        # behind the trampolines at load 25 (docs/mutation.md, session 14, wt-mpo4).
        frames = 8_000
        assert frames * 6 > 2 * FEED_SIZE and frames > 30 * EVENT_BUDGET
        ws.data_received(masked(0x1) * frames)
        assert session.messages <= EVENT_BUDGET  # the rest waits for later turns
        assert not transport.reading  # and reading is paused meanwhile
        turns = 0
        while session.messages < frames and turns < 10_000:
            await asyncio.sleep(0)
            turns += 1
        assert session.messages == frames  # nothing lost
        assert turns >= frames // EVENT_BUDGET
        await asyncio.sleep(0)
        assert transport.reading
        assert session.closed is None

    asyncio.run(body())


def test_one_read_of_large_frames_is_fed_a_byte_budget_per_turn():
    # Rule 10's other bound: 100 text frames of 2 KiB in one read are far fewer events than
    # EVENT_BUDGET, so only TURN_BYTES stops a turn (the empty frames above never reach it).
    async def body():
        loop = asyncio.get_running_loop()
        ws, transport, session = open_socket(loop)
        payload, mask = b"x" * 2048, os.urandom(4)
        frame = bytes((0x81, 0x80 | 126)) + struct.pack(">H", len(payload)) + mask
        frame += bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        ws.data_received(frame * 100)  # 205 KB: past TURN_BYTES three times
        assert 0 < session.messages <= (TURN_BYTES + FEED_SIZE) // len(payload)
        assert not transport.reading
        turns = 0
        while session.messages < 100 and turns < 1_000:
            await asyncio.sleep(0)
            turns += 1
        assert session.messages == 100 and turns >= 3
        await asyncio.sleep(0)
        assert transport.reading and session.closed is None

    asyncio.run(body())


def test_a_ping_flood_is_closed_with_1008_and_the_rest_discarded():
    async def body():
        loop = asyncio.get_running_loop()
        ws, transport, session = open_socket(loop)
        ws.data_received(masked(0x9) * 43_000)
        await asyncio.sleep(0)
        assert close_code(bytes(transport.written)) == 1008
        assert transport.closed
        assert session.closed == 1008
        pongs = bytes(transport.written).count(b"\x8a\x00")
        assert pongs <= CONTROL_BURST

    asyncio.run(body())


def test_pings_within_the_burst_are_answered_and_the_socket_stays_open():
    async def body():
        loop = asyncio.get_running_loop()
        ws, transport, session = open_socket(loop)
        ws.data_received(masked(0x9, b"hi") * (CONTROL_BURST // 2))
        await asyncio.sleep(0)
        assert bytes(transport.written).count(b"\x8a\x02hi") == CONTROL_BURST // 2
        assert not transport.closed and session.closed is None

    asyncio.run(body())


def test_a_real_ping_flood_closes_1008_and_other_requests_go_on(server):
    sock = raw_websocket(server.port, "/upgrade")
    try:
        sock.sendall(masked(0x9) * 43_000)
    except OSError:
        pass  # closed while we still wrote: fine
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    sock.close()
    assert close_code(data) == 1008
    assert server.get("/echo").status == 200


def test_a_peer_taking_its_backlog_is_alive_though_it_never_answers_a_ping():
    # ws/server.py rule 3: the ping waits behind the data queued before it; the peer's
    # progress through that data is its sign of life, and when the progress stops it is dropped.
    async def body():
        loop = asyncio.get_running_loop()
        # Intervals far above a loaded machine's scheduling gaps (two cores shared with a
        # whole suite): a 0.05 s pong timeout dropped the reader when the loop stalled.
        settings = HttpSettings(ws_ping_interval=0.25, ws_pong_timeout=0.25)
        ws, transport, session = open_socket(loop, settings)
        for _ in range(300):
            ws.send_text("x" * 1000)
        await asyncio.sleep(0)
        transport.buffer = len(transport.written)  # all of it still waiting for the peer
        until = loop.time() + 1.5  # several ping rounds
        while loop.time() < until:
            await asyncio.sleep(0.01)
            transport.buffer = max(1, transport.buffer - 800)  # the peer reads, slowly
            assert not transport.closed, "dropped while it was reading"
        until = loop.time() + 5.0  # it stops reading: dropped
        while not transport.closed and loop.time() < until:
            await asyncio.sleep(0.01)
        assert transport.closed  # aborted: connection_lost reports 1006

    asyncio.run(body())
