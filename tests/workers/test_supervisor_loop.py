"""The supervisor of `serve --workers N` in this process (dbsvc/supervisor.py rules 1-5).

`supervise(..., argv=...)` runs its loop here, on the test's main thread (it owns the signal
handlers), and starts each worker as tests/support/plan_worker.py: a real child process that
gets the worker variables and NOTIFY_SOCKET as a worker does, says READY=1 over the real
notification socket, exits, lingers or ignores SIGTERM as its plan says, and journals each
thing it did with a monotonic time. A thread of the test sends the supervisor SIGTERM (or
SIGINT) once the journal shows what the test waits for. So the supervisor's decisions are
seen at its public surfaces: the children it starts and signals and when, its exit status,
its log, the ready banner, and what it tells its own service manager. (test_workers_serve.py
runs the same supervisor with real workers, in child processes that mutation testing cannot
see: docs/mutation.md, session 19.)

No sleeps stand for an event: the driver polls the journal with a deadline. Times are only
ever checked from below (a restart no sooner than its backoff), never bounded above.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from dbsvc.errors import ConfigError
from dbsvc.supervisor import supervise
from support.authkit import TENANT, public_pem
from support.supervisor_kit import BLOG, PLAN_WORKER, SERVING, Events, all_ready, count, journal, ready, settled

# -- start order and readiness (rule 2) ---------------------------------------------------


@pytest.mark.parametrize("workers", [2, 3])
def test_readers_start_once_the_writer_is_ready_and_all_ready_is_told_once(supervisor, workers):
    readers = [f"reader-{i}" for i in range(1, workers)]
    plan = {"writer": [["sleep:0.3", "ready", "serve"]], **{r: SERVING for r in readers}}
    run = supervisor(plan, workers, stop_when=all_ready("writer", *readers))
    assert run.status == 0
    starts = [e for e in run.events if e["event"] == "start"]
    assert starts[0]["label"] == "writer"
    writer_ready = run.of("writer", "ready")[0]["at"]
    for reader in readers:
        assert len(run.of(reader, "start")) == 1
        assert run.of(reader, "start")[0]["at"] >= writer_ready
    plural = "s" if workers > 2 else ""
    assert f"starting {workers} workers (a writer and {workers - 1} reader{plural}) for tenant 'default'" in run.said
    base = f"http://127.0.0.1:{run.port}"
    assert run.said.count(f"all {workers} workers ready on {base} (tenant 'default')") == 1
    assert run.out.count("dbsvc: ready") == 1
    assert f"API       {base}/api/" in run.out
    assert f"Explorer  {base}/_/" in run.out  # a loopback bind without the guard
    assert run.manager[0] == f"READY=1\nSTATUS={workers} workers on 127.0.0.1:{run.port}".encode()
    assert run.manager[1:] == [b"STOPPING=1"]
    assert f"worker writer ready (pid {starts[0]['pid']})" in run.said
    assert f"worker writer started (pid {starts[0]['pid']})" in run.said
    assert run.says(r"stopping: the readers first, then the writer") == 1
    assert run.said[-1] == f"stopped; all {workers} workers exited"
    assert all(line.endswith(" worker=supervisor") for line in run.err.splitlines())  # rule 5


def test_the_banner_follows_the_log_format_and_the_explorer_setting(supervisor):
    run = supervisor(
        {"writer": SERVING, "reader-1": SERVING},
        stop_when=all_ready("writer", "reader-1"),
        env={"SERVICE_LOG_FORMAT": "json", "SERVICE_EXPLORER": "off"},
    )
    banner = json.loads(run.out.strip())  # one JSON object, as every log line then
    assert banner["message"] == "ready"
    assert banner["api"] == f"http://127.0.0.1:{run.port}/api/"
    assert banner["explorer"] is None
    lines = [json.loads(line) for line in run.err.splitlines()]
    assert lines and all(line["worker"] == "supervisor" for line in lines)  # rule 5
    assert any(line["message"].startswith("all 2 workers ready on ") for line in lines)


def test_behind_the_token_guard_the_banner_offers_no_explorer(supervisor, tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "idp.pem").write_bytes(public_pem(key))
    (tmp_path / "data" / TENANT).mkdir(parents=True)
    env = {"SERVICE_JWT_PUBKEY": str(tmp_path / "idp.pem"), "SERVICE_TENANT": TENANT}
    run = supervisor({"writer": SERVING, "reader-1": SERVING}, stop_when=all_ready("writer", "reader-1"), env=env)
    assert run.status == 0
    assert "Explorer  off" in run.out  # a loopback bind, but the guard is on
    assert f"all 2 workers ready on http://127.0.0.1:{run.port} (tenant {TENANT!r})" in run.said


def test_every_worker_gets_its_variables_its_own_group_and_sigterm_at_the_supervisors_death(supervisor):
    run = supervisor({"writer": SERVING, "reader-1": SERVING}, stop_when=all_ready("writer", "reader-1"))
    for start in run.of("writer", "start") + run.of("reader-1", "start"):
        assert start["pgid"] == start["pid"]  # rule 4: a terminal's Ctrl-C reaches the supervisor alone
        assert start["pdeathsig"] == signal.SIGTERM
    assert run.of("writer", "start")[0]["port"] == run.of("reader-1", "start")[0]["port"] != "0"
    writer, reader = run.of("writer", "start")[0]["variables"], run.of("reader-1", "start")[0]["variables"]
    assert (writer["DBSVC_WORKER"], reader["DBSVC_WORKER"]) == ("writer", "reader-1")
    assert writer["DBSVC_WORKERS"] == reader["DBSVC_WORKERS"] == "2"
    assert writer["DBSVC_WORKER_PORT"] == reader["DBSVC_WORKER_PORT"] != run.of("writer", "start")[0]["port"]
    assert int(writer["DBSVC_WORKER_PORT"]) > 0
    assert writer["DBSVC_WORKER_KEY"] == reader["DBSVC_WORKER_KEY"]
    assert len(writer["DBSVC_WORKER_KEY"]) >= 43  # 32 random bytes, URL-safe base64


def bind_result(host: str, port: int, reuse_port: bool) -> str:
    """What a bind of host:port from this process meets: "bound" or the errno's name."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
    return "bound"


