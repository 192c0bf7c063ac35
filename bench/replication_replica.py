"""bench/replication_bench.py's replica measurements: 3. a replica's apply rate, 7. the same in
process, 6. a replica's restart before and after it compacted at its primary's cut.

What they measure is in replication_bench.py's docstring.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replication_kit import (
    ARGS,
    LOG_HEADER,
    ROOT,
    SCHEMA,
    Server,
    Servers,
    core_busy,
    core_times,
    loadavg,
    rss_mib,
    wait_idle,
)
from replication_threads import describe, roles, split, threads

# -- 3. a replica's apply rate ----------------------------------------------------------------

GROUP = 1024  # frames a group in process: a catching-up replica's (dbsvc/replica/consumer.py BATCH)
BAR_US = 1e6 / 60_000  # CPU a frame of a replica at 60k frames/s on one core: the target's bar


def one_core(us: float) -> str:
    """What `us` of CPU a frame comes to on one core, beside the target's bar."""
    return f"{1e3 / us if us > 0 else float('nan'):.1f}k frames/s on one core at that CPU (60k: {BAR_US:.1f} us)"


def log_frames(data: Path) -> list[bytes]:
    """The tenant's log frames, each as `/replicate` sends it (header and payload)."""
    from dbsvc.storage.logfile import FRAME, FRAME_HEADER_SIZE

    log = (data / "default" / "log").read_bytes()
    frames, pos = [], LOG_HEADER
    while pos < len(log):
        length = FRAME.unpack_from(log, pos)[2]
        frames.append(log[pos : pos + FRAME_HEADER_SIZE + length])
        pos += FRAME_HEADER_SIZE + length
    return frames


def apply_in_process(frames: list[bytes], group: int = GROUP) -> float:
    """us of this thread's CPU a frame to apply `frames` to a fresh store (sync off, a
    replica's collector thresholds) in groups of `group`, each awaited after the next is
    applied (as follower.py pipelines them)."""
    import gc

    from dbsvc import service
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store
    from dbsvc.storage.tenants import create_tenant

    module = compile_schema(load_schema(str(SCHEMA)))
    gc.freeze()
    # A replica's own thresholds (service.py settle_heap: `follows`), where the tree has them.
    gc.set_threshold(*getattr(service, "FOLLOWER_GC_THRESHOLDS", service.GC_THRESHOLDS))

    async def apply(store) -> None:
        pending = None
        for at in range(0, len(frames), group):
            future = store.apply_replicated_frames(frames[at : at + group])
            if pending is not None:
                await pending
            pending = future
        if pending is not None:
            await pending

    directory = tempfile.mkdtemp(prefix="dbsvc-inprocess-")
    try:
        store = Store.open(
            create_tenant(directory + "/r", "t"), module.MODELS, module.DESCRIPTION, sync="off", replication=True
        )
        start = time.thread_time()
        asyncio.run(apply(store))
        took = (time.thread_time() - start) / len(frames) * 1e6
        assert store.head_offset == len(frames), store.head_offset
        store.close()
        return took
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def measure_inprocess(data: Path, rounds: int, group: int = GROUP) -> dict:
    """The loop's share of a replica's apply, without sockets or threads: the tenant's log
    frames handed to `Store.apply_replicated_frames` of a fresh store (`apply_in_process`);
    CPU of this thread a frame, best of `rounds`."""
    frames = log_frames(data)
    figures = [apply_in_process(frames, group) for _ in range(rounds)]
    print(
        f"  {len(frames):,} frames in groups of {group}: {min(figures):.2f} us of loop CPU a frame "
        f"(rounds: {', '.join(f'{f:.2f}' for f in figures)}); load average {loadavg()}"
    )
    return {"frames": len(frames), "us_per_frame": figures}


def calibrate(frames: list[bytes], core: str) -> float:
    """The host's speed now on the replica's core: `apply_in_process` of `frames` (this
    tree's code whichever tree the replica runs), run on `core` when it names one, then
    this process is put back where it was. Its figure moves with the host (the hypervisor's
    share, caches held by neighbours), not with the replica's code: printed beside each run
    as the host's swing. It is no divisor: a calibration taken a second before a run did
    not predict that run (bench/README.md, session 20, wt-rep16), which is why the steady
    A/B is side by side (replication_pair.py)."""
    previous = os.sched_getaffinity(0)
    if core.isdigit():
        os.sched_setaffinity(0, {int(core)})
    try:
        return apply_in_process(frames)
    finally:
        os.sched_setaffinity(0, previous)


def logged_fsyncs(server: Server, wait: float = 1.0) -> int:
    """The fsyncs a stopped server says it made (service.py logs its store's counters at
    exit): one a group for a replica, so the group's mean size; 0 if not logged in `wait` s."""
    deadline = time.monotonic() + wait
    while True:
        for line in reversed(server.log):
            if "writes acknowledged," in line and line.rstrip().endswith("fsyncs"):
                return int(line.rsplit(",", 1)[1].split()[0])
        if time.monotonic() > deadline:
            return 0
        time.sleep(0.05)


