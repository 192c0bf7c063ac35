"""Replication figures: catch-up rate, a replica's apply rate, replication lag under writes.

    python bench/replication_bench.py                  # 1,000,000 events (built once, cached)
    python bench/replication_bench.py --quick          # a smoke run: 50,000 events, 5 s of writes
    python bench/replication_bench.py --only catchup,consumer --rounds 3
    python bench/replication_bench.py --only lag --rate 1000 --duration 20
    python bench/replication_bench.py --rebuild        # build the cached tenant again
    python bench/replication_bench.py --only catchup --retained   # also from a compacted copy
    python bench/replication_bench.py --events 200000 --only replica,restart
    python bench/replication_bench.py --events 200000 --only replica --replica-pyspy /tmp/prof
    python bench/replication_bench.py --events 200000 --only inprocess --rounds 3   # the loop's share
    python bench/replication_bench.py --events 200000 --only replica --replica-sync full --repeat 8 --pin
                                                       # the steady mode: medians of 8 runs, by thread

The target (docs/guide/operations.md#performance): replication catch-up of at least 50,000 frames/s from disk
to one consumer.

0. build: a tenant `default` of `--events` User inserts, written in-process through
   `Store.apply_insert` (sync="off", replication=True), never compacted, so its log holds
   every row. Cached under `--cache` (default /tmp/dbsvc-replication-bench) in
   users-N-KEY, KEY a hash of the tree's path and the schema (replication_kit.py `cache_dir`:
   two trees' runs never share a tenant), with build.json (checked against this tree's
   storage code too); built aside and renamed into place whole, so a concurrent run never
   reads a half-built one. `--rebuild` writes it again. The build time is printed when it is built.
   Each run serves its own data dir whose tenant's files are hard links to the cache's
   (replication_kit.py `tenant_for_run`: no bytes copied, a LOCK of its own), so two runs
   from one tree at once no longer meet on the tenant's lock (the second was TenantLocked).
1. catchup: `python dbsvc.py serve schemas/blog.dbs` on that tenant (pinned to core 0; its
   store's compaction size rule off, NEVER_COMPACTS, so the log stays whole) and
   a lean client in this process (pinned to core 1): a hand-made WebSocket handshake to
   `/replicate?after=0`, then only the WebSocket frame headers and the 16-byte PersistedEvent
   header of each message are parsed (frames counted, bytes counted, offsets checked
   consecutive, length checked), until the head offset of `/snapshot`. That is the
   server's rate. `--rounds` rounds on the same server; the log is in the page cache (the
   build, or the previous round, has just read or written it), so "from disk" means from
   the log file through read(), not from the device.
2. consumer: `python dbsvc.py replicate URL --after 0 --out FILE` as a subprocess on core 1,
   the checking consumer (CRC + JSON of every frame, fsync every 8 MiB / 1 s), timed from
   its "streaming" line to FILE holding every frame (FILE's size polled every 20 ms; FILE
   is written in 1 MiB pieces, so the end is seen within a piece), then SIGTERM.
3. replica: `python dbsvc.py serve schemas/blog.dbs --follow http://127.0.0.1:PRIMARY` with
   an empty SERVICE_DATA, pinned to `--replica-core` (1), once per `--replica-sync` mode.
   The bootstrap (an empty snapshot for a never-compacted primary) happens before it listens;
   from its first `/metrics` on, `replica.lag_offsets` is polled every 0.25 s until it is 0:
   frames applied per second over that span, the replica's CPU a frame (user+sys of the process over
   the frames: the figure that holds across hosts; 60k frames/s on one core is 16.7 us), and its VmRSS at
   the end beside the primary's; and, per thread of the replica (main, reading, fsync: by
   the system call each blocks in once caught up), CPU a frame, time waiting for a core,
   switches, migrations, faults (replication_threads.py).
   The steady mode (`--repeat N`, `--replica-code A,B`, `--pin`): N replicas a mode on one
   primary, each calibrated just before by the in-process apply of the log's first 51,200
   frames on the replica's core (the host's speed at that minute), medians and spreads of
   N; with two trees, their replicas alternate run by run and B is read over A pair by
   pair; `--pin` moves this process to the primary's core, so the replica's core holds the
   replica alone. Frames/s moves with what else wants the cores; the CPU a frame far less,
   and a pair's ratio of it least (bench/README.md, session 20, wt-rep16).
   `--side-by-side` with two trees: both replicas at once on the replica core, each round
   B's CPU a frame over A's over the same span, which shares the host's speed of each
   second between them (replication_pair.py); `--repeat` rounds.
4. lag: a fresh primary (SERVICE_SYNC=full, core 0) and a fresh replica of it (SERVICE_SYNC
   `--lag-replica-sync`, full by default, on `--replica-core`). This process (core 1) opens
   a raw `/subscribe/user` WebSocket on the replica (and one on the primary, for comparison),
   then POSTs `--rate` users per second for `--duration` seconds over `--connections`
   keep-alive connections on a fixed schedule (write i is due at t0 + i / rate). Every
   write's send and acknowledgement times and its `Dbsvc-Offset` are kept; every event's
   arrival on the subscribers is stamped (time.monotonic_ns, one clock); matched by
   offset: p50/p99/max of (replica arrival - primary ack) and (replica arrival - send),
   and whether the writes kept the schedule.
6. restart: a copy of the tenant as a primary, a replica of it caught up, then restarted
   (its log: the primary's whole history, replayed: "before"); then the copy compacted
   (`dbsvc compact`), the primary started again, the replica started again on its data
   dir: it compacts at the primary's cut (follower.py rule 9), and is restarted once more
   (its snapshot and an empty log: "after"). Each restart timed from spawn to listening
   (the store opened) and to `/ready`, with the replica's RSS then.
7. inprocess: the tenant's frames applied by `Store.apply_replicated_frames` in this
   process (a fresh store, sync off, a replica's collector thresholds, groups of 1,024 as a
   catching-up replica's, pinned to core 1): the CPU of the
   loop's apply a frame, with no socket, reading thread or fsync (best of `--rounds`).
   Steadier under load than frames/s, and the part of a replica this bench's changes touch.
5. `--retained` (off by default): a copy of the tenant compacted with `dbsvc compact`, so
   that every row after 0 is served from `log.retained` (retain.py), caught up as in 1.

Before each measurement it waits (up to `--wait-idle` seconds) until no other bench
(realtime_bench, service_bench, http_bench, auth_bench, storage_bench, wrk) runs, and it
prints the load average and how busy each core was during the measurement (/proc/stat,
steal included). Servers run with RUST_LOG=info; everything started is stopped on exit.
"""

