"""`dbsvc serve SCHEMA --workers N`: one tenant on N processes, one writer and N-1 readers.

The supervisor is the process the operator starts; it serves nothing itself. It starts
each worker as its own command line again (`sys.orig_argv`, so `dbsvc`, `python dbsvc.py`,
`python -m dbsvc` and a built app all work) with the worker variables of
`dbsvc.workers.role`, and keeps them running (docs/workers.md):

    supervisor ─┬─ writer     the server as without --workers: the tenant's lock, every
                │             write; plus a private listener on 127.0.0.1:P
                ├─ reader-1   follows the writer over 127.0.0.1:P into <tenant>/workers/reader-1,
                ├─ ...        answers reads, forwards writes to 127.0.0.1:P
                └─ reader-N-1
    all of them bind the public port with SO_REUSEPORT: the kernel spreads connections

Rules:
1. Before any worker starts, the supervisor checks what a server checks (configuration,
   the tenant, the port: exit 2 with the same one-line messages), then holds both ports
   for its whole life with sockets bound but never listening: a worker that dies leaves its
   port reserved for the next one, and a connection is only ever given to a listening
   worker (a bound socket that does not listen is no member of the SO_REUSEPORT group).
2. Start order: the writer, then, once it is ready, the readers (a reader bootstraps from
   the writer). A worker is ready when it says so with systemd's `READY=1` (notify.py) on
   the supervisor's own notification socket, an abstract AF_UNIX socket whose messages
   carry the sender's pid (SO_PASSCRED): the supervisor is its workers' service manager.
   Once every worker is ready the first time, it logs `all N workers ready on URL`,
   prints the ready banner and tells its own manager `READY=1`.
3. A worker that exits is started again after a backoff (0.1 s, doubling to 5 s; back to
   0.1 s for one that had run 10 s), the writer included: while the writer is down, the
   readers answer reads and refuse writes with 503 and `Retry-After` (forward.py rule 3).
   A worker that exits with status 2 (a usage or configuration error: another server holds
   the tenant, the schema does not fit it) before it was ever ready ends the supervisor
   with status 2 (the error is in the log, from that worker): starting it again would fail
   again.
4. SIGTERM or SIGINT: the readers are stopped first (SIGTERM: each finishes its in-flight
   requests, forwarded writes included, within SERVICE_SHUTDOWN_TIMEOUT), then the writer;
   a worker still running SERVICE_SHUTDOWN_TIMEOUT + 5 s after its signal is killed. Exit 0.
   Workers run in their own process group, so a terminal's Ctrl-C reaches the supervisor
   alone and the order holds; each worker gets SIGTERM if the supervisor itself dies
   (PR_SET_PDEATHSIG), so no worker outlives it.
5. The supervisor's log lines carry `worker=supervisor`; each worker's, its label.

Imports errors, config, logs, notify, http (binding), service and workers.role.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dbsvc.config import Config
from dbsvc.errors import ConfigError
from dbsvc.exits import EXIT_OK, EXIT_USAGE
from dbsvc.http.types import HttpSettings
from dbsvc.notify import notify
from dbsvc.workers.role import VARIABLES, WorkerRole

log = logging.getLogger("dbsvc.supervisor")

MAX_WORKERS = 1024
FIRST_BACKOFF = 0.1  # rule 3
MAX_BACKOFF = 5.0
STEADY_SECONDS = 10.0
KILL_GRACE = 5.0  # rule 4: beyond SERVICE_SHUTDOWN_TIMEOUT
PR_SET_PDEATHSIG = 1


@dataclass
class Child:
    """One worker slot: the process running in it now, if any, and its restart state."""

    role: WorkerRole
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ready: bool = False
    ever_ready: bool = False
    backoff: float = FIRST_BACKOFF  # the wait before its next start (rule 3)
    start_at: float | None = None  # when to start it again (rule 3)


def supervise(module: Any, environ: Mapping[str, str], count: int, argv: list[str] | None = None) -> int:
    """Serve `module` with `count` workers until SIGTERM/SIGINT; the exit status.

    `argv`: the command line each worker runs. By default it is this process's own again,
    which then must carry the flag. A test gives a small program of its own, so that the
    supervisor's decisions run in the test's process (tests/workers/test_supervisor_loop.py)."""
    from dbsvc.deps import require_server_packages
    from dbsvc.logs import configure_logging
    from dbsvc.service import bind, resolve_tenant_dir, server_config

    if not 2 <= count <= MAX_WORKERS:
        raise ConfigError(f"--workers must be from 1 to {MAX_WORKERS}, got {count}")
    if argv is None:
        if not any(arg.startswith("--workers") for arg in sys.orig_argv):
            # Each worker runs this process's command line again: one that does not carry the
            # flag (cli.main called from another program) would start that program N times.
            raise ConfigError(
                "--workers is given on the command line of `dbsvc serve` only (each worker runs it again)"
            )
        argv = [sys.executable, *sys.orig_argv[1:]]
    require_server_packages()
    config = server_config(module, environ)
    configure_logging(config.log_level, config.log_format, worker="supervisor")
    resolve_tenant_dir(config)
    probe = bind(config)  # rule 1: the messages of a server's bind (a port in use ...)
    port = probe[0].getsockname()[1]
    for sock in probe:
        sock.close()
    from dbsvc.http.server import bind_sockets

    public = bind_sockets(dataclasses.replace(config.http, port=port, reuse_port=True))
    private = bind_sockets(HttpSettings(host="127.0.0.1", port=0, reuse_port=True))
    try:
        key = secrets.token_urlsafe(32)
        roles = [WorkerRole(index, count, private[0].getsockname()[1], key) for index in range(count)]
        return Supervisor(config, environ, port, roles, argv).run()
    finally:
        for sock in public + private:
            sock.close()


class Supervisor:
    """Starts, watches, restarts and stops the workers (rules 2-4)."""

    def __init__(
        self, config: Config, environ: Mapping[str, str], port: int, roles: list[WorkerRole], argv: list[str]
    ) -> None:
        self.config = config
        self.port = port
        self.children = [Child(role) for role in roles]
        self.stopping = False
        self._stop_phase = 0  # rule 4: 0 not begun, 1 readers signalled, 2 the writer signalled
        self._stop_deadline = 0.0
        self.all_ready_once = False
        self.status = EXIT_OK
        self.notify_name = f"dbsvc-workers-{os.getpid()}-{secrets.token_hex(8)}"
        base = {name: value for name, value in environ.items() if name not in VARIABLES and name != "NOTIFY_SOCKET"}
        self.base_environ = {**base, "SERVICE_PORT": str(port), "NOTIFY_SOCKET": "@" + self.notify_name}
        self.manager_socket = environ.get("NOTIFY_SOCKET", "")
        self.argv = argv  # each worker's command line (supervise)

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        selector = selectors.DefaultSelector()
        inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        inbox.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        inbox.bind("\0" + self.notify_name)
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        previous_wakeup = signal.set_wakeup_fd(wake_w.fileno())
        handlers = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
        selector.register(inbox, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        try:
            readers = len(self.children) - 1
            log.info(
                "starting %d workers (a writer and %d reader%s) for tenant %r",
                len(self.children),
                readers,
                "s" if readers > 1 else "",
                self.config.tenant,
            )
            self._start(self.children[0])
            while not (self.stopping and not self._running()):
                timeout = self._next_due()
                for key, _mask in selector.select(timeout):
                    if key.fileobj is inbox:
                        self._read_notifications(inbox)
                    else:
                        _drain(wake_r)
                if self.stopping:
                    self._stop_step()
                else:
                    self._reap()
                    self._start_due()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            for child in self.children:
                if child.proc is not None and child.proc.poll() is None:
                    child.proc.kill()
                    child.proc.wait()
            selector.close()
            inbox.close()
            wake_r.close()
            wake_w.close()
        log.info("stopped; all %d workers exited", len(self.children))
        return self.status

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT) and not self.stopping:
            self._begin_stop()

    def _running(self) -> list[Child]:
        return [child for child in self.children if child.proc is not None and child.proc.poll() is None]

    def _next_due(self) -> float:
        if self.stopping:
            return 0.1
        due = [child.start_at for child in self.children if child.start_at is not None]
        return max(0.0, min(due) - time.monotonic()) if due else 1.0

    # -- starting and restarting (rules 2 and 3) --------------------------------------------

    def _start(self, child: Child) -> None:
        environ = {**self.base_environ, **child.role.environ()}
        child.proc = subprocess.Popen(self.argv, env=environ, process_group=0, preexec_fn=_die_with_parent(os.getpid()))
        child.started = time.monotonic()
        child.ready = False
        child.start_at = None
        log.info("worker %s started (pid %d)", child.role.label, child.proc.pid)

    def _reap(self) -> None:
        for child in self.children:
            if child.proc is None:
                continue
            status = child.proc.poll()
            if status is None:
                continue
            child.proc = None
            ran = time.monotonic() - child.started
            if status == EXIT_USAGE and not child.ever_ready:
                log.error(
                    "worker %s exited with status 2 before it was ready (its error is above): stopping",
                    child.role.label,
                )
                self.status = EXIT_USAGE
                self._begin_stop()
                return
            if ran >= STEADY_SECONDS:
                child.backoff = FIRST_BACKOFF
            delay = child.backoff  # rule 3: 0.1 s the first time, then 0.2, 0.4, ... 5 s
            child.backoff = min(delay * 2, MAX_BACKOFF)
            child.start_at = time.monotonic() + delay
            how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
            log.warning("worker %s %s after %.1f s; starting it again in %.1f s", child.role.label, how, ran, delay)

    def _start_due(self) -> None:
        now = time.monotonic()
        writer = self.children[0]
        for child in self.children:
            if child.start_at is None or child.start_at > now:
                continue
            if child is not writer and not writer.ever_ready:
                continue  # rule 2: readers bootstrap from a writer that was ready once
            self._start(child)

    def _read_notifications(self, inbox: socket.socket) -> None:
        while True:
            try:
                data, ancillary, _flags, _address = inbox.recvmsg(4096, socket.CMSG_SPACE(12))
            except BlockingIOError:
                return
            pid = notification_sender(ancillary)
            child = next((c for c in self.children if c.proc is not None and c.proc.pid == pid), None)
            if child is None or b"READY=1" not in data.split(b"\n"):
                continue
            child.ready = True
            first = not child.ever_ready
            child.ever_ready = True
            log.info("worker %s ready (pid %d)", child.role.label, pid)
            if child is self.children[0] and first:
                for reader in self.children[1:]:
                    if reader.proc is None and reader.start_at is None:
                        self._start(reader)
            if not self.all_ready_once and all(c.ready for c in self.children):
                self._all_ready()

    def _all_ready(self) -> None:
        from dbsvc.explorer import explorer_enabled
        from dbsvc.service import print_ready, reachable_base

        self.all_ready_once = True
        host = self.config.http.host
        log.info(
            "all %d workers ready on http://%s:%d (tenant %r)", len(self.children), host, self.port, self.config.tenant
        )
        explorer = explorer_enabled(self.config.explorer, host, self.config.auth is not None)
        print_ready(reachable_base(host, self.port), explorer, fmt=self.config.log_format)
        if self.manager_socket:
            status = f"STATUS={len(self.children)} workers on {host}:{self.port}"
            notify(["READY=1", status], {"NOTIFY_SOCKET": self.manager_socket})

    # -- stopping (rule 4) --------------------------------------------------------------------

    def _begin_stop(self) -> None:
        self.stopping = True
        self._stop_phase = 0
        self._stop_deadline = 0.0

    def _stop_step(self) -> None:
        """Readers first, then the writer; each phase signalled once and killed at its deadline."""
        readers = [c for c in self.children[1:] if c.proc is not None and c.proc.poll() is None]
        writer = self.children[0]
        now = time.monotonic()
        grace = (self.config.http.shutdown_timeout or 30.0) + KILL_GRACE
        if self._stop_phase == 0:
            if self.manager_socket:
                notify(["STOPPING=1"], {"NOTIFY_SOCKET": self.manager_socket})
            log.info("stopping: the readers first, then the writer")
            for child in readers:
                child.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            self._stop_phase, self._stop_deadline = 1, now + grace
        if self._stop_phase == 1:
            if readers and now < self._stop_deadline:
                return
            for child in readers:
                log.warning("worker %s did not stop in time: killing it", child.role.label)
                child.proc.kill()  # type: ignore[union-attr]
            if writer.proc is not None and writer.proc.poll() is None:
                writer.proc.send_signal(signal.SIGTERM)
            self._stop_phase, self._stop_deadline = 2, now + grace
        if (
            self._stop_phase == 2
            and writer.proc is not None
            and writer.proc.poll() is None
            and now >= self._stop_deadline
        ):
            log.warning("worker writer did not stop in time: killing it")
            writer.proc.kill()


def notification_sender(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The pid of a notification's sender (SCM_CREDENTIALS: pid, uid, gid), if of our user
    (rule 2). Public so that the rule is tested on the ancillary data of real datagrams
    without a worker to send them."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 12:
            pid, uid, _gid = struct.unpack("3i", data[:12])
            if uid == os.getuid():
                return pid
    return None


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        pass


def _die_with_parent(parent: int) -> Any:
    """A preexec_fn: the worker gets SIGTERM when the supervisor dies (rule 4)."""

    def arrange() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # it died before the prctl
            os._exit(1)

    return arrange