def replica_python() -> list[str] | None:
    """The replica's interpreter command with `--replica-switch-interval` set before the
    server starts (`sys.setswitchinterval`: how long a thread holding the GIL runs before a
    waiting one may take it); None (the plain interpreter) without it."""
    interval = ARGS.replica_switch_interval
    if interval is None:
        return None
    return [
        sys.executable,
        "-c",
        f"import runpy, sys; sys.setswitchinterval({interval!r}); sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')",
    ]


def measure_replica(
    servers: Servers,
    primary: Server,
    head: int,
    sync: str,
    workdir: Path,
    timeout: float,
    code: Path = ROOT,
    sample: list[bytes] | None = None,
) -> dict:
    """3: one replica (of the tree `code`) from empty to the primary's head; with `sample`
    (frames), the host's speed is calibrated on the replica's core just before."""
    wait_idle(ARGS.wait_idle, f"the replica (SERVICE_SYNC={sync})")
    data = workdir / f"replica-{sync}"
    shutil.rmtree(data, ignore_errors=True)
    core = ARGS.replica_core
    calibration = calibrate(sample, core) if sample else float("nan")
    load0, cores0 = loadavg(), core_times()
    primary_cpu0 = primary.cpu()
    spawned = time.monotonic()
    replica = servers.add(
        Server(
            f"replica ({sync})",
            {"SERVICE_DATA": str(data), "SERVICE_SYNC": sync},
            ("--follow", primary.url),
            core=core,
            python=replica_python(),
            code=code,
        )
    )
    startup = replica.listening_at - spawned
    spy = None
    if ARGS.replica_pyspy:
        out = Path(ARGS.replica_pyspy) / f"replica-{sync}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(replica.proc.pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--threads",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    first: tuple[float, int] | None = None
    last: tuple[float, int] = (time.monotonic(), 0)
    deadline = time.monotonic() + timeout
    state = {}
    while time.monotonic() < deadline:
        body = replica.get_json("/metrics")
        state = body.get("replica") or {}
        now = time.monotonic()
        applied = state.get("primary_offset", 0) - state.get("lag_offsets", 0)
        if first is None:
            first = (now, applied)
            cpu_first = replica.cpu()  # the apply's own CPU, start-up left out
            threads_first = threads(replica.proc.pid)
        last = (now, applied)
        if state.get("state") == "stopped":
            raise RuntimeError(f"the replica stopped following: {state}")
        if state.get("lag_offsets") == 0 and applied >= head:
            break
        # Polled every 0.25 s, the end was read up to 0.25 s late (-4% on average, up to -7%,
        # on a 3.5 s run): within about 0.3 s of the end, at the rate so far, poll every 10 ms.
        done = applied - first[1]
        near = done > 0 and (head - applied) * (now - first[0]) / done < 0.3
        time.sleep(0.01 if near else 0.25)
    else:
        raise RuntimeError(f"the replica did not catch up within {timeout:.0f} s: {state}")
    assert first is not None
    cpu = replica.cpu()
    threads_last = threads(replica.proc.pid)
    primary_threads = threads(primary.proc.pid)
    applying = (cpu - cpu_first) / max(last[1] - first[1], 1)
    replica_rss, primary_rss = rss_mib(replica.proc.pid), rss_mib(primary.proc.pid)
    primary_cpu = primary.cpu() - primary_cpu0
    cores = core_busy(cores0, core_times())
    frames = last[1] - first[1]
    span = last[0] - first[0]
    rate = frames / span if span > 0 else float("nan")
    bootstraps = state.get("bootstraps")
    by_thread = split(threads_first, threads_last, roles(replica.proc.pid), frames)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(60)
        print(f"  py-spy samples of the replica: {Path(ARGS.replica_pyspy) / f'replica-{sync}.txt'}", flush=True)
    servers.stop(replica)
    fsyncs = logged_fsyncs(replica)
    replica_log = data / "default" / "log"
    size = replica_log.stat().st_size if replica_log.exists() else 0
    print(
        f"  SERVICE_SYNC={sync}: {frames:,} frames applied in {span:.2f} s = {rate:8,.0f} frames/s "
        f"(from its first /metrics at offset {first[1]:,}, {startup:.2f} s after spawn, bootstrap "
        f"included there; bootstraps {bootstraps}); replica CPU (user+sys) {applying * 1e6:.2f} us a frame "
        f"while applying = {one_core(applying * 1e6)}; {cpu / head * 1e6:.1f} us a frame over the whole run; "
        f"primary CPU {primary_cpu / head * 1e6:.1f} us a frame",
        flush=True,
    )
    print(
        f"           RSS at the end: replica {replica_rss:.0f} MiB, primary {primary_rss:.0f} MiB; replica log "
        f"{size:,} bytes; load average {load0}; {cores}",
        flush=True,
    )
    print(f"           by thread, a frame while applying: {describe(by_thread)}", flush=True)
    if fsyncs:
        print(f"           {fsyncs:,} fsyncs in its life: {head / fsyncs:.0f} frames a group on average", flush=True)
    print(
        f"           primary threads waiting for a core: {sum(t.wait_ns for t in primary_threads.values()) / 1e9:.2f} s "
        f"in its life; tree {code}"
        + (f"; calibration {calibration:.2f} us a frame in process on core {core}" if sample else ""),
        flush=True,
    )
    shutil.rmtree(data, ignore_errors=True)
    return {
        "sync": sync,
        "frames": frames,
        "seconds": span,
        "rate": rate,
        "startup_s": startup,
        "replica_cpu_s": cpu,
        "replica_cpu_us_applying": applying * 1e6,
        "replica_rss_mib": replica_rss,
        "primary_rss_mib": primary_rss,
        "replica_log_bytes": size,
        "load": load0,
        "cores": cores,
        "threads": by_thread,
        "fsyncs": fsyncs,
        "calibration_us": calibration,
        "code": str(code),
    }


