"""bench/realtime_bench.py's default runs: 1. latency, 2. memory per idle socket, 3. throughput.

Each a run function (a dict of figures) and its show function (the printed rows); what they
measure is in realtime_bench.py's docstring.
"""

from __future__ import annotations

import argparse
import array
import multiprocessing
import time
from pathlib import Path

from realtime_kit import Receivers
from realtime_serve import (
    Server,
    core_busy,
    core_times,
    cores_text,
    disturbed_text,
    flood_main,
    ms_summary,
    others_on_server_core,
    paced_writes,
    write_figures,
)

# -- 1. latency -----------------------------------------------------------------------------------


def latency_run(tmp: Path, sync: str, args: argparse.Namespace) -> dict:
    filtered_n = int(round(args.subscribers * args.filtered))
    unfiltered_n = args.subscribers - filtered_n
    names = [f"sub-{i:04d}" for i in range(max(1, filtered_n))]
    paths = [("/subscribe/user", False)] * unfiltered_n + [
        (f"/subscribe/user?name={n}", True) for n in names[:filtered_n]
    ]
    count = int(args.rate * args.duration)
    warm = int(args.rate * args.warmup)
    limit = args.duration * 3 + 30
    server = Server(tmp, f"latency-{sync}", sync)
    result: dict = {
        "sync": sync,
        "subscribers": args.subscribers,
        "unfiltered": unfiltered_n,
        "filtered": filtered_n,
        "rate": args.rate,
        "procs": args.procs,
    }
    receivers = None
    try:
        # a. the writes alone
        paced_writes(server.port, args.rate, warm, names, "warm0", limit)
        cpu0, cores0 = server.cpu(), core_times()
        alone = paced_writes(server.port, args.rate, count, names, "alone", limit)
        result["alone"] = write_figures(alone, server.cpu() - cpu0, core_busy(cores0, core_times()))
        # b. the same writes with the subscribers
        opened_at = time.monotonic()
        receivers = Receivers(server.port, paths, args.procs, timed=True)
        result["open_seconds"] = time.monotonic() - opened_at
        result["opened"] = receivers.opened
        result["open_errors"] = receivers.errors
        result["server_subscriptions"] = server.wait_for("subscriptions", args.subscribers, 30)
        paced_writes(server.port, args.rate, warm, names, "warm1", limit)
        time.sleep(1.0)
        receivers.ask("reset")
        before = server.realtime()
        rss_before = server.rss()
        cpu0, client0, cores0 = server.cpu(), receivers.cpu(), core_times()
        fan = paced_writes(server.port, args.rate, count, names, "fan", limit)
        fan_cpu, client_cpu = server.cpu() - cpu0, receivers.cpu() - client0
        fan_cores = core_busy(cores0, core_times())
        expected = fan["writes"] * unfiltered_n + (fan["writes"] if filtered_n else 0)
        deadline = time.monotonic() + 15
        got = receivers.frames()
        while got < expected and time.monotonic() < deadline:
            time.sleep(0.2)
            got = receivers.frames()
        after = server.realtime()
        stats = receivers.ask("stats")
        result["rss_growth_during_run"] = server.rss() - rss_before
    finally:
        if receivers is not None:
            receivers.stop()
        server.stop()
    kernel = {False: array.array("q"), True: array.array("q")}
    user = {False: array.array("q"), True: array.array("q")}
    done: dict[int, int] = {}  # send ts -> the write's last delivery (at the socket)
    counts: dict[bool, list[int]] = {False: [], True: []}
    closes: dict[int, int] = {}
    for answer in stats:
        for kind in (False, True):
            ts, k, u = array.array("q"), array.array("q"), array.array("q")
            ts.frombytes(answer["ts"][kind])
            k.frombytes(answer["kernel"][kind])
            u.frombytes(answer["user"][kind])
            kernel[kind].extend(k)
            user[kind].extend(u)
            for sent, value in zip(ts, k):
                if value > done.get(sent, -1):
                    done[sent] = value
        for _path, kind, n in answer["counts"]:
            counts[kind].append(n)
        for code, n in answer["closes"].items():
            closes[code] = closes.get(code, 0) + n
    result["with"] = {
        **write_figures(fan, fan_cpu, fan_cores),
        "client_cpu_share": client_cpu / max(1e-9, fan["elapsed"]),
        "deliveries_per_write": unfiltered_n + (1 if filtered_n else 0),
        "expected": expected,
        "received": len(kernel[False]) + len(kernel[True]),
        "socket": ms_summary(kernel[False] + kernel[True]),
        "client": ms_summary(user[False] + user[True]),
        "socket_unfiltered": ms_summary(kernel[False]),
        "socket_filtered": ms_summary(kernel[True]),
        "fanout_done": ms_summary(done.values()),
        "per_socket_min_max": {
            ("filtered" if k else "unfiltered"): (min(v), max(v)) if v else None for k, v in counts.items()
        },
        "events_sent": after["events_sent"] - before["events_sent"],
        "lagged_closes": after["lagged_closes"] - before["lagged_closes"],
        "close_codes": closes,
    }
    result["warnings"] = server.warnings()[:10]
    return result


