"""A fixed yardstick with none of dbsvc's code: asyncio + h11 answering a canned 53-byte body.

`bench/service_bench.py` loads it beside the service and states every figure as a ratio to
its requests/s. Unlike `canned_server.py` (the same body through `dbsvc.http`), nothing we
change in this repository makes it faster or slower, so the ratios stay comparable across
changes to the protocol layer. It is the smallest correct keep-alive loop over h11 (the
shape of h11's examples/trio-server.py on an `asyncio.Protocol`): feed bytes, pull events,
answer each complete request, `start_next_cycle()`; close on an error or on `MUST_CLOSE`.

    python bench/bare_h11_server.py [--port 0] [--host 127.0.0.1]

prints `PORT <n>` on stdout once listening; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import h11

BODY = b'{"id":1,"title":"hello","published":true,"score":3.5}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]


class BareH11(asyncio.Protocol):
    def __init__(self) -> None:
        self.conn = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        conn, transport = self.conn, self.transport
        assert transport is not None
        conn.receive_data(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                transport.close()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if type(event) is h11.ConnectionClosed:
                transport.close()
                return
            if type(event) is h11.EndOfMessage:
                transport.write(
                    conn.send(h11.Response(status_code=200, headers=HEADERS))
                    + conn.send(h11.Data(data=BODY))
                    + conn.send(h11.EndOfMessage())
                )
                if conn.our_state is h11.MUST_CLOSE:
                    transport.close()
                    return
                conn.start_next_cycle()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(BareH11, host, port, reuse_address=True, backlog=4096)
    sys.stdout.write(f"PORT {server.sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="canned-response server on bare asyncio + h11")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
