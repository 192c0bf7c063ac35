"""Realtime figures: change-feed fan-out latency, memory per idle socket, delivery rate.

    python bench/realtime_bench.py                 # the issue's sizes (about 3 minutes)
    python bench/realtime_bench.py --quick         # a smoke run (about 30 s)
    python bench/realtime_bench.py --only latency --sync off --duration 60 --json

Three measurements, each on a fresh `python dbsvc.py serve schemas/blog.dbs` (a temp data
dir, SERVICE_MAX_CONNECTIONS=20000, RUST_LOG=info) pinned to core 0; every client process
(this one, the writer, the receivers) is pinned to core 1.

1. latency (docs/guide/operations.md#performance: "1,000 subscribers each receive a write within 50 ms at p99,
   at 100 writes/s"). Per `--sync` mode (off and full by default):
   a. the writes alone: `--rate` POST /api/user per second for `--duration` seconds, open
      loop (write i due in the first half of its 1/rate slot, sent on keep-alive socket
      i % 8, one thread each: see realtime_serve.py's `paced_writes`), no subscriber:
      HTTP response p50/p99;
   b. `--subscribers` sockets, half `/subscribe/user` (unfiltered) and half
      `/subscribe/user?name=sub-NNNN` (filtered, one distinct name each), spread over
      `--procs` receiver processes; the same writes, each naming one of the filtered
      subscribers round-robin, so every write is delivered to all unfiltered sockets plus
      exactly one filtered socket (501 deliveries per write at the default sizes).
   Each write carries the writer's time.time_ns() taken just before its send() in
   `profile.bench_ts`. Every delivery gets two latencies: "at the socket", the kernel's
   receive stamp of the segment (SO_TIMESTAMPNS; the server's part, immune to the client
   processes queueing on their shared core), and "in the client", the receiver's clock when
   it read the bytes. Figures: p50, p99, p99.9, max over all deliveries; per write, the time
   to its last delivery ("fan-out done"); the writes' HTTP latency (kernel-stamped too); the
   server's CPU per write; how busy each core was.
2. memory: `--idle` idle `/subscribe/user` sockets (and as many `/live-query/user`, on a second
   fresh server, unless `--no-live-query`); VmRSS of the server from /proc before and after
   (each read once it stays put for a second): (after - before) / sockets. Then
   `--memory-rounds - 1` more rounds of closing them all and opening as many again, to tell
   a leak (RSS growing round after round) from memory the allocator keeps. Kernel socket
   buffers are not in RSS.
3. throughput: `--fanout-subscribers` unfiltered `/subscribe/user` sockets and a writer
   process posting as fast as it can on `--writers` keep-alive connections (SERVICE_SYNC=off);
   after `--warmup` seconds, frames received per second summed over the sockets during a
   `--window`-second window, beside writes/s (the server's row count) and `events_sent`/s
   from /metrics; lagged closes (1013) are counted on both sides.

4. inits (issue 30 item 4): `--init-records` users imported (`dbsvc import`), then
   `--init-sockets` `/live-query/user` sockets opened at once that never read (a client
   that stalls), while a thread asks `/health` every 50 ms for `--init-window` seconds:
   /health p50/p99/max, VmRSS before, at its peak during the window, and settled after the
   sockets are closed; then the same sockets reading, with the bytes they received.
   `--code DIR` runs another checkout's server (the tree before a change, for a before/after).

5. fanout (issue 30 item 7, scenario b; not in the default `--only`): for each of
   `--fanout-sizes` (1000,10000), that many unfiltered `/subscribe/user` sockets (SERVICE_MAX_SOCKETS
   set past it) in `--fanout-b-procs` receiver processes, `--rate` writes/s for `--duration` s
   (paced_writes), `/health` asked every 50 ms meanwhile: writes/s achieved, latency at the
   socket and in the client, server CPU per write, /health p50/p99/max, VmRSS idle and peak.
   `--code DIR` for a before/after.
6. flood (scenario c): `bench/ws_flood_bench.py --json` run as a subprocess on this tree (or
   `--code`): /health p50/p99 with no flood, one client flooding empty pings, then empty text.

7. rules (issue 31; not in the default `--only`): sans-IO, in this process, no socket: a
   store of `model Note { owner str @filter ... }` and the real broker with `--rules-sizes`
   (1000,10000) feed sessions on a channel that only counts frames, each allowed only its
   own records. Three feeds per size: `owner` (the Scope `record.owner == token.sub`
   compiles to, pinned to `owner`: routed by the claim's value), `where` (the same rule
   as a residual record test: tested for every event, what routing avoids) and `filter`
   (no rules, `?owner=<sub>` instead: the routing the owner rule must equal). `--rules-writes`
   inserts, each owned by one subscriber round-robin; the broker's CPU per write (the
   drain only: time.process_time around the scheduled callbacks) and the deliveries.

8. owned (issue 31, the issue's case; not in the default `--only`): a server of
   `OWNED_SCHEMA` (`@allow(read, record.owner == token.sub)` on an `@filter` owner) with
   the token guard on (a P-256 key made here, tokens minted by PyJWT), for each of
   `--owned-sizes` (1000,10000) that many `/subscribe/note` sockets, subscriber i with a
   token of `sub` s<i>, and `--rate` writes/s for `--duration` s by a writer token, write j
   owned by s<j mod N>: each write reaches exactly one socket. Latency at the socket and in
   the client, server CPU per write (it must not grow with N), /health.

The receivers are a minimal WebSocket client on a plain epoll loop (see "the minimal
WebSocket client" in realtime_kit.py): no asyncio, no websockets package, whose per-read
overhead would cost more than the frame itself at 50,000 frames/s on the one client core.

This file is the command line only. The parts: realtime_kit.py (pinning, the WebSocket
handshake and frames, receiver processes), realtime_serve.py (writers, the server runner,
the measured part and figures of a run of writes, cores, percentiles), and the runs with their printed rows by family: realtime_latency.py
(1-3), realtime_scale.py (4-6), realtime_rules.py (7-8).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import LOAD_CORE, SERVER_CORE  # noqa: E402
from realtime_kit import pin, raise_nofile  # noqa: E402
from realtime_latency import latency_run, memory_run, show_latency, show_memory, show_throughput, throughput_run  # noqa: E402
from realtime_rules import owned_run, rules_run, show_owned, show_rules  # noqa: E402
from realtime_scale import fanout_run, flood_run, inits_run, show_fanout, show_flood, show_inits  # noqa: E402
from realtime_serve import DISTURBED  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 100 subscribers for 3 s, sync off only, 500 idle sockets, 20 fan-out subscribers",
    )
    parser.add_argument(
        "--only",
        default="latency,memory,throughput",
        help="comma list of runs: latency, memory, throughput, inits, fanout, flood, rules, owned",
    )
    parser.add_argument("--sync", default="off,full", help="SERVICE_SYNC modes of the latency run")
    parser.add_argument("--subscribers", type=int, default=1000, help="sockets of the latency run")
    parser.add_argument("--filtered", type=float, default=0.5, help="fraction of subscribers filtered on a name")
    parser.add_argument("--rate", type=float, default=100, help="writes per second")
    parser.add_argument("--duration", type=float, default=30, help="seconds of measured writes")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of writes before measuring")
    parser.add_argument("--procs", type=int, default=4, help="receiver processes of the latency run")
    parser.add_argument("--idle", type=int, default=10_000, help="idle sockets of the memory run")
    parser.add_argument("--memory-procs", type=int, default=2, help="receiver processes of the memory run")
    parser.add_argument(
        "--memory-rounds", type=int, default=2, help="open/close rounds on one server, RSS printed per round"
    )
    parser.add_argument("--no-live-query", action="store_true", help="memory: /subscribe only")
    parser.add_argument("--fanout-subscribers", type=int, default=100, help="sockets of the throughput run")
    parser.add_argument("--fanout-procs", type=int, default=2, help="receiver processes of the throughput run")
    parser.add_argument("--writers", type=int, default=8, help="connections of the flood writer")
    parser.add_argument("--window", type=float, default=10, help="seconds of the throughput window")
    parser.add_argument(
        "--fanout-sizes", default="1000,10000", help="fanout: comma list of unfiltered subscriber counts (scenario b)"
    )
    parser.add_argument("--fanout-b-procs", type=int, default=4, help="receiver processes of the fanout run")
    parser.add_argument("--flood-duration", type=float, default=5, help="flood: seconds of /health probes each")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--rules-sizes", default="1000,10000", help="rules: comma list of subscriber counts")
    parser.add_argument("--rules-writes", type=int, default=2000, help="rules: inserts per size and feed")
    parser.add_argument("--owned-sizes", default="1000,10000", help="owned: comma list of subscriber counts")
    parser.add_argument("--init-records", type=int, default=100_000, help="users of the inits run")
    parser.add_argument("--init-sockets", type=int, default=50, help="live queries opened at once")
    parser.add_argument("--init-window", type=float, default=20, help="seconds of /health probes")
    parser.add_argument("--code", default="", help="inits: the checkout whose server runs (default this one)")
    if parser.parse_args(argv).quick:  # smaller defaults; flags given still win
        parser.set_defaults(
            subscribers=100,
            duration=3,
            warmup=1,
            idle=500,
            fanout_subscribers=20,
            window=3,
            sync="off",
            init_records=20_000,
            init_sockets=10,
            init_window=5,
            fanout_sizes="1000",
            flood_duration=2,
        )
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    pin(LOAD_CORE)
    limit = raise_nofile()
    if "memory" in only and limit < args.idle + 100:
        print(f"RLIMIT_NOFILE is {limit}: too low for {args.idle} sockets")
        return 2
    print(
        f"server on core {SERVER_CORE}, clients on core {LOAD_CORE}; RLIMIT_NOFILE {limit}; "
        f"load average {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores"
    )
    results: dict = {
        "latency": [],
        "memory": [],
        "throughput": None,
        "inits": [],
        "fanout": [],
        "flood": None,
        "rules": [],
        "owned": [],
    }
    with tempfile.TemporaryDirectory(prefix="dbsvc-realtime-bench-") as tmp:
        if "latency" in only:
            for sync in args.sync.split(","):
                results["latency"].append(latency_run(Path(tmp), sync, args))
                print(f"   latency run sync={sync} done", flush=True)
        if "memory" in only:
            for route in ("subscribe",) + (() if args.no_live_query else ("live-query",)):
                results["memory"].append(memory_run(Path(tmp), route, args))
                print(f"   memory run {route} done", flush=True)
        if "throughput" in only:
            results["throughput"] = throughput_run(Path(tmp), args)
            print("   throughput run done", flush=True)
        if "inits" in only:
            for reading in (False, True):
                results["inits"].append(inits_run(Path(tmp), args, reading))
                print(f"   inits run {'reading' if reading else 'stalled'} done", flush=True)
        if "fanout" in only:
            for size in args.fanout_sizes.split(","):
                results["fanout"].append(fanout_run(Path(tmp), int(size), args))
                print(f"   fanout run {size} done", flush=True)
        if "flood" in only:
            results["flood"] = flood_run(args)
            print("   flood run done", flush=True)
        if "rules" in only:
            for size in args.rules_sizes.split(","):
                for feed in ("owner", "filter", "where"):
                    results["rules"].append(rules_run(Path(tmp), int(size), feed, args.rules_writes))
                print(f"   rules run {size} done", flush=True)
        if "owned" in only:
            for size in args.owned_sizes.split(","):
                results["owned"].append(owned_run(Path(tmp), int(size), args))
                print(f"   owned run {size} done", flush=True)
    show_latency(results["latency"], args)
    show_memory(results["memory"])
    show_throughput(results["throughput"])
    show_inits(results["inits"])
    show_fanout(results["fanout"])
    show_flood(results["flood"])
    show_rules(results["rules"])
    show_owned(results["owned"])
    disturbed = [
        f"latency sync={r['sync']} {label}: {r[key]['others_core0']:.0%}"
        for r in results["latency"]
        for key, label in (("alone", "alone"), ("with", "with subscribers"))
        if r[key]["others_core0"] >= DISTURBED
    ]
    if results["throughput"] and results["throughput"]["others_core0"] >= DISTURBED:
        disturbed.append(f"throughput: {results['throughput']['others_core0']:.0%}")
    if disturbed:
        print(
            "\nDISTURBED: other processes took a share of the server's core 0 (its busy time minus the "
            "server's CPU time), so these figures are not the server's alone: " + "; ".join(disturbed)
        )
    warnings = [
        w for r in results["latency"] + results["memory"] + [results["throughput"] or {}] for w in r.get("warnings", [])
    ]
    if warnings:
        print("\nserver warnings:\n   " + "\n   ".join(warnings[:20]))
    print(f"\nload average at the end: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    if args.json:
        print(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