# This file is the command line only (the docstring above is its --help epilog). The parts:
# replication_kit.py (the machine, Server/Servers, build_tenant, the WebSocket handshake),
# replication_catchup.py (1, 5, 2), replication_replica.py (3, 7, 6), replication_lag.py (4).

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from replication_catchup import measure_catchup, measure_consumer, measure_retained  # noqa: E402
from replication_kit import (  # noqa: E402
    ARGS,
    CLIENT_CORE,
    LOG_HEADER,
    SERVER_CORE,
    Server,
    Servers,
    build_tenant,
    cache_dir,
    loadavg,
    rss_mib,
    tenant_for_run,
    wait_idle,
)
from replication_lag import measure_lag  # noqa: E402
from replication_pair import measure_pairs  # noqa: E402
from replication_replica import log_frames, measure_inprocess, measure_replica, measure_restart  # noqa: E402
from replication_threads import paired, print_paired, print_summary, summary  # noqa: E402

CALIBRATION_FRAMES = 51_200  # the steady mode's calibration: the log's first 50 groups of 1,024, in process

# -- main -------------------------------------------------------------------------------------


def profile_report(path: str, top: int = 30) -> None:
    import pstats

    stats = pstats.Stats(path)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="size of the catch-up tenant")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50,000 events, 5 s of writes")
    parser.add_argument("--rebuild", action="store_true", help="build the cached tenant again")
    parser.add_argument("--cache", default="/tmp/dbsvc-replication-bench", help="where built tenants are kept")
    parser.add_argument(
        "--only",
        default="catchup,consumer,replica,lag,restart",
        help="comma list of: catchup, consumer, replica, lag, restart, inprocess",
    )
    parser.add_argument("--rounds", type=int, default=3, help="lean catch-up rounds")
    parser.add_argument("--replica-sync", default="full,off", help="SERVICE_SYNC modes of the apply-rate replica")
    parser.add_argument(
        "--replica-core", default=CLIENT_CORE, help="core(s) of the replicas, a taskset list (default 1; 0,1: unpinned)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="replica runs a SERVICE_SYNC mode on one primary; medians when > 1"
    )
    parser.add_argument(
        "--replica-code",
        default=None,
        metavar="DIR[,DIR]",
        help="the replica's tree(s); two or more alternate run by run, B over A paired (default: this tree)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="the two --replica-code trees' replicas at once on the replica core, B/A a round (replication_pair.py)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="this process on the primary's core (0), so the replica has its core to itself",
    )
    parser.add_argument(
        "--replica-switch-interval",
        type=float,
        default=None,
        metavar="S",
        help="sys.setswitchinterval(S) in the apply-rate replica before it starts (default: Python's 0.005)",
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="writes/s of the lag run")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of writes in the lag run")
    parser.add_argument("--connections", type=int, default=16, help="keep-alive connections of the lag writer")
    parser.add_argument("--lag-replica-sync", default="full", help="SERVICE_SYNC of the lag run's replica")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each catch-up, seconds")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=1200.0,
        help="wait at most this long for other benches before each measurement",
    )
    parser.add_argument(
        "--profile", action="store_true", help="run the catch-up primary under cProfile and print its top functions"
    )
    parser.add_argument(
        "--replica-pyspy",
        default=None,
        metavar="DIR",
        help="record the apply-rate replica with py-spy (200 Hz, raw, per thread) into DIR/replica-SYNC.txt",
    )
    parser.add_argument(
        "--retained", action="store_true", help="also: compact a copy of the tenant and catch up from its log.retained"
    )
    parser.add_argument("--json", action="store_true", help="print all results as one JSON line at the end")
    vars(ARGS).update(vars(parser.parse_args(argv)))  # the one Namespace the measurements read
    if ARGS.quick:
        ARGS.events = 50_000 if ARGS.events == 1_000_000 else ARGS.events
        ARGS.duration = min(ARGS.duration, 5.0)
    only = set(ARGS.only.split(","))
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(SERVER_CORE if ARGS.pin else CLIENT_CORE)})
    print(f"load average at start: {loadavg()} on {os.cpu_count()} cores")
    results: dict = {"events": ARGS.events}
    servers = Servers()
    workdir = Path(tempfile.mkdtemp(prefix="dbsvc-replication-bench-"))

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        if only & {"catchup", "consumer", "replica", "restart", "inprocess"}:
            wait_idle(ARGS.wait_idle, "the build")
            cached, info = build_tenant(cache_dir(Path(ARGS.cache), ARGS.events), ARGS.events, ARGS.rebuild)
            data = tenant_for_run(cached, workdir / "data")  # this run's own LOCK, the cache's files linked
            results["build"] = info
            if "inprocess" in only:
                print("apply in process (`Store.apply_replicated_frames`, the loop's share of a replica):")
                results["inprocess"] = measure_inprocess(data, ARGS.rounds)
        if only & {"catchup", "consumer", "replica", "restart"}:
            frame_bytes = info["log_bytes"] - LOG_HEADER
            profile_to = str(workdir / "primary.prof") if ARGS.profile else None
            wait_idle(ARGS.wait_idle, "the primary's start")
            spawned = time.monotonic()
            primary = servers.add(
                Server("primary", {"SERVICE_DATA": str(data)}, profile_to=profile_to, never_compacts=True)
            )
            snap = primary.get_json("/snapshot")
            head = snap["offset"]
            print(
                f"primary on port {primary.port} (listening {primary.listening_at - spawned:.1f} s after spawn): "
                f"head offset {head:,}, RSS {rss_mib(primary.proc.pid):.0f} MiB, "
                f"replication {snap['replication']}"
            )
            if head != ARGS.events:
                print(f"  NOTE: head {head} differs from --events {ARGS.events}")
            try:
                if "catchup" in only:
                    print(f"catch-up, lean client (server side), after=0 to {head:,}:")
                    results["catchup"] = measure_catchup(primary, head, ARGS.rounds, ARGS.timeout)
                if "consumer" in only:
                    print("catch-up, `dbsvc replicate --out FILE` (the checking consumer):")
                    results["consumer"] = measure_consumer(servers, primary, head, frame_bytes, workdir, ARGS.timeout)
                if "replica" in only:
                    print(
                        f"replica apply rate (`serve --follow`, replica on core {ARGS.replica_core}, this "
                        f"process on core {SERVER_CORE if ARGS.pin else CLIENT_CORE}):"
                    )
                    results["replica"] = []
                    codes = [Path(c).resolve() for c in ARGS.replica_code.split(",")] if ARGS.replica_code else [ROOT]
                    steady = ARGS.repeat > 1 or len(codes) > 1
                    sample = log_frames(data)[:CALIBRATION_FRAMES] if steady else None
                    for sync in filter(None, ARGS.replica_sync.split(",")):
                        if ARGS.side_by_side:
                            if len(codes) != 2:
                                parser.error("--side-by-side needs two trees in --replica-code")
                            results[f"replica_{sync}_side_by_side"] = measure_pairs(
                                servers, primary, head, sync, workdir, codes
                            )
                            continue
                        runs: dict[Path, list[dict]] = {code: [] for code in codes}
                        for _ in range(max(1, ARGS.repeat)):
                            for code in codes:  # alternated: A, B, A, B, ...
                                run = measure_replica(servers, primary, head, sync, workdir, ARGS.timeout, code, sample)
                                runs[code].append(run)
                                results["replica"].append(run)
                        if steady:
                            for code, series in runs.items():
                                figures = summary(series)
                                print_summary(f"SERVICE_SYNC={sync}, tree {code}", figures)
                                results[f"replica_{sync}_summary_{code}"] = figures
                            for code in codes[1:]:
                                figures = paired(runs[codes[0]], runs[code])
                                print_paired(str(codes[0]), str(code), figures)
                                results[f"replica_{sync}_paired_{code}"] = figures
            finally:
                servers.stop(primary)
                if primary.log and any("Traceback" in line or "ERROR" in line for line in primary.log):
                    print(
                        "primary log (errors):", "".join(l for l in primary.log if "ERROR" in l or "Error" in l)[-3000:]
                    )
            if profile_to:
                profile_report(profile_to)
            if ARGS.retained:
                results["retained"] = measure_retained(servers, data, head, workdir)
            if "restart" in only:
                print("replica restart, before and after it compacted at the primary's cut:")
                results["restart"] = measure_restart(servers, data, info["events"], workdir)
        if "lag" in only:
            print(
                f"replication lag at {ARGS.rate:,.0f} writes/s (primary SERVICE_SYNC=full on core {SERVER_CORE}, "
                f"replica on core {ARGS.replica_core}, writer and feeds on core {CLIENT_CORE}):"
            )
            results["lag"] = measure_lag(
                servers, workdir, ARGS.rate, ARGS.duration, ARGS.connections, ARGS.lag_replica_sync
            )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        servers.stop_all()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at the end: {loadavg()} on {os.cpu_count()} cores")
    if ARGS.json:
        print(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
