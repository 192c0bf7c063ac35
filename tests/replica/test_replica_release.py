"""A `/replicate` reader streaming the old log while the server compacts online gets every
frame intact: the compaction frees the old files in pieces only when nobody else has them
open (storage/freeing.py rule 2), and this reader's descriptor is open on the old log.

A real server on a loopback port, a real socket that stops reading (so that the server's
replay waits in the middle of the log, its descriptor open), and a log seeded just under
the 64 MiB compaction size with 1 MiB records, so that two writes over HTTP start the
compaction."""

from __future__ import annotations

import json
import socket
import struct
import time
import zlib

import pytest

from dbsvc.storage.recovery import AUTO_COMPACT_BYTES
from dbsvc.storage.tenants import create_tenant
from support.storage import ROOT, open_store, run, user
from support.wskit import raw_websocket

BIG = 1 << 20
DEADLINE = 60.0


def _seed(data_dir) -> list[dict]:
    """Users of a 1 MiB profile each until one more would take the log past the compaction size."""
    s = open_store(create_tenant(str(data_dir), "default"), sync="off")
    written: list[dict] = []

    async def fill() -> None:
        while s.stats()["log_bytes"] + BIG < AUTO_COMPACT_BYTES:
            rec = user(len(written) + 1, profile="p" * BIG)
            await s.insert("User", rec)
            written.append(rec)

    try:
        run(fill())
    finally:
        s.close()
    return written


class Stream:
    """The binary messages of a `raw_websocket`, parsed as they arrive (RFC 6455 5.2; a
    server's frames are unmasked); pings and pongs skipped."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = bytearray()
        self.messages: list[bytes] = []

    def _parse(self) -> None:
        data = self.data
        while len(data) >= 2:
            opcode, n, i = data[0] & 0x0F, data[1] & 0x7F, 2
            if n == 126:
                n, i = int.from_bytes(data[2:4], "big"), 4
            elif n == 127:
                n, i = int.from_bytes(data[2:10], "big"), 10
            if len(data) < i + n:
                return
            if opcode not in (9, 10):  # ping, pong (RFC 6455 5.5.2): the server's keepalive
                assert opcode == 2, (opcode, bytes(data[i : i + n][:200]))  # binary: one log frame each
                self.messages.append(bytes(data[i : i + n]))
            del data[: i + n]

    def read_until(self, count: int) -> None:
        deadline = time.monotonic() + DEADLINE
        while len(self.messages) < count:
            assert time.monotonic() < deadline, f"the stream stopped after {len(self.messages)} messages"
            chunk = self.sock.recv(1 << 20)
            assert chunk, "the server closed the stream"
            self.data += chunk
            self._parse()


def _log_frames(messages: list[bytes]) -> list[tuple[int, dict]]:
    """(offset, event) of each `/replicate` message, each frame's CRC checked (storage/logfile.py)."""
    out = []
    for payload in messages:
        offset, crc, length = struct.unpack_from(">QII", payload)
        body = payload[16 : 16 + length]
        assert len(body) == length and zlib.crc32(body) == crc, f"frame {offset} damaged"
        out.append((offset, json.loads(body)))
    return out


@pytest.mark.slow  # 20-25 s at load 15: a 64 MiB log written, compacted online, read
def test_a_reader_streaming_the_old_log_across_a_compaction_gets_every_frame_intact(serve, tmp_path):
    data_dir = tmp_path / "data"
    written = _seed(data_dir)
    # 2 MiB retained: the last frames of the old log only. The frames the reader has not
    # read yet are in the old log and nowhere else, so a reader whose file was cut could
    # not get them again (it would be closed as lagged: offset gone).
    schema = tmp_path / "blog.dbs"
    text = (ROOT / "schemas" / "blog.dbs").read_text()
    schema.write_text(text.replace("replication = true", "replication = true\nreplication_retain_mb = 2", 1))
    server = serve(schema, data_dir=data_dir)
    sock = raw_websocket(server.port, "/replicate?after=0", rcvbuf=64 << 10)
    try:
        stream = Stream(sock)
        stream.read_until(2)
        # The socket is not read now: the server's replay waits inside the old log.
        for _ in range(2):
            rec = user(len(written) + 1, profile="q" * (BIG * 6 // 10))
            reply = server.request("POST", "/api/user", rec)
            assert reply.status == 201, reply
            written.append(rec)
        deadline = time.monotonic() + DEADLINE
        while not any("compacted online" in line for line in server.log):
            assert time.monotonic() < deadline, "no compaction"
            time.sleep(0.05)
        stream.read_until(len(written))
    finally:
        sock.close()
    frames = _log_frames(stream.messages)
    assert [offset for offset, _event in frames] == list(range(1, len(written) + 1))
    assert [event["record"]["id"] for _offset, event in frames] == [rec["id"] for rec in written]
    assert [event["record"]["profile"] for _offset, event in frames] == [rec["profile"] for rec in written]
