"""Where a read replica's group of frames ends (dbsvc/replica/groups.py G1): at a bound
(BATCH frames, BATCH_BYTES bytes) or when the stream has nothing ready, never where one
read of the socket happened to end. A group that ends early costs the replica an fsync it
waits for before reading on (a group that is not full is not pipelined, G3), so a stream
cut by its reads into groups of 512 and ~490 waited on every second fsync
(bench/README.md, "A replica's groups end at a bound, not at a read").

Over a real loopback socket: test_replica_ws_frames.py's server sends the stream in the
pieces a test chooses, each piece delivered (in the client's kernel) before the test goes
on, the second held until the test lets it go; `read_group` reads through the real
blocking client (dbsvc/http/ws/client.py rule C3).
"""

from __future__ import annotations

import struct
import threading
import time
import zlib

from replica.test_replica_ws_frames import Server, frame

from dbsvc.http.ws.client import open_websocket
from dbsvc.replica.groups import BATCH, read_group

HEADER = struct.Struct(">QII")  # a log frame's header: offset, crc32 of the payload, length
LIMIT = 1 << 20


def log_frame(offset: int, size: int = 8) -> bytes:
    payload = bytes([offset % 251]) * size
    return HEADER.pack(offset, zlib.crc32(payload), len(payload)) + payload


def wait_for(what: str, test) -> None:
    deadline = time.monotonic() + 5
    while not test():
        assert time.monotonic() < deadline, f"not {what} within 5 s"
        time.sleep(0.001)


def test_a_group_goes_on_past_the_end_of_a_read_while_frames_are_waiting():
    count = BATCH + 88  # more than a group; the first read takes about half of them
    frames = [log_frame(n) for n in range(1, count + 1)]
    wire = [frame(f) for f in frames]
    half = count // 2
    server = Server([b"".join(wire[:half]), b"".join(wire[half:])])
    server.hold = threading.Event()
    try:
        with open_websocket(f"ws://127.0.0.1:{server.port}/replicate", timeout=10) as ws:
            assert ws.receive(timeout=10) == frames[0]  # the client's read took the first half
            server.hold.set()
            assert server.sent.wait(5) and server.pieces_sent == [0, 1]  # the second half waits in the socket
            group, full = read_group(ws, 2, LIMIT, 0)
            # Before: the group ended with the read, at frame `half`, not full, so not pipelined.
            assert (len(group), full) == (BATCH, True)
            assert group == frames[1 : BATCH + 1]
            rest, full = read_group(ws, BATCH + 2, LIMIT, 0)
            assert (rest, full) == (frames[BATCH + 1 :], False)
    finally:
        server.close()


def test_a_stream_cut_at_every_byte_gives_every_frame_once_in_order():
    frames = [log_frame(n, size) for n, size in ((1, 3), (2, 0), (3, 130))]  # 7-bit and 16-bit lengths
    stream = b"".join(frame(f) for f in frames)
    ends = []  # where each whole websocket frame ends in the stream
    for f in frames:
        ends.append((ends[-1] if ends else 0) + len(frame(f)))
    for cut in range(1, len(stream)):
        server = Server([stream[:cut], stream[cut:]])
        server.hold = threading.Event()
        try:
            with open_websocket(f"ws://127.0.0.1:{server.port}/replicate", timeout=10) as ws:
                wait_for("sent", lambda: server.pieces_sent == [0])
                first, full = read_group(ws, 1, LIMIT, 0)
                whole = sum(end <= cut for end in ends)
                assert (first, full) == (frames[:whole], False), f"cut at byte {cut}"
                server.hold.set()
                assert server.sent.wait(5)
                second, full = read_group(ws, 1 + whole, LIMIT, 0)
                assert (second, full) == (frames[whole:], False), f"cut at byte {cut}"
        finally:
            server.close()
