"""PATCH latency of a served store across its online compaction, request by request,
with the compaction's steps marked (issue 36 item 3's tail).

    python bench/served_tail.py DATA [--code DIR] [--duration 8] [--connections 64]

DATA is a tenant of the peers' blog posts whose log is just under the 64 MiB compaction
size (tail_bench.py's `grow`, e.g. 62 MiB: /tmp/<you>-grown62), copied for the run. The
server (`CODE/dbsvc.py serve`, SERVICE_SYNC=full, pinned to core 0 as the other benches pin
it) runs under this file's `--wrap`, which times online.py's steps, the driver's freezes
and heap advice and every collection of the cyclic collector, and writes them to a file when
the server exits. The load is this process on core 1: `--connections` sockets, each sending
one PATCH (a random post, a new score) and the next once the answer is in, for
`--duration` seconds; each request's start and latency are kept. The size rule starts the
compaction once the PATCHes take the log past 64 MiB. Both sides read the same clock
(`time.perf_counter`, CLOCK_MONOTONIC: one for every process), so each request falls
in its bucket of the steps.

Printed: p50 / p99 / max of the whole run and of the requests started before the cut, and
a line every `--bucket` ms from shortly before the cut to its end: how many requests
started there, their p50 and largest latency, the steps that ran (online.py's, letters as
in compaction_tail.py; `*` the switch) and the collections (generation: wall ms / thread
CPU ms). Why not wrk: it reports percentiles, never when a slow request started.

`--compact-after S` (a freshly compacted tenant, /tmp/pristine-1m, whose empty log the size
rule never compacts): the server compacts once, at its first write S seconds after its first
write, whatever the size rule says; `--start-timeout` gives a 1M open its minutes.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import runpy
import selectors
import shutil
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compaction_tail import LETTERS, STEPS  # noqa: E402
from http_bench import start_dbsvc, stop_server  # noqa: E402

Marks = list[tuple[str, float, float, float]]  # (step, start, end, thread CPU seconds)
AFTER = 0.3  # seconds after the switch compared between trees (the old files' release)
TICK = 0.005  # seconds between two of the probes' wakes (`probe_loop`, `watch_gil`)
LATE = 0.025  # a probe's wake this much past its time is kept ("late" on the loop, "gil" in a thread)
SLOWEST = 5  # the slowest requests inside the snapshot step told apart by what overlapped them


def present_share(ranges: list[tuple[int, int]]) -> float:
    """The share of the 4 KiB pages of `ranges` present in memory (pagemap(5)'s bit 63, which
    a process may read of itself); -1.0 where pagemap cannot be read."""
    present = total = 0
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            for start, length in ranges:
                pagemap.seek(start // 4096 * 8)
                entries = pagemap.read(length // 4096 * 8)
                total += len(entries) // 8
                present += sum(entries[i + 7] >> 7 for i in range(0, len(entries), 8))
    except OSError:
        return -1.0
    return present / total if total else -1.0


def anon_huge_bytes() -> float:
    """The process's anonymous memory on huge pages (/proc/self/smaps_rollup's
    AnonHugePages), in bytes; -1.0 where it cannot be read."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return -1.0