def test_both_ports_are_held_on_loopback_for_the_workers_alone(supervisor):
    # Rule 1: while it runs, the supervisor holds the public port and the private one with
    # SO_REUSEPORT, bound and never listening: a worker binds them as it does (reuse_port),
    # anything else is refused. The private port is the kernel's choice, on 127.0.0.1 only.
    seen: dict[str, str] = {}

    def probe(events: Events) -> bool:
        if not all_ready("writer", "reader-1")(events):
            return False
        public = int(events[0]["port"])
        private = int(events[0]["variables"]["DBSVC_WORKER_PORT"])
        seen["public, plain"] = bind_result("127.0.0.1", public, reuse_port=False)
        seen["public, as a worker"] = bind_result("127.0.0.1", public, reuse_port=True)
        seen["private, plain"] = bind_result("127.0.0.1", private, reuse_port=False)
        seen["private, as a worker"] = bind_result("127.0.0.1", private, reuse_port=True)
        seen["private, another address"] = bind_result("127.0.0.2", private, reuse_port=False)
        seen["private port"] = str(private)
        return True

    run = supervisor({"writer": SERVING, "reader-1": SERVING}, stop_when=probe)
    assert run.status == 0
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert low <= int(seen.pop("private port")) <= high  # port 0's answer: no fixed number
    assert seen == {
        "public, plain": "EADDRINUSE",
        "public, as a worker": "bound",
        "private, plain": "EADDRINUSE",
        "private, as a worker": "bound",
        "private, another address": "bound",
    }


def test_the_supervisors_log_level_is_rust_log_s(supervisor):
    run = supervisor(
        {"writer": [["ready", "exit:3"], SERVING[0]], "reader-1": SERVING},
        stop_when=settled(ready("writer", 2, logged=False)),  # at warn, 'ready' is not logged
        env={"RUST_LOG": "warn"},
    )
    assert run.status == 0
    assert run.says(r"worker writer exited with status 3 after \d+\.\d s; starting it again in 0\.1 s") == 1
    assert run.says(r"starting 2 workers .*|worker .* (started|ready) .*|all 2 workers ready .*") == 0


def test_a_notification_without_ready_or_from_another_pid_is_no_readiness(supervisor):
    plan = {"writer": [["status", "ready-elsewhere", "sleep:0.4", "ready", "serve"]], "reader-1": SERVING}
    run = supervisor(plan, stop_when=all_ready("writer", "reader-1"))
    assert run.status == 0
    assert run.of("reader-1", "start")[0]["at"] >= run.of("writer", "ready")[0]["at"]
    assert run.says(r"worker writer ready \(pid \d+\)") == 1