# -- 2. memory per idle socket ---------------------------------------------------------------------


def memory_run(tmp: Path, route: str, args: argparse.Namespace) -> dict:
    """RSS per idle socket; then `--memory-rounds - 1` more rounds of closing every socket and
    opening as many again on the same server (a leak would grow RSS round after round)."""
    key = "subscriptions" if route == "subscribe" else "live_queries"
    server = Server(tmp, f"memory-{route}", "off")
    receivers = None
    rounds: list[tuple[int, int]] = []  # (RSS with the sockets open, RSS after closing them)
    try:
        # warm the path once (first socket imports, caches), then the baseline
        warm = Receivers(server.port, [(f"/{route}/user", False)] * 10, 1, timed=False)
        warm.stop()
        server.wait_for(key, 0, 10)
        before = server.settled_rss()
        for number in range(max(1, args.memory_rounds)):
            started = time.monotonic()
            receivers = Receivers(server.port, [(f"/{route}/user", False)] * args.idle, args.memory_procs, timed=False)
            if number == 0:
                open_seconds = time.monotonic() - started
                opened, errors = receivers.opened, receivers.errors
                seen = server.wait_for(key, args.idle, 60)
            else:
                server.wait_for(key, args.idle, 60)
            after = server.settled_rss()
            receivers.stop()
            receivers = None
            server.wait_for(key, 0, 60)
            rounds.append((after, server.settled_rss()))
    finally:
        if receivers is not None:
            receivers.stop()
        server.stop()
    return {
        "route": f"/{route}/user",
        "sockets": opened,
        "server_count": seen,
        "errors": errors,
        "open_seconds": open_seconds,
        "rss_before": before,
        "rss_after": rounds[0][0],
        "rss_after_close": rounds[0][1],
        "rounds": rounds,
        "bytes_per_socket": (rounds[0][0] - before) / max(1, opened),
        "warnings": server.warnings()[:10],
    }


# -- 3. events/s to N unfiltered subscribers ---------------------------------------------------------


