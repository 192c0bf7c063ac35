"""The client side of bench/realtime_bench.py: process set-up, the minimal WebSocket client, receivers.

Pinning and the file limit; a hand-written WebSocket handshake, server frames cut from the byte
stream with the kernel's receive stamps (SO_TIMESTAMPNS), and receiver processes that hold
hundreds or thousands of sockets on one epoll loop each. Imports no dbsvc module and no other
realtime_* module: the runs (realtime_latency, realtime_scale, realtime_rules) import it.
"""

from __future__ import annotations

import array
import base64
import multiprocessing
import os
import re
import resource
import select
import socket
import struct
import time
from pathlib import Path

from http_bench import LOAD_CORE, process_cpu_seconds

# the checkout these benches belong to: its server runs unless a run is given `--code`
ROOT = Path(__file__).resolve().parent.parent
TS = re.compile(rb'"bench_ts":(\d+)')
HOST = "127.0.0.1"


# -- process set-up -----------------------------------------------------------------------


def pin(core: str) -> None:
    """Pin this process (and its future children) to `core` when there are two cores."""
    if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(core)})


def raise_nofile() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (inherited by the server we start)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- the minimal WebSocket client ---------------------------------------------------------------
#
# One process drives hundreds or thousands of sockets from a plain epoll loop: no asyncio
# (its per-read callback chain would cost more than the frame itself at 50,000 frames/s on
# the one client core), no websockets package. The handshake is written by hand, server
# frames are cut from the byte stream, pings are answered, and of a data frame only the
# `"bench_ts":<ns>` bytes are looked at (a regex over the frame, no JSON decode).
#
# Time stamps: with SO_TIMESTAMPNS the kernel stamps every incoming segment when it reaches
# the socket (on loopback: when the server's send() runs); recvmsg returns the stamp of the
# last segment read, in CLOCK_REALTIME. So each delivery has two latencies from the
# writer's time.time_ns() taken just before its send: "at the socket" (kernel stamp - send:
# the server's part, immune to the client processes queueing on their shared core) and "in
# the client" (time.time_ns() when the receiver process read it - send: what an application
# would see on this client core). Several frames in one read all get the read's stamp, the
# latest, so both err on the slow side.

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # asm-generic/socket.h (x86-64, arm64)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
ANCILLARY = socket.CMSG_SPACE(16)


def kernel_stamp(ancillary: list, fallback: int) -> int:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            seconds, nanos = struct.unpack_from("qq", data)
            return seconds * 1_000_000_000 + nanos
    return fallback


def upgrade_request(port: int, target: str, key: bytes, extra: bytes = b"") -> bytes:
    """A WebSocket opening handshake's request (RFC 6455 §4.1): `key` is the base64 nonce,
    `extra` header lines each ending in CRLF (a token)."""
    return (
        b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: %s\r\n%sSec-WebSocket-Version: 13\r\n\r\n"
        % (target.encode(), HOST.encode(), port, key, extra)
    )