def test_a_writer_that_exits_before_it_is_ready_is_started_again_before_any_reader(supervisor):
    plan = {"writer": [["exit:1"], ["ready", "serve"]], "reader-1": SERVING}
    run = supervisor(plan, stop_when=all_ready("writer", "reader-1"))
    assert run.status == 0
    first_exit, second_start = run.of("writer", "exit")[0]["at"], run.of("writer", "start")[1]["at"]
    assert second_start - first_exit >= 0.1
    assert run.of("reader-1", "start")[0]["at"] >= run.of("writer", "ready")[0]["at"]
    assert run.says(r"worker writer exited with status 1 after \d+\.\d s; starting it again in 0\.1 s") == 1


def test_a_writer_that_comes_back_does_not_start_the_readers_again(supervisor):
    plan = {"writer": [["ready", "await:reader-1", "exit:1"], ["ready", "serve"]], "reader-1": SERVING}
    run = supervisor(plan, stop_when=settled(ready("writer", 2)))
    assert run.status == 0
    assert len(run.of("reader-1", "start")) == 1
    assert len(run.of("writer", "start")) == 2
    assert run.says(r"all 2 workers ready on .*") == 1
    assert run.out.count("dbsvc: ready") == 1


def test_a_reader_that_never_says_ready_holds_back_the_all_ready_banner(supervisor):
    # A start is no readiness: a worker counts as ready from its READY=1 only.
    plan = {"writer": SERVING, "reader-1": [["serve"]]}
    run = supervisor(plan, stop_when=settled(lambda events: count(events, "reader-1", "start") >= 1, 0.5))
    assert run.status == 0
    assert run.says(r"all 2 workers ready on .*") == 0
    assert "dbsvc: ready" not in run.out
    assert run.manager == [b"STOPPING=1"]  # no READY=1 told to its own manager either


def test_without_a_manager_of_its_own_the_supervisor_notifies_nobody_and_warns_of_nothing(supervisor):
    # Its workers still notify the supervisor on its own socket; it has none above it to tell.
    run = supervisor(
        {"writer": SERVING, "reader-1": SERVING},
        stop_when=settled(all_ready("writer", "reader-1"), 0.5),
        env={"NOTIFY_SOCKET": None},
    )
    assert run.status == 0
    assert run.says(r"all 2 workers ready on .*") == 1
    assert run.manager == []
    assert "NOTIFY_SOCKET" not in run.err


# -- restarts (rule 3) -----------------------------------------------------------------------


def test_a_worker_that_dies_is_started_again_after_a_doubling_backoff(supervisor):
    plan = {"writer": SERVING, "reader-1": [["ready", "exit:3"], ["kill:9"], ["exit:0"], ["ready", "serve"]]}
    run = supervisor(plan, stop_when=ready("reader-1", 2))
    assert run.status == 0
    starts = [e["at"] for e in run.of("reader-1", "start")]
    exits = [e["at"] for e in run.of("reader-1", "exit")]
    assert len(starts) == 4
    for backoff, (exited, started) in zip([0.1, 0.2, 0.4], zip(exits, starts[1:], strict=False), strict=True):
        assert started - exited >= backoff
    assert run.says(r"worker reader-1 exited with status 3 after \d+\.\d s; starting it again in 0\.1 s") == 1
    assert run.says(r"worker reader-1 was killed by signal 9 after \d+\.\d s; starting it again in 0\.2 s") == 1
    assert run.says(r"worker reader-1 exited with status 0 after \d+\.\d s; starting it again in 0\.4 s") == 1
    assert len(run.of("writer", "start")) == 1
    # The supervisor's own clock: each start is logged no sooner than its backoff after the
    # exit was (the journal's start comes after the interpreter's start-up, which hides it).
    exited = run.when(r"worker reader-1 (exited|was killed) .*")
    started = run.when(r"worker reader-1 started \(pid \d+\)")[1:]
    for backoff, (exit_at, start_at) in zip([0.1, 0.2, 0.4], zip(exited, started, strict=True), strict=True):
        assert start_at - exit_at >= backoff - 0.01  # the log's milliseconds