def throughput_run(tmp: Path, args: argparse.Namespace) -> dict:
    server = Server(tmp, "throughput", "off")
    receivers = None
    writer = None
    try:
        receivers = Receivers(
            server.port, [("/subscribe/user", False)] * args.fanout_subscribers, args.fanout_procs, timed=False
        )
        server.wait_for("subscriptions", args.fanout_subscribers, 30)
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe()
        total = args.warmup + args.window + 1.0
        writer = ctx.Process(
            target=flood_main, args=(theirs, server.port, args.writers, total, 10_000_000), daemon=True
        )
        writer.start()
        theirs.close()
        time.sleep(args.warmup)
        t0, frames0, cpu0 = time.monotonic(), receivers.frames(), server.cpu()
        rows0, rt0, cores0, client0 = server.users(), server.realtime(), core_times(), receivers.cpu()
        time.sleep(args.window)
        t1, frames1, cpu1 = time.monotonic(), receivers.frames(), server.cpu()
        rows1, rt1, cores1, client1 = server.users(), server.realtime(), core_times(), receivers.cpu()
        window = t1 - t0
        flood = mine.recv() if mine.poll(total + 60) else {"writes": -1, "errors": -1, "elapsed": 0}
        writer.join(10)
        time.sleep(1.0)
        final = receivers.ask("stats")
        rt2 = server.realtime()
        rows2 = server.users()
    finally:
        if writer is not None and writer.is_alive():
            writer.kill()
        if receivers is not None:
            receivers.stop()
        server.stop()
    closes: dict[int, int] = {}
    for answer in final:
        for code, n in answer["closes"].items():
            closes[code] = closes.get(code, 0) + n
    received_total = sum(n for answer in final for _p, _k, n in answer["counts"])
    return {
        "subscribers": args.fanout_subscribers,
        "writers": args.writers,
        "window": window,
        "writes_per_s": (rows1 - rows0) / window,
        "events_per_s": (frames1 - frames0) / window,
        "events_sent_per_s": (rt1["events_sent"] - rt0["events_sent"]) / window,
        "server_cpu_share": (cpu1 - cpu0) / window,
        "receivers_cpu_share": (client1 - client0) / window,
        "cores": core_busy(cores0, cores1),
        "others_core0": others_on_server_core(core_busy(cores0, cores1), cpu1 - cpu0, window),
        "flood": flood,
        "total_writes": rows2,
        "total_received": received_total,
        "expected_total": rows2 * args.fanout_subscribers,
        "lagged_closes": rt2["lagged_closes"],
        "client_close_codes": closes,
        "open_at_end": sum(answer["open"] for answer in final),
        "warnings": server.warnings()[:10],
    }


# -- report -------------------------------------------------------------------------------------------


def show_latency(runs: list[dict], args: argparse.Namespace) -> None:
    if not runs:
        return
    r0 = runs[0]
    print(
        f"\n1. fan-out latency: {r0['subscribers']} subscribers = {r0['unfiltered']} /subscribe/user + "
        f"{r0['filtered']} /subscribe/user?name=sub-NNNN (distinct names) in {r0['procs']} receiver processes; "
        f"{args.rate:g} POST /api/user per s for {args.duration:g} s, each write naming one filtered subscriber "
        f"round-robin, so it reaches every unfiltered socket plus one filtered socket "
        f"({r0['with']['deliveries_per_write']} deliveries per write)"
    )
    print(
        "   latency from the writer's clock just before send() to: the kernel's receive stamp on the socket "
        "(\"at socket\", the server's part) or the receiver process reading it (\"in client\"); all times ms"
    )
    print(
        f"   {'sync':4} {'subs':>5} {'writes':>6} {'w/s':>6} | {'HTTP p50':>8} {'p99':>6} {'max':>6} "
        f"{'(client p99)':>12} | {'server us/write':>15} | busy: core 0, core 1"
    )
    for r in runs:
        for subs, row in ((0, r["alone"]), (r["opened"], r["with"])):
            print(
                f"   {r['sync']:4} {subs:>5} {row['writes']:>6} {row['rate']:>6.1f} | {row['http']['p50_ms']:>8.2f} "
                f"{row['http']['p99_ms']:>6.2f} {row['http']['max_ms']:>6.2f} "
                f"{row['http_client']['p99_ms']:>12.2f} | "
                f"{row['cpu_us_per_write']:>15.0f} | {cores_text(row['cores'])}"
                f"{disturbed_text(row['others_core0'])}"
                f"{'; late ' + str(row['late']) if row['late'] else ''}"
                f"{'; errors ' + str(row['errors']) if row['errors'] else ''}"
            )
    print(
        f"\n   {'sync':4} {'deliveries':>10} | {'at socket p50':>13} {'p99':>6} {'p99.9':>6} {'max':>6} | "
        f"{'in client p50':>13} {'p99':>6} {'max':>6} | {'fan-out done p50':>16} {'p99':>6} {'max':>6}"
    )
    for r in runs:
        w = r["with"]
        k, u, d = w["socket"], w["client"], w["fanout_done"]
        print(
            f"   {r['sync']:4} {w['received']:>10} | {k['p50_ms']:>13.2f} {k['p99_ms']:>6.2f} {k['p999_ms']:>6.2f} "
            f"{k['max_ms']:>6.2f} | {u['p50_ms']:>13.2f} {u['p99_ms']:>6.2f} {u['max_ms']:>6.2f} | "
            f"{d['p50_ms']:>16.2f} {d['p99_ms']:>6.2f} {d['max_ms']:>6.2f}"
        )
    print("   (fan-out done: per write, its last delivery at a socket)")
    for r in runs:
        w = r["with"]
        worst = max(w["socket"]["p99_ms"], w["client"]["p99_ms"])
        verdict = "holds" if worst < 50 else "FAILS"
        print(
            f"   sync={r['sync']}: p99 {w['socket']['p99_ms']:.2f} ms at the socket, {w['client']['p99_ms']:.2f} ms "
            f"in the client -> target p99 < 50 ms {verdict}; unfiltered/filtered p99 at the socket "
            f"{w['socket_unfiltered']['p99_ms']:.2f}/{w['socket_filtered']['p99_ms']:.2f}; missing deliveries "
            f"{w['expected'] - w['received']}, server events_sent {w['events_sent']}, lagged closes "
            f"{w['lagged_closes']}, close codes {w['close_codes'] or 'none'}; frames per socket "
            f"{w['per_socket_min_max']}; receivers' CPU {w['client_cpu_share']:.0%} of core 1; "
            f"{r['opened']} sockets opened in {r['open_seconds']:.1f} s"
            f"{', errors ' + str(r['open_errors']) if r['open_errors'] else ''}; server RSS "
            f"{r['rss_growth_during_run'] / 1024:+.0f} KiB over the measured writes"
        )