def client_frame(opcode: int, payload: bytes = b"") -> bytes:
    """A masked client frame (control frames only: payload < 126 bytes)."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


CLOSE_1000 = (1000).to_bytes(2, "big")


class Feed:
    """One client socket after its handshake."""

    __slots__ = ("sock", "path", "filtered", "buf", "count", "closing", "done")

    def __init__(self, sock: socket.socket, path: str, filtered: bool, rest: bytes) -> None:
        self.sock, self.path, self.filtered = sock, path, filtered
        self.buf = bytearray(rest)
        self.count = 0
        self.closing = False
        self.done = False


class Tally:
    """What one receiver process has seen: per delivery (send ts, latency at the socket,
    latency in the client), kept apart for filtered and unfiltered sockets; close codes."""

    def __init__(self) -> None:
        self.closes: dict[int, int] = {}
        self.reset()

    def reset(self) -> None:
        self.ts = {False: array.array("q"), True: array.array("q")}
        self.kernel = {False: array.array("q"), True: array.array("q")}
        self.user = {False: array.array("q"), True: array.array("q")}


def handshake(
    port: int, paths: list[tuple], timed: bool, batch: int = 100, timeout: float = 30.0
) -> tuple[list[Feed], list[str]]:
    """Open the sockets `batch` at a time: connect and send every request of a batch, then
    read every 101. Blocking sockets with a timeout; non-blocking once open."""
    feeds: list[Feed] = []
    errors: list[str] = []
    for first in range(0, len(paths), batch):
        pending = []
        for entry in paths[first : first + batch]:
            path, filtered = entry[0], entry[1]
            extra = entry[2] if len(entry) > 2 else ""  # header lines, each ending in CRLF
            try:
                sock = socket.create_connection((HOST, port), timeout=timeout)
                if timed:
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                sock.sendall(upgrade_request(port, path, base64.b64encode(os.urandom(16)), extra.encode()))
                pending.append((sock, path, filtered))
            except OSError as exc:
                errors.append(f"{path}: {exc!r}")
        for sock, path, filtered in pending:
            try:
                data = b""
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                head, _sep, rest = data.partition(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 101"):
                    raise ConnectionError(head.split(b"\r\n", 1)[0].decode(errors="replace") or "closed")
                sock.setblocking(False)
                feeds.append(Feed(sock, path, filtered, rest))
            except (OSError, ConnectionError) as exc:
                errors.append(f"{path}: {exc!r}")
                sock.close()
    return feeds, errors


def read_frames(feed: Feed, tally: Tally, kernel_ns: int, user_ns: int, timed: bool) -> None:
    """Cut the complete frames off `feed.buf`: count data frames (and time them), answer
    pings, answer a close."""
    buf = feed.buf
    n = len(buf)
    pos = 0
    while n - pos >= 2:
        length = buf[pos + 1] & 127
        if length < 126:
            start = pos + 2
        elif length == 126:
            if n - pos < 4:
                break
            length = (buf[pos + 2] << 8) | buf[pos + 3]
            start = pos + 4
        else:
            if n - pos < 10:
                break
            length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
            start = pos + 10
        end = start + length
        if end > n:
            break
        first = buf[pos]
        opcode = first & 15
        if opcode <= 2:  # text, binary, continuation
            if first & 0x80:
                feed.count += 1
                if timed:
                    match = TS.search(buf, start, end)
                    if match is not None:
                        sent = int(match.group(1))
                        kind = feed.filtered
                        tally.ts[kind].append(sent)
                        tally.kernel[kind].append(kernel_ns - sent)
                        tally.user[kind].append(user_ns - sent)
        elif opcode == 9:  # ping: pong the payload
            send_quietly(feed, client_frame(10, bytes(buf[start:end])))
        elif opcode == 8:  # close: count it, answer once
            code = int.from_bytes(buf[start : start + 2], "big") if length >= 2 else 1005
            tally.closes[code] = tally.closes.get(code, 0) + 1
            if not feed.closing:
                feed.closing = True
                send_quietly(feed, client_frame(8, code.to_bytes(2, "big")))
        pos = end
    if pos:
        del buf[:pos]


def send_quietly(feed: Feed, data: bytes) -> None:
    try:
        feed.sock.send(data)  # a control frame: fits any send buffer
    except OSError:
        pass


# -- receiver process ---------------------------------------------------------------------------


def receiver_main(conn, port: int, paths: list[tuple[str, bool]], timed: bool) -> None:
    """A receiver process: open `paths`, then serve its sockets and the parent's commands
    (count, reset, stats, close, exit) from one epoll loop; at most an hour."""
    pin(LOAD_CORE)
    raise_nofile()
    tally = Tally()
    feeds, errors = handshake(port, paths, timed)
    conn.send(("ready", len(feeds), errors[:5], len(errors)))
    poller = select.epoll()
    by_fd: dict[int, Feed] = {}
    for feed in feeds:
        fd = feed.sock.fileno()
        by_fd[fd] = feed
        poller.register(fd, select.EPOLLIN)
    command_fd = conn.fileno()
    poller.register(command_fd, select.EPOLLIN)
    closing_until: float | None = None
    deadline = time.monotonic() + 3600
    try:
        while time.monotonic() < deadline:
            for fd, _mask in poller.poll(0.5):
                if fd == command_fd:
                    command = conn.recv()
                    if command == "count":
                        conn.send((time.time_ns(), sum(f.count for f in feeds), len(by_fd)))
                    elif command == "reset":
                        tally.reset()
                        for feed in feeds:
                            feed.count = 0
                        conn.send("ok")
                    elif command == "stats":
                        conn.send(
                            {
                                "counts": [(f.path, f.filtered, f.count) for f in feeds],
                                "open": len(by_fd),
                                "closes": dict(tally.closes),
                                "ts": {k: v.tobytes() for k, v in tally.ts.items()},
                                "kernel": {k: v.tobytes() for k, v in tally.kernel.items()},
                                "user": {k: v.tobytes() for k, v in tally.user.items()},
                            }
                        )
                    elif command == "close":
                        for feed in by_fd.values():
                            if not feed.closing:
                                feed.closing = True
                                send_quietly(feed, client_frame(8, CLOSE_1000))
                        closing_until = time.monotonic() + 10
                    elif command == "exit":
                        return
                    continue
                sock_feed = by_fd.get(fd)
                if sock_feed is None:
                    continue
                ancillary: list = []
                try:
                    if timed:
                        data, ancillary, _flags, _addr = sock_feed.sock.recvmsg(65536, ANCILLARY)
                    else:
                        data = sock_feed.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # the server closed TCP
                    poller.unregister(fd)
                    sock_feed.sock.close()
                    sock_feed.done = True
                    del by_fd[fd]
                    continue
                user_ns = time.time_ns()
                sock_feed.buf += data
                read_frames(sock_feed, tally, kernel_stamp(ancillary, user_ns) if timed else user_ns, user_ns, timed)
            if closing_until is not None and (not by_fd or time.monotonic() > closing_until):
                aborted = len(by_fd)
                for fd, feed in list(by_fd.items()):
                    poller.unregister(fd)
                    feed.sock.close()
                    del by_fd[fd]
                closing_until = None
                conn.send(("closed", aborted))
    finally:
        for feed in by_fd.values():
            feed.sock.close()
        poller.close()


class Receivers:
    """`procs` receiver processes sharing `paths` round-robin, driven over pipes."""

    def __init__(self, port: int, paths: list[tuple[str, bool]], procs: int, timed: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        procs = max(1, min(procs, len(paths)))
        self.pipes = []
        self.procs = []
        for i in range(procs):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=receiver_main, args=(theirs, port, paths[i::procs], timed), daemon=True)
            proc.start()
            theirs.close()
            self.pipes.append(mine)
            self.procs.append(proc)
        self.opened = 0
        self.errors: list[str] = []
        for pipe in self.pipes:
            if not pipe.poll(300):
                raise RuntimeError("a receiver process did not open its sockets within 300 s")
            _ready, opened, errors, n_errors = pipe.recv()
            self.opened += opened
            self.errors += [f"{n_errors} failed, e.g. {errors}"] if n_errors else []

    def ask(self, command: str, timeout: float = 120.0) -> list:
        for pipe in self.pipes:
            pipe.send(command)
        answers = []
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise RuntimeError(f"a receiver process did not answer {command!r} within {timeout} s")
            answers.append(pipe.recv())
        return answers

    def frames(self) -> int:
        return sum(answer[1] for answer in self.ask("count"))

    def cpu(self) -> float:
        return sum((process_cpu_seconds(p.pid) for p in self.procs if p.pid and p.is_alive()), 0.0)

    def stop(self) -> int:
        """Close every socket (close handshake, 10 s at most), end the processes; the
        number of sockets that had to be dropped without the handshake."""
        aborted = 0
        try:
            aborted = sum(answer[1] for answer in self.ask("close", timeout=30))
            for pipe in self.pipes:
                pipe.send("exit")
        except (OSError, RuntimeError, EOFError):
            pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        return aborted