def test_a_stop_while_the_writer_waits_for_its_restart_starts_it_no_more(supervisor):
    plan = {"writer": [["ready", "await:reader-1", "exit:1"], ["exit:1"]], "reader-1": SERVING}
    run = supervisor(plan, stop_when=lambda events: count(events, "writer", "exit") >= 4)  # then 0.8 s to wait
    assert run.status == 0
    assert len(run.of("writer", "start")) == 4
    assert run.of("writer", "term") == []
    assert len(run.of("reader-1", "term")) == 1
    assert run.said[-1] == "stopped; all 2 workers exited"


@pytest.mark.parametrize("label", ["writer", "reader-1"])
def test_status_2_before_ever_ready_ends_the_supervisor_with_status_2(supervisor, label):
    plan = {"writer": SERVING, "reader-1": SERVING, label: [["exit:2"]]}
    run = supervisor(plan)  # it stops by itself
    assert run.status == 2
    assert len(run.of(label, "start")) == 1
    assert f"worker {label} exited with status 2 before it was ready (its error is above): stopping" in run.said
    if label == "writer":
        assert run.of("reader-1", "start") == []
    else:  # the writer is stopped as at a SIGTERM
        assert run.of("writer", "term")
    assert run.said[-1] == "stopped; all 2 workers exited"


def test_status_2_after_it_was_ready_is_a_restart_like_any_other(supervisor):
    plan = {"writer": SERVING, "reader-1": [["ready", "exit:2"], ["ready", "serve"]]}
    run = supervisor(plan, stop_when=ready("reader-1", 2))
    assert run.status == 0
    assert len(run.of("reader-1", "start")) == 2
    assert run.says(r"worker reader-1 exited with status 2 after \d+\.\d s; starting it again in 0\.1 s") == 1


@pytest.mark.slow  # the writer's six backoffs: 6.3 s of waiting, 8 s on a quiet host, 20 s at load 24
def test_a_readers_exit_is_seen_while_the_writer_waits_for_its_restart(supervisor):
    # The writer's slot is empty for 3.2 s after its sixth exit; the reader exits inside
    # that wait (1 s in: the supervisor has seen the writer's exit by then, not in the same
    # pass) and must be seen, and started again, before the writer is started again.
    plan = {
        "writer": [["ready", "await:reader-1", "exit:1"], ["exit:1"]],
        "reader-1": [["ready", "exits:writer:6", "sleep:1", "exit:3"], SERVING[0]],
    }
    both = lambda events: count(events, "reader-1", "start") >= 2 and count(events, "writer", "start") >= 7  # noqa: E731
    run = supervisor(plan, stop_when=both)
    assert run.status == 0
    assert run.of("reader-1", "start")[1]["at"] < run.of("writer", "start")[6]["at"]
    assert run.says(r"worker reader-1 exited with status 3 after \d+\.\d s; starting it again in 0\.1 s") == 1


# -- stopping (rule 4) -------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signals_the_readers_first_and_the_writer_once_they_have_exited(supervisor, sig):
    plan = {"writer": SERVING, "reader-1": [["linger:0.3", "ready", "serve"]], "reader-2": SERVING}
    run = supervisor(plan, 3, stop_when=all_ready("writer", "reader-1", "reader-2"), signals=(sig,))
    assert run.status == 0
    writer_term = run.of("writer", "term")[0]["at"]
    for reader in ("reader-1", "reader-2"):
        assert len(run.of(reader, "term")) == 1
        assert run.of(reader, "exit")[0]["at"] <= writer_term
    assert len(run.of("writer", "term")) == 1
    assert "stopping: the readers first, then the writer" in run.said
    assert run.said[-1] == "stopped; all 3 workers exited"
    assert run.says(r".* did not stop in time.*") == 0
    assert all(len(run.of(label, "start")) == 1 for label in ("writer", "reader-1", "reader-2"))