def show_memory(runs: list[dict]) -> None:
    if not runs:
        return
    print("\n2. server memory per idle socket (VmRSS, settled; kernel socket buffers not included)")
    print(
        f"   {'route':18} {'sockets':>7} {'RSS before':>10} {'after':>10} {'after close':>11} "
        f"{'bytes/socket':>12} {'open s':>6}"
    )
    for r in runs:
        print(
            f"   {r['route']:18} {r['sockets']:>7} {r['rss_before'] / 2**20:>8.1f}Mi "
            f"{r['rss_after'] / 2**20:>8.1f}Mi "
            f"{r['rss_after_close'] / 2**20:>9.1f}Mi {r['bytes_per_socket']:>12,.0f} {r['open_seconds']:>6.1f}"
            f"{'  errors ' + str(r['errors']) if r['errors'] else ''}"
            f"{'  server counted ' + str(r['server_count']) if r['server_count'] != r['sockets'] else ''}"
        )
        if len(r["rounds"]) > 1:
            print(
                f"   {'':18} rounds of open/close on the same server, RSS open/closed: "
                + ", ".join(f"{a / 2**20:.1f}/{b / 2**20:.1f}Mi" for a, b in r["rounds"])
            )


def show_throughput(r: dict | None) -> None:
    if not r:
        return
    print(
        f"\n3. delivery rate: {r['subscribers']} unfiltered /subscribe/user, writer on {r['writers']} keep-alive "
        f"connections as fast as it goes (SERVICE_SYNC=off), {r['window']:.1f} s window"
    )
    print(
        f"   {r['events_per_s']:,.0f} events/s received (server events_sent {r['events_sent_per_s']:,.0f}/s) "
        f"at {r['writes_per_s']:,.0f} writes/s; server CPU {r['server_cpu_share']:.0%} of core 0, receivers "
        f"{r['receivers_cpu_share']:.0%}; busy: {cores_text(r['cores'])}"
        f"{disturbed_text(r['others_core0'])}"
    )
    print(
        f"   whole run: {r['total_writes']} writes, {r['total_received']} frames received of "
        f"{r['expected_total']} expected; lagged closes {r['lagged_closes']}, client close codes "
        f"{r['client_close_codes'] or 'none'}, sockets open at the end {r['open_at_end']}"
    )
