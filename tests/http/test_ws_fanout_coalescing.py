"""Fan-out coalescing (hub.py rule 10, output.py rule 6): while WebSocket flush passes are
heavy, the frames of several turns leave each socket in one write; HTTP output never waits.

Sans-IO of the transport: a recording transport stands in for asyncio's socket transport
(the hub and the outbox are the real ones, on a real event loop)."""

from __future__ import annotations

import asyncio
import time

from dbsvc.http.hub import BULK_HOLD_MAX, Hub
from dbsvc.http.output import Outbox
from dbsvc.http.types import HttpSettings


class Recording:
    """A transport that records each write; `cost` seconds of CPU per write. CPU time, as the
    hub measures a pass: a busy wait on the wall clock is shorter in CPU when the machine is
    loaded, and the pass then looks light (the test failed that way under a load of 12)."""

    def __init__(self, cost: float = 0.0) -> None:
        self.writes: list[bytes] = []
        self.cost = cost

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        until = time.thread_time() + self.cost
        while time.thread_time() < until:
            pass

    def get_write_buffer_size(self) -> int:
        return 0


async def _app(request):  # never called: no request is served here
    raise AssertionError("unused")


def _outbox(hub: Hub, bulk: bool, cost: float = 0.0) -> tuple[Outbox, Recording]:
    out = Outbox(hub.defer)
    out.transport = transport = Recording(cost)
    out.bulk = bulk
    return out, transport


async def _until(predicate, limit: float = 2.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "not flushed in time"
        await asyncio.sleep(0.001)


def test_after_a_heavy_pass_the_frames_of_several_turns_leave_in_one_write():
    async def body():
        loop = asyncio.get_running_loop()
        hub = Hub(_app, HttpSettings(port=0), loop)
        # The pass costs 45 ms of CPU, so the next is held about as long (BULK_HOLD_MAX is
        # 50 ms): long enough that a preempted test still writes e3 within the hold.
        slow, slow_t = _outbox(hub, True, cost=0.045)
        fast, fast_t = _outbox(hub, True)
        for out in (slow, fast):
            out.write_later(b"e1")
        await _until(lambda: len(fast_t.writes) == 1)  # the first pass: at the turn's end
        for out in (slow, fast):
            out.write_later(b"e2")
        await asyncio.sleep(0)  # another turn: another event
        for out in (slow, fast):
            out.write_later(b"e3")
        await _until(lambda: len(fast_t.writes) == 2)
        assert fast_t.writes == [b"e1", b"e2e3"]
        assert slow_t.writes == [b"e1", b"e2e3"]

    asyncio.run(body())


def test_after_a_light_pass_the_next_runs_at_the_turn_end():
    async def body():
        loop = asyncio.get_running_loop()
        hub = Hub(_app, HttpSettings(port=0), loop)
        out, transport = _outbox(hub, True)
        out.write_later(b"e1")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert transport.writes == [b"e1"]
        out.write_later(b"e2")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert transport.writes == [b"e1", b"e2"]

    asyncio.run(body())


def test_http_output_is_never_held_and_the_hold_is_bounded():
    async def body():
        loop = asyncio.get_running_loop()
        hub = Hub(_app, HttpSettings(port=0), loop)
        heavy, _heavy_t = _outbox(hub, True, cost=0.2)  # a pass far over BULK_HOLD_MAX
        heavy.write_later(b"e1")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        http, http_t = _outbox(hub, False)
        ws, ws_t = _outbox(hub, True)
        started = loop.time()
        http.write_later(b"HTTP/1.1 200 OK\r\n\r\n")
        ws.write_later(b"e2")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert http_t.writes == [b"HTTP/1.1 200 OK\r\n\r\n"]  # the response: at the turn's end
        assert ws_t.writes == []  # the frame: held
        await _until(lambda: ws_t.writes == [b"e2"])
        assert loop.time() - started < BULK_HOLD_MAX + 0.1  # at most BULK_HOLD_MAX (slack for a loaded box)

    asyncio.run(body())