def test_a_reader_deaf_to_sigterm_is_killed_at_the_deadline_and_a_second_signal_changes_nothing(supervisor):
    plan = {"writer": SERVING, "reader-1": [["deaf", "ready", "serve"]]}
    run = supervisor(
        plan,
        stop_when=all_ready("writer", "reader-1"),
        signals=(signal.SIGTERM, signal.SIGTERM),
        again_when=lambda events: count(events, "reader-1", "term") >= 1,
        env={"SERVICE_SHUTDOWN_TIMEOUT": "0.2"},
    )
    assert run.status == 0
    assert len(run.of("reader-1", "term")) == 1  # a second SIGTERM does not begin the stop again
    assert run.of("reader-1", "exit") == []  # killed, so it never said so
    # Killed no sooner than 0.2 + 5 s after the stop began: the driver's first SIGTERM comes
    # before the stop (and so before the reader's), the kill after its log line. (The
    # reader's journaled SIGTERM is no clock for this: at load its handler ran late.)
    killed = run.logged_at("worker reader-1 did not stop in time: killing it")
    assert killed - run.signalled[0] >= 0.2 + 5.0
    assert run.of("writer", "term")[0]["at"] >= killed  # the writer's turn came after the kill
    assert "worker reader-1 did not stop in time: killing it" in run.said
    assert run.says(r"worker writer did not stop in time.*") == 0


def test_a_writer_deaf_to_sigterm_is_killed_at_its_own_deadline(supervisor):
    plan = {"writer": [["deaf", "ready", "serve"]], "reader-1": [["linger:1.0", "ready", "serve"]]}
    run = supervisor(plan, stop_when=all_ready("writer", "reader-1"), env={"SERVICE_SHUTDOWN_TIMEOUT": "0.2"})
    assert run.status == 0
    # The writer's deadline runs from its own SIGTERM, which follows the reader's exit (the
    # reader journals it before it dies, a second after its SIGTERM): the kill, after its log
    # line, comes no sooner than 0.2 + 5 s after that exit. (The writer's journaled SIGTERM is
    # no clock for this: at load its handler ran late.)
    killed = run.logged_at("worker writer did not stop in time: killing it")
    assert killed - run.of("reader-1", "exit")[0]["at"] >= 0.2 + 5.0
    assert "worker writer did not stop in time: killing it" in run.said
    assert run.says(r"worker reader-1 did not stop in time.*") == 0


def test_a_loop_that_raises_kills_every_worker_still_running(supervisor, tmp_path):
    # The workers' command line removes itself at its first run, so the reader's start, once
    # the writer is ready, fails in the supervisor's loop: the writer must not outlive it.
    once = tmp_path / "once"
    once.write_text(f'#!/bin/sh\nrm -f "$0"\nexec {sys.executable} {PLAN_WORKER}\n')
    once.chmod(0o755)
    path = tmp_path / "journal-once"
    with pytest.raises(FileNotFoundError):
        supervisor({"writer": SERVING, "reader-1": SERVING}, argv=[str(once)], env={"PLAN_JOURNAL": str(path)})
    writer = journal(path)[0]
    assert writer["event"] == "start" and writer["label"] == "writer"
    try:
        assert not Path(f"/proc/{writer['pid']}").exists()  # killed, and waited for
    finally:
        if Path(f"/proc/{writer['pid']}").exists():
            os.kill(writer["pid"], signal.SIGKILL)


# -- what supervise() checks before any worker (rule 1) ------------------------------------------


@pytest.mark.parametrize("workers", [1, 1025])
def test_a_worker_count_out_of_range_is_refused(tmp_path, workers):
    with pytest.raises(ConfigError, match=rf"^--workers must be from 1 to 1024, got {workers}$"):
        supervise(BLOG, {"SERVICE_DATA": str(tmp_path)}, workers, argv=[sys.executable, PLAN_WORKER])
    assert not (tmp_path / "default").exists()


@pytest.mark.parametrize("workers", [2, 1024])  # 1024: the count check lets the largest through
def test_without_a_command_line_of_its_own_the_flag_must_be_on_this_processs(tmp_path, workers):
    # pytest's command line carries no --workers: starting it again would run the tests N times
    with pytest.raises(ConfigError, match=r"^--workers is given on the command line of `dbsvc serve` only"):
        supervise(BLOG, {"SERVICE_DATA": str(tmp_path)}, workers)
    assert not (tmp_path / "default").exists()


@pytest.mark.slow  # a worker must run 10 s (STEADY_SECONDS)
def test_a_worker_that_ran_10_seconds_starts_again_after_the_first_backoff(supervisor):
    plan = {"writer": SERVING, "reader-1": [["ready", "exit:3"], ["ready", "sleep:10.2", "exit:3"], SERVING[0]]}
    run = supervisor(plan, stop_when=ready("reader-1", 3))
    assert run.status == 0
    assert run.says(r"worker reader-1 exited with status 3 after \d+\.\d s; starting it again in 0\.1 s") == 2
    assert len(run.of("reader-1", "start")) == 3