def wrap(marks_path: str, code: str, argv: list[str]) -> None:
    """The server's side (`--wrap`): time the steps, then run `CODE/dbsvc.py` as __main__."""
    sys.path.insert(0, code)
    from dbsvc.storage import compactor, files, online

    forced = os.environ.pop("SERVED_TAIL_COMPACT_AFTER", "")
    if forced:
        force_once(compactor, float(forced))

    marks: Marks = []

    def timed(name: str, fn: Any) -> Any:
        # an fsync in asyncio's executor (`to_thread`) is a compaction step's (a piece's, a
        # file's last): "fsync.step", told apart from the group commits' (their fsync thread's)
        off_loop = name + ".step" if name in ("fsync", "write") else name

        def step(*args: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args)
            finally:
                called = off_loop if threading.current_thread().name.startswith("asyncio") else name
                marks.append((called, start, time.perf_counter(), time.thread_time() - cpu))

        return step

    for name in STEPS:
        setattr(online, name, timed(name, getattr(online, name)))
    for name in ("freeze_live", "advise_heap"):
        if hasattr(compactor, name):
            setattr(compactor, name, timed(name, getattr(compactor, name)))
    if hasattr(compactor, "collapse_in_pieces"):  # the collapse off the compactor's path: "advise_heap" here too
        whole = timed("advise_heap", compactor.collapse_in_pieces)  # type: ignore[attr-defined]

        def huge_around(*args: Any) -> Any:
            # the process's AnonHugePages before and after ("collapse.huge"): what the
            # collapse merged, against its pieces (a piece already huge merges nothing)
            at = time.perf_counter()
            marks.append(("collapse.huge", at, at, anon_huge_bytes()))
            try:
                return whole(*args)
            finally:
                at = time.perf_counter()
                marks.append(("collapse.huge", at, at, anon_huge_bytes()))

        compactor.collapse_in_pieces = huge_around  # type: ignore[attr-defined]
    # every fsync (the group commits' and the compaction's), every ftruncate (a release
    # in pieces shrinks the old files with it: storage/freeing.py), and every write (on the
    # loop: a group commit's one write of its frames, post_tail.py; a step's: "write.step")
    for name in ("fsync", "fsync_dir", "ftruncate", "write"):
        setattr(files.ops, name, timed(name, getattr(files.ops, name)))
    # each piece of the heap's collapse after a switch (heap.py `collapse_in_pieces` calls
    # the module's `advise_huge_pages` once a piece with MADV_COLLAPSE): "collapse.piece",
    # its wall and its thread's CPU (the kernel's copy and huge-page allocation, on the
    # core the loop is pinned to)
    from dbsvc.storage import heap

    if hasattr(heap, "collapse_in_pieces"):
        advise, piece = heap.advise_huge_pages, timed("collapse.piece", heap.advise_huge_pages)

        def collapse(ranges: list[tuple[int, int]], how: int) -> int:
            if how != heap.MADV_COLLAPSE:
                return advise(ranges, how)  # type: ignore[no-any-return]
            # how much of the piece was there before its call ("collapse.present": the
            # share of its 4 KiB pages present, /proc/self/pagemap's bit 63): a sparse
            # piece is a huge page allocated, zeroed and copied for a few pages
            at = time.perf_counter()
            marks.append(("collapse.present", at, at, present_share(ranges)))
            return piece(ranges, how)  # type: ignore[no-any-return]

        heap.advise_huge_pages = collapse
    started = [0.0, 0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = time.perf_counter(), time.thread_time()
        else:
            marks.append((f"gc{info['generation']}", started[0], time.perf_counter(), time.thread_time() - started[1]))

    gc.callbacks.append(collected)
    stacks: list[tuple[float, float, dict[str, str]]] = []
    probe_loop(compactor, files, marks)
    stop = threading.Event()
    threading.Thread(target=watch_gil, args=(marks, stacks, stop), name="served-tail-gil", daemon=True).start()
    sys.argv = argv
    try:
        runpy.run_path(argv[0], run_name="__main__")
    finally:
        stop.set()
        Path(marks_path).write_text(json.dumps(marks))
        Path(marks_path + ".stacks").write_text(json.dumps(stacks))


def probe_loop(compactor: Any, files: Any, marks: Marks) -> None:
    """From the first write on, a callback on the served loop every TICK: one that runs LATE
    or more past its time is a "late" mark (the loop was held: a callback, a collection, a
    call that holds the GIL, or the core taken by another process). The first write is the
    first group commit's write on the loop (`files.ops.write`, post_tail.py's runs never
    reach the size rule) or the size rule's first call (`Compactor.after_write`)."""
    after_write = compactor.Compactor.after_write
    started: list[bool] = []

    def beat(loop: Any, due: float) -> None:
        now = time.perf_counter()
        if now - due > LATE:
            marks.append(("late", due, now, 0.0))
        loop.call_later(TICK, beat, loop, now + TICK)

    def start() -> None:
        if started:
            return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a write outside the loop (the open's)
            return
        started.append(True)
        loop.call_later(TICK, beat, loop, time.perf_counter() + TICK)

    def first(self: Any, commit: Any) -> None:
        start()
        after_write(self, commit)

    compactor.Compactor.after_write = first
    write = files.ops.write

    def first_write(fd: int, data: Any) -> Any:
        if not started and threading.current_thread() is threading.main_thread():
            start()
        return write(fd, data)

    files.ops.write = first_write


def watch_gil(marks: Marks, stacks: list[tuple[float, float, dict[str, str]]], stop: threading.Event) -> None:
    """A thread that sleeps TICK at a time: a wake LATE or more past its time waited for the
    GIL (a C call that holds it: a collection, a large encode or copy) or for the core, and is
    a "gil" mark, with the innermost frames of every other thread as it got the GIL back."""
    me = threading.get_ident()
    while not stop.is_set():
        due = time.perf_counter() + TICK
        time.sleep(TICK)
        now = time.perf_counter()
        if now - due <= LATE:
            continue
        marks.append(("gil", due, now, 0.0))
        names = {t.ident: t.name for t in threading.enumerate()}
        seen = {}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            calls = []
            while frame is not None and len(calls) < 6:
                calls.append(f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}:{frame.f_lineno}")
                frame = frame.f_back
            seen[names.get(ident, str(ident))] = " < ".join(calls)
        stacks.append((due, now, seen))


def force_once(compactor: Any, after: float) -> None:
    """`--compact-after`: every write asks the size rule (compact_bytes 0), and the rule
    starts one compaction, at the first write `after` seconds past the first write."""
    init = compactor.Compactor.__init__
    state: list[float] = []

    def opened(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.compact_bytes = 0

    def after_write(self: Any, _commit: Any) -> None:
        now = time.perf_counter()
        if not state:
            state.append(now + after)
        if state[0] and now >= state[0]:
            state[0] = 0.0
            self.compact_now()

    compactor.Compactor.__init__ = opened
    compactor.Compactor.after_write = after_write


def request(key: int, score: int) -> bytes:
    body = b'{"score": %d.25}' % score
    return b"PATCH /api/blog-post/%d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        key, len(body), body)  # fmt: skip


def load(port: int, connections: int, duration: float, records: int) -> list[tuple[float, float]]:
    """Closed-loop PATCHes on `connections` sockets for `duration` seconds: (start, seconds)
    of each answered request (bounded by the duration; an answer other than 200 stops it)."""
    rng = random.Random(7)
    selector = selectors.DefaultSelector()
    state: dict[socket.socket, list[Any]] = {}
    done: list[tuple[float, float]] = []

    def send(sock: socket.socket) -> None:
        state[sock] = [time.perf_counter(), b""]
        sock.sendall(request(rng.randint(1, records), rng.randint(0, 99)))

    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        selector.register(sock, selectors.EVENT_READ, sock)
        send(sock)
    end = time.perf_counter() + duration
    while time.perf_counter() < end:
        for key, _ in selector.select(timeout=1.0):
            sock = key.data
            entry = state[sock]
            entry[1] += sock.recv(65536)
            head, sep, rest = entry[1].partition(b"\r\n\r\n")
            if not sep:
                continue
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) < length:
                continue
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"answer {head[:40]!r}")
            done.append((entry[0], time.perf_counter() - entry[0]))
            send(sock)
    for sock in state:
        sock.close()
    return done


def quantiles(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    if not ordered:
        return "-"
    return f"{ordered[len(ordered) // 2] * 1e3:.1f} / {ordered[int(len(ordered) * 0.99)] * 1e3:.1f} / {ordered[-1] * 1e3:.1f} ms"


def report(done: list[tuple[float, float]], marks: Marks, bucket: float, timeline: bool = True) -> list[str]:
    """The run's quantiles and (unless `timeline` is False) the timeline (module docstring)."""
    lines = [f"  requests {len(done)}; p50 / p99 / max: whole run {quantiles([s for _a, s in done])}"]
    steps = [m for m in marks if m[0] in LETTERS]
    if not steps:
        return [*lines, "  no compaction in the run"]
    origin = min(m[1] for m in steps)
    ended = max(m[2] for m in steps)
    before = [s for a, s in done if a + s < origin]
    inside = [s for a, s in done if a < ended and a + s > origin]
    lines.append(f"  before the cut {quantiles(before)}; overlapping the compaction {quantiles(inside)}")
    lines.append(
        "  steps (ms from the cut, wall ms, thread CPU ms): "
        + ", ".join(f"{m[0]} {(m[1] - origin) * 1e3:.0f} +{(m[2] - m[1]) * 1e3:.0f}/{m[3] * 1e3:.0f}" for m in steps)
    )
    median = statistics.median(before) if before else 1.0
    worst = []
    for name in (
        "write_snapshot",
        "write_retained",
        "start_log",
        "catch_up",
        "finish_log",
        "release_files",
        "advise_heap",
    ):
        spans = [(m[1], m[2]) for m in steps if m[0] == name]
        if spans:
            over = [s for a, s in done if any(a < end and a + s > start for start, end in spans)]
            worst.append(f"{name} {max(over, default=0.0) / median:.2f}x")
    lines.append("  the slowest request overlapping each step, over the median before the cut: " + ", ".join(worst))
    # A step that slows every request a little (a heap collapse) hides in a maximum, which
    # the host's own stalls set at this load: the requests started inside each step, their
    # rate and their median over the whole run's median.
    whole = statistics.median(s for _a, s in done)
    within = []
    for name in ("write_snapshot", "write_retained", "start_log", "release_files", "advise_heap"):
        for _n, start, end, _cpu in (m for m in steps if m[0] == name):
            inner = [s for a, s in done if start <= a < end]
            if inner and end > start:
                rate = len(inner) / (end - start)
                within.append(f"{name} {rate:.0f} req/s p50 {statistics.median(inner) / whole:.2f}x")
    lines.append("  started inside each step, rate and p50 over the whole run's p50: " + ", ".join(within))
    # The same window for both trees (a release in pieces runs longer than one close, so its
    # step overlaps more requests): the AFTER seconds that follow the switch.
    switched = [m[2] for m in steps if m[0] == "finish_log"]
    if switched:
        end = switched[-1]
        over = [s for a, s in done if a < end + AFTER and a + s > end]
        lines.append(
            f"  the slowest request in the {AFTER * 1e3:.0f} ms after the switch: {max(over, default=0.0) / median:.2f}x"
        )
    started = [a for a, _s in done if origin <= a < ended]
    pieces = [m[2] - m[1] for m in marks if m[0] == "fsync.step"]
    lines.append(
        f"  during the compaction ({(ended - origin):.1f} s): {len(started) / max(ended - origin, 1e-9):.0f} req/s; "
        f"the steps' fsyncs {len(pieces)}, the longest {max(pieces, default=0.0) * 1e3:.1f} ms"
    )
    cuts = [m[2] - m[1] for m in marks if m[0] == "ftruncate"]
    if cuts:
        lines.append(
            f"  ftruncate: {len(cuts)} calls, {sum(cuts) * 1e3:.1f} ms in all, the longest {max(cuts) * 1e3:.1f} ms"
        )
    pieces = sorted((m[2] - m[1], m[3]) for m in marks if m[0] == "collapse.piece" and m[1] >= origin)
    if pieces:
        lines.append(
            f"  the heap's collapse: {len(pieces)} pieces, wall p50 {pieces[len(pieces) // 2][0] * 1e3:.1f} / longest "
            f"{pieces[-1][0] * 1e3:.1f} ms, thread CPU longest {max(p[1] for p in pieces) * 1e3:.1f} ms"
        )
    lines.extend(slowest_in_snapshot(done, marks, whole))
    if not timeline:
        return lines
    first, last = origin - 5 * bucket, max(a + s for a, s in done)
    for b in range(int((last - first) / bucket) + 1):
        low, high = first + b * bucket, first + (b + 1) * bucket
        started = sorted(s for a, s in done if low <= a < high)
        letters = "".join(sorted({LETTERS[m[0]] for m in steps if m[1] < high and m[2] > low}))
        if any(m[0] == "finish_log" and m[1] < high and m[2] > low for m in steps):
            letters += "*"
        gcs = " ".join(
            f"{m[0]}:{(m[2] - m[1]) * 1e3:.1f}/{m[3] * 1e3:.1f}"
            for m in marks
            if m[0][:2] == "gc" and low <= m[1] < high and m[2] - m[1] > 0.002
        )
        for probe in ("late", "gil"):
            held = [m[2] - m[1] for m in marks if m[0] == probe and m[1] < high and m[2] > low]
            if held:
                gcs += f" {probe}:{len(held)}<={max(held) * 1e3:.0f}"
        syncs = [m for m in marks if m[0] in ("fsync", "fsync.step", "fsync_dir") and low <= m[1] < high]
        longest = max((m[2] - m[1] for m in syncs if m[0] == "fsync"), default=0.0)
        dirs = "".join(f" dir:{(m[2] - m[1]) * 1e3:.1f}" for m in syncs if m[0] == "fsync_dir")
        pieces = [m[2] - m[1] for m in syncs if m[0] == "fsync.step"]
        if pieces:
            dirs += f" step-fsync:{len(pieces)}<={max(pieces) * 1e3:.1f}"
        cuts = [m[2] - m[1] for m in marks if m[0] == "ftruncate" and low <= m[1] < high]
        if cuts:
            dirs += f" trunc:{len(cuts)}<={max(cuts) * 1e3:.1f}"
        shown = (
            f"{len(started):4d} started, p50 {started[len(started) // 2] / median:5.2f}x max {started[-1] / median:5.2f}x"
            if started
            else "   0 started" + " " * 25
        )
        lines.append(f"  {(low - origin) * 1e3:+7.0f} ms {shown}  {letters:8s} fsync<={longest * 1e3:5.1f}{dirs} {gcs}")
    return lines


def slowest_in_snapshot(done: list[tuple[float, float]], marks: Marks, whole: float) -> list[str]:
    """The SLOWEST requests started inside the snapshot step, each with the longest of what
    overlapped it: a group commit's fsync (the disk), a late loop tick (the loop held), a
    late wake of the GIL probe (the GIL or the core held), a collection. Which of them is as
    long as the request says what held it."""
    spans = [(m[1], m[2]) for m in marks if m[0] == "write_snapshot"]
    if not spans:
        return []
    start, end = spans[0]
    waves: dict[int, tuple[float, float]] = {}  # one request of a wave answered together (same ms)
    for a, s in done:
        if start <= a < end:
            key = int((a + s) * 1e3)
            waves[key] = max(waves.get(key, (0.0, 0.0)), (s, a))
    inside = sorted(waves.values(), reverse=True)[:SLOWEST]

    def longest(kind: str, a: float, b: float) -> float:
        return max((m[2] - m[1] for m in marks if m[0] == kind and m[1] < b and m[2] > a), default=0.0) * 1e3

    lines = [
        f"  the {len(inside)} slowest answers (one a millisecond) to requests started inside the snapshot step (ms; x the run's p50):"
    ]
    for seconds, a in inside:
        b = a + seconds
        gcs = max((m[2] - m[1] for m in marks if m[0].startswith("gc") and m[1] < b and m[2] > a), default=0.0)
        lines.append(
            f"    at +{(a - start) * 1e3:.0f}: {seconds * 1e3:.1f} ({seconds / whole:.1f}x); group fsync "
            f"{longest('fsync', a, b):.1f}, step fsync {longest('fsync.step', a, b):.1f}, loop late "
            f"{longest('late', a, b):.1f}, gil late {longest('gil', a, b):.1f}, gc {gcs * 1e3:.1f}"
        )
    return lines


def sync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (the copy of DATA, before it is served).
    Unsynced, a 1M seed's 400 MB copy sat dirty in the page cache until the kernel's
    writeback took it, `dirty_expire_centisecs` (30 s here) later: in the middle of the run,
    where a group commit's fsync waited ~300 ms for it (bench/README.md, wt-pace2)."""
    for folder, _dirs, names in os.walk(root):
        for name in [*names, "."]:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def main() -> None:
    if sys.argv[1:2] == ["--wrap"]:
        wrap(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--code", type=Path, default=HERE.parent)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--bucket", type=float, default=50, help="ms a line of the timeline")
    parser.add_argument("--quiet", action="store_true", help="no timeline, the figures only")
    parser.add_argument("--compact-after", type=float, default=0.0, help="force one compaction after S s")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds the open may take")
    parser.add_argument("--stacks", type=int, default=0, help="print the N latest GIL probe wakes' stacks")
    parser.add_argument(
        "--unsynced-copy", action="store_true", help="serve the copy of DATA before it is written back (as before)"
    )
    args = parser.parse_args()
    code = args.code.resolve()
    copy = Path(os.environ.get("SERVED_TAIL_DIR", f"/tmp/served-tail-{os.getpid()}"))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.data, copy)
    if not args.unsynced_copy:
        sync_tree(copy)
    marks_path = copy / "marks.json"
    os.sched_setaffinity(0, {1})
    try:
        env = {"SERVICE_DATA": str(copy), "SERVICE_SYNC": "full"}
        if args.compact_after:
            env["SERVED_TAIL_COMPACT_AFTER"] = str(args.compact_after)
        proc, port, log = start_dbsvc(
            env,
            HERE / "peers_blog.dbs",
            code=code,
            python=[sys.executable, str(Path(__file__).resolve()), "--wrap", str(marks_path), str(code)],
            timeout=args.start_timeout,
        )
        try:
            done = load(port, args.connections, args.duration, args.records)
        finally:
            stop_server(proc)
        marks = [tuple(m) for m in json.loads(marks_path.read_text())] if marks_path.exists() else []
        stacks_path = Path(str(marks_path) + ".stacks")
        stacks = json.loads(stacks_path.read_text()) if stacks_path.exists() else []
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    print(f"{code.name}: {len(done) / args.duration:.0f} req/s")
    lines = report(done, marks, args.bucket / 1e3, timeline=not args.quiet)  # type: ignore[arg-type]
    print("\n".join(lines))
    if args.stacks and done:
        first, last = done[0][0], done[-1][0]
        loaded = [entry for entry in stacks if first <= entry[0] <= last]
        for due, now, seen in sorted(loaded, key=lambda s: s[0] - s[1])[: args.stacks]:
            print(f"  gil probe {(now - due) * 1e3:.0f} ms late at {due:.3f}:")
            for name, calls in sorted(seen.items()):
                print(f"    {name}: {calls}")
    for line in log:
        if "compacted online" in line:
            print(f"  {line.strip()}")
    print(f"  load average {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