# -- 6. a replica's restart, before and after it compacted at its primary's cut ---------------


def replica_restart(servers: Servers, data: Path, primary: Server, label: str) -> dict:
    """Stop the replica on `data` (if any), start it again following `primary`, and time it:
    from spawn to listening (its store opened: replayed), then to `/ready`."""
    spawned = time.monotonic()
    replica = servers.add(
        Server(f"replica ({label})", {"SERVICE_DATA": str(data)}, ("--follow", primary.url), core=ARGS.replica_core)
    )
    listening = replica.listening_at - spawned
    deadline = time.monotonic() + ARGS.timeout
    while True:
        try:
            replica.get_json("/ready")
            break
        except (RuntimeError, OSError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica ({label}) never became ready") from None
            time.sleep(0.05)
    ready = time.monotonic() - spawned
    rss = rss_mib(replica.proc.pid)
    return {"replica": replica, "listening_s": listening, "ready_s": ready, "rss_mib": rss}


def measure_restart(servers: Servers, data: Path, head: int, workdir: Path) -> dict:
    """restart: a replica of a never-compacted primary restarts by replaying the primary's whole
    history (before); once the primary compacted and the replica compacted at its cut
    (follower.py rule 9), it restarts from its snapshot (after)."""
    wait_idle(ARGS.wait_idle, "the restart measurement")
    copy = workdir / "restart-primary"
    shutil.copytree(data, copy)
    replica_data = workdir / "restart-replica"
    shutil.rmtree(replica_data, ignore_errors=True)
    primary = servers.add(Server("primary (restart)", {"SERVICE_DATA": str(copy)}, never_compacts=True))
    first = replica_restart(servers, replica_data, primary, "first start")
    replica = first["replica"]
    deadline = time.monotonic() + ARGS.timeout
    while (replica.get_json("/metrics").get("replica") or {}).get("lag_offsets", 1) != 0 or replica.get_json(
        "/snapshot"
    )["offset"] < head:
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not catch up")
        time.sleep(0.25)
    servers.stop(replica)
    before = replica_restart(servers, replica_data, primary, "never compacted")
    servers.stop(before.pop("replica"))
    print(
        f"  before: the replica (its log: the primary's {head:,} rows) restarts: listening after "
        f"{before['listening_s']:.2f} s, ready after {before['ready_s']:.2f} s, RSS {before['rss_mib']:.0f} MiB",
        flush=True,
    )
    servers.stop(primary)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(SERVICE_DATA=str(copy), SERVICE_TENANT="default")
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "compact"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"dbsvc compact failed: {done.stderr[-500:]}")
    primary = servers.add(Server("compacted primary (restart)", {"SERVICE_DATA": str(copy)}))
    epoch = primary.get_json("/snapshot")["epoch"]
    started = time.monotonic()
    cut = replica_restart(servers, replica_data, primary, "meets the primary's new epoch")
    replica = cut["replica"]
    while replica.get_json("/snapshot")["epoch"] != epoch:
        if time.monotonic() - started > ARGS.timeout:
            raise RuntimeError(f"the replica never took epoch {epoch}: {replica.get_json('/metrics').get('replica')}")
        time.sleep(0.05)
    took = time.monotonic() - started
    status = replica.get_json("/metrics").get("replica") or {}
    while status.get("compactions", 0) + status.get("bootstraps", 0) == 0:  # counted once the task ends
        time.sleep(0.05)
        status = replica.get_json("/metrics").get("replica") or {}
    servers.stop(replica)
    after = replica_restart(servers, replica_data, primary, "compacted at the cut")
    servers.stop(after.pop("replica"))
    servers.stop(primary)
    print(
        f"  the replica took the primary's epoch {took:.2f} s after its start (bootstraps "
        f"{status.get('bootstraps')}, compactions at the cut {status.get('compactions')})",
        flush=True,
    )
    print(
        f"  after: the replica (its snapshot at the cut) restarts: listening after "
        f"{after['listening_s']:.2f} s, ready after {after['ready_s']:.2f} s, RSS {after['rss_mib']:.0f} MiB; "
        f"load average {loadavg()}",
        flush=True,
    )
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(replica_data, ignore_errors=True)
    first.pop("replica")
    cut.pop("replica")
    return {"before": before, "after": after, "epoch_taken_s": took, "status": status}
