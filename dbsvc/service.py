"""Start-up and shutdown of one server process: config -> logs -> store -> guard -> serve.

Order matters and each step fails before the next one touches anything:
0. the server's packages are importable (`dbsvc.deps`: one line and exit 2 if not);
1. configuration is read and checked, the guard's settings with it (`dbsvc.config`, the one
   reader of SERVICE_*; ConfigError -> exit 2); a schema with access rules and no guard
   stops here (`require_guard_for_rules`);
2. logging is configured (so everything after is logged in the chosen format);
3. a named tenant must exist; the listening sockets are bound (`SERVICE_HOST`:`SERVICE_PORT`): a port in use, a host
   that is not this machine's or a port that needs privileges is one line naming the
   variable (ConfigError -> exit 2), before any tenant directory is created or opened;
   then the tenant directory is resolved: `SERVICE_TENANT` unset (guard off) serves
   `default`, creating it; a named tenant must exist (`dbsvc tenant create NAME`);
4. the store opens, taking the writer lock (TenantLocked -> exit 2, nothing touched);
5. the guard is built from its settings (JWKS fetched in the background);
   the realtime broker is attached to the store's change stream on the running loop;
6. the protocol layer serves until SIGINT/SIGTERM, then lets in-flight requests finish
   within SERVICE_SHUTDOWN_TIMEOUT; the store is flushed, fsynced and unlocked; exit 0.

`serve(module, environ)` is that whole path, shared by `dbsvc serve`, a built app and a
generated module run as a script (`main`, which generated code calls directly). Importing
this module loads neither h11 nor wsproto: the application is imported once step 0 passed.

A worker of `serve --workers N` (dbsvc/supervisor.py starts them; docs/workers.md) runs the
same path with its role from the environment (`dbsvc.workers.role`): every worker binds the
public port with SO_REUSEPORT and logs with a `worker` field; the writer is the server above
plus its private listener (dbsvc/workers/private.py); a reader follows the writer into its
own directory `<tenant>/workers/reader-K` (a read replica that never refuses writes: it
forwards them, dbsvc/workers/forward.py) and listens only once it has caught up with the
writer's head as of its start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import gc
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from dbsvc.config import Config, load_config
from dbsvc.deps import require_server_packages
from dbsvc.errors import ConfigError, CorruptLog
from dbsvc.exits import run_reporting
from dbsvc.launch import program
from dbsvc.notify import notify_ready, notify_stopping

if TYPE_CHECKING:
    from dbsvc.app import Application
    from dbsvc.interfaces import GeneratedModule, TokenGuard
    from dbsvc.replica.follower import Follower, Opener
    from dbsvc.replica.primary import Primary
    from dbsvc.storage.lock import WriterLock
    from dbsvc.workers.role import WorkerRole

log = logging.getLogger("dbsvc")


def main(module: GeneratedModule) -> int:
    """`python GENERATED.py`: serve the module with the process's environment; the exit status."""
    return run_reporting(lambda: serve(module, os.environ))


def serve(module: GeneratedModule, environ: Mapping[str, str], follow: str | None = None) -> int:
    """Check the packages, read the configuration, serve `module` until a signal, printing
    where to go once it listens. `follow`: a primary's base URL (read replica)."""
    from dbsvc.workers.role import role_from_environ

    require_server_packages()
    config = server_config(module, environ)
    worker = role_from_environ(environ)
    if worker is not None and follow is not None:
        raise ConfigError("--workers and --follow do not go together: a read replica runs as one process")

    def announce(base_url: str, explorer: bool) -> None:
        print_ready(base_url, explorer, fmt=config.log_format, primary=follow)

    return run_server(module, config, follow=follow, announce=announce if worker is None else None, worker=worker)


def server_config(module: GeneratedModule, environ: Mapping[str, str]) -> Config:
    """The Config of a server of `module`: the environment over its `[runtime]` and `[auth]`
    tables (a relative `[auth] pubkey` is relative to the schema's directory)."""
    from dbsvc.schema.ir import AuthSettings

    schema_dir = os.path.dirname(os.path.abspath(getattr(module, "SCHEMA_PATH", "") or "."))
    config = load_config(environ, module.RUNTIME, auth=AuthSettings(**module.AUTH), schema_dir=schema_dir)
    require_guard_for_rules(module, config)
    return config


def require_guard_for_rules(module: GeneratedModule, config: Config) -> None:
    """Access rules read the token's claims: a schema with any rule or token default
    (`module.RULES`) served with no guard would answer every request as a token without
    claims, so it refuses to start (ConfigError -> exit 2) before anything is touched."""
    if getattr(module, "RULES", False) and config.auth is None:
        raise ConfigError(
            "the schema has access rules (@allow or @default(token.*)) but no token guard is configured, "
            "so no request could carry the claims they read: set SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL "
            "(or pubkey / jwks_url in the schema's [auth] table) and SERVICE_TENANT"
        )


def print_ready(base_url: str, explorer: bool, *, fmt: str = "text", primary: str | None = None) -> None:
    """Where to go, on standard output once the socket listens: the log's `listening on`
    line goes to stderr and is hidden below RUST_LOG=info, this never is. With
    SERVICE_LOG_FORMAT=json it is one JSON object, as every other line then (a collector
    reading the merged streams meets nothing else); `primary`: a read replica's primary."""
    explorer_url = base_url + "/_/" if explorer else None
    if fmt == "json":
        from dbsvc.logformat import JsonFormat

        fields = {"api": f"{base_url}/api/", "openapi": f"{base_url}/openapi.json", "explorer": explorer_url}
        if primary is not None:
            fields["replica_of"] = primary
        print(JsonFormat().line(time.time(), "INFO", "dbsvc", "ready", fields), flush=True)
        return
    replica = f"  Replica   of {primary} (reads only; /ready answers 503 until its first bootstrap)\n"
    print(
        f"dbsvc: ready\n"
        f"  API       {base_url}/api/\n"
        f"  OpenAPI   {base_url}/openapi.json\n"
        f"{replica if primary is not None else ''}"
        f"  Explorer  {explorer_url or 'off (SERVICE_EXPLORER=on serves it; docs/explorer.md)'}",
        flush=True,
    )


def reachable_base(host: str, port: int) -> str:
    """The base URL a client can use: a wildcard bind (0.0.0.0, ::) listens on every
    interface but is no address to connect to, so the banner names this host's address on
    its default route (a UDP socket's connect sends nothing), else its name."""
    if host in ("0.0.0.0", "::", ""):
        family = socket.AF_INET6 if host == "::" else socket.AF_INET
        probe = "2001:db8::1" if host == "::" else "192.0.2.1"  # documentation addresses (RFC 3849, 5737)
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as udp:
                udp.connect((probe, 9))
                host = udp.getsockname()[0]
        except OSError:
            host = socket.gethostname()
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def resolve_tenant_dir(config: Config) -> str:
    """The tenant's directory, creating the implicit `default` tenant on first use."""
    from dbsvc.storage import tenants

    directory = check_tenant(config)
    if os.path.isdir(directory):
        return directory
    return str(tenants.create_tenant(config.data_dir, config.tenant))


def check_tenant(config: Config) -> str:
    """The tenant's directory path; a named tenant that does not exist is a ConfigError
    (checked before the bind: it touches nothing, and is the more useful answer)."""
    directory = os.path.join(config.data_dir, config.tenant)
    if config.tenant_explicit and not os.path.isdir(directory):
        raise ConfigError(
            f"tenant {config.tenant!r} does not exist under {config.data_dir!r}: "
            f"create it with `{program()} tenant create {config.tenant}`"
        )
    return directory


def bind(config: Config) -> list[socket.socket]:
    """The server's sockets, bound (step 3); an error the operator can fix is a ConfigError
    naming the variable and the fix, never a bare errno."""
    from dbsvc.http.server import bind_sockets

    host, port = config.http.host, config.http.port
    try:
        return bind_sockets(config.http)
    except socket.gaierror as exc:
        raise ConfigError(
            f"SERVICE_HOST {host!r} does not resolve ({exc.strerror}): set SERVICE_HOST to an address "
            "of this host (127.0.0.1, or 0.0.0.0 for every interface)"
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            message = f"port {port} is in use on {host}: set SERVICE_PORT (0 picks a free one)"
        elif exc.errno == errno.EACCES:
            message = (
                f"port {port} on {host} needs privileges this process does not have: set SERVICE_PORT "
                "to 1024 or above (and put a proxy in front), or grant CAP_NET_BIND_SERVICE"
            )
        elif exc.errno == errno.EADDRNOTAVAIL:
            message = (
                f"SERVICE_HOST {host!r} is not an address of this host: set SERVICE_HOST to one "
                "(127.0.0.1, or 0.0.0.0 for every interface)"
            )
        else:
            message = f"cannot listen on {host}:{port} (SERVICE_HOST, SERVICE_PORT): {exc.strerror or exc}"
        raise ConfigError(message) from exc


def build_guard(config: Config) -> TokenGuard | None:
    """The token guard, or None when no key source is configured (cryptography stays unimported)."""
    if config.auth is None:
        return None
    from dbsvc.auth import Guard

    return Guard(config.auth)  # load_auth_config has already required SERVICE_TENANT


def host_check(config: Config, guarded: bool) -> Config:
    """`config` with the Host names its server answers (dbsvc/http/hosts.py): those of
    SERVICE_ALLOWED_HOSTS, else the loopback names for a loopback bind with the guard off
    (the explorer's default: a rebinding page must not read it), else any."""
    from dbsvc.explorer.page import is_loopback
    from dbsvc.http.hosts import LOOPBACK_NAMES

    if config.http.allowed_hosts or guarded or not is_loopback(config.http.host):
        return config
    return dataclasses.replace(config, http=dataclasses.replace(config.http, allowed_hosts=LOOPBACK_NAMES))


def run_server(
    module: GeneratedModule,
    config: Config,
    follow: str | None = None,
    announce: Callable[[str, bool], None] | None = None,
    worker: WorkerRole | None = None,
) -> int:
    """Serve a generated module until a signal; the exit status for the command line.
    `config` is `server_config(module, ...)`; `follow`: the base URL of a primary this
    server is a read replica of. `announce(base URL, explorer on)` is called once the
    socket listens (the command line prints the URLs). `worker`: this process's role in
    `serve --workers N` (the module docstring)."""
    from dbsvc import exits
    from dbsvc.logs import configure_logging, json_error_writer

    configure_logging(config.log_level, config.log_format, worker=worker.label if worker is not None else None)
    json_errors = json_error_writer()
    if json_errors is not None:  # SERVICE_LOG_FORMAT=json: the exit's error line is JSON too
        exits.reporter[:] = [json_errors]
    guard = build_guard(config)
    check_tenant(config)
    if worker is not None:  # every worker binds the public port (docs/workers.md)
        config = dataclasses.replace(config, http=dataclasses.replace(config.http, reuse_port=True))
    sockets = bind(config)
    try:
        return _run_bound(module, config, guard, sockets, follow, announce, worker)
    finally:
        for sock in sockets:
            sock.close()  # already closed when served; a start that failed leaves them here


def _run_bound(
    module: GeneratedModule,
    config: Config,
    guard: TokenGuard | None,
    sockets: list[socket.socket],
    follow: str | None,
    announce: Callable[[str, bool], None] | None,
    worker: WorkerRole | None = None,
) -> int:
    """`run_server` from the tenant on, the sockets bound."""
    from dbsvc.app import Application
    from dbsvc.explorer import explorer_enabled
    from dbsvc.storage import Store
    from dbsvc.storage.recovery import AUTO_COMPACT_BYTES

    directory = resolve_tenant_dir(config)

    def open_store(
        lock: WriterLock | None = None, where: str | None = None, compact_bytes: int = AUTO_COMPACT_BYTES
    ) -> Store:
        store = Store.open(
            where or directory,
            module.MODELS,
            module.DESCRIPTION,
            sync=config.sync,
            replication=config.replication,
            ring_capacity=config.changefeed_capacity,
            retain_bytes=config.replication_retain_bytes,
            lock=lock,
            compact_bytes=compact_bytes,
        )
        store.compactor.huge_pages = config.huge_pages
        return store

    follower = None
    primary: Primary | None = None
    if worker is not None and worker.index > 0:  # a reader follows the writer (docs/workers.md)
        from dbsvc.workers.private import WriterPrimary

        primary = WriterPrimary(worker.private_port, worker.key)
        try:
            primary.snapshot()  # the writer must be up, else exit 1: the supervisor starts us again
        except (OSError, ValueError) as exc:
            raise OSError(f"the writer does not answer on 127.0.0.1:{worker.private_port} ({exc})") from exc
        directory = os.path.join(directory, "workers", worker.label)
        os.makedirs(directory, exist_ok=True)
        follow = f"http://127.0.0.1:{worker.private_port}"
        config = dataclasses.replace(config, follow_rebootstrap=True)  # the writer is the truth
    if follow is None:
        store = open_store()
    else:

        def follower_of(directory: str) -> Follower:
            def opener(lock: WriterLock | None) -> Store:
                return open_store(lock, directory, compact_bytes=FOLLOWER_COMPACT_BYTES)

            return build_follower(module, config, follow, directory, opener, primary)

        try:
            follower = follower_of(directory)
        except CorruptLog as exc:
            if primary is None:  # a replica's copy may be all there is: the operator decides
                raise
            # A reader's directory is a cache of the writer's (docs/workers.md): start afresh.
            log.warning("this reader's copy is damaged (%s): discarding it and copying the writer again", exc)
            shutil.rmtree(directory)
            os.makedirs(directory)
            follower = follower_of(directory)
        store = follower.store
    from dbsvc.realtime.broker import Broker

    broker = Broker(store, module.BY_NAME, config.changefeed_capacity, config.changefeed_bytes)
    app = Application(
        module,
        store,
        broker,
        guard=guard,
        replication=config.replication,
        origins=config.http.cors_origins,
        replica=follower.status if follower else None,
        explorer=explorer_enabled(config.explorer, config.http.host, guard is not None),
        list_cache_bytes=config.list_cache_bytes,
    )
    if worker is not None:
        app.worker = worker.describe(os.getpid())
    config = host_check(config, guard is not None)
    settle_heap(config.huge_pages, follows=follower is not None)
    try:
        if follower is not None:
            follower.on_store = app.use_store
        asyncio.run(_serve(app, config, guard, sockets, follower, announce, worker))
    finally:
        store = follower.store if follower is not None else store  # app.store, unless a follower swapped it
        stats = store.stats()
        store.close()
    log.info("storage: %d writes acknowledged, %d fsyncs", stats["commits"], stats["fsyncs"])
    log.info("stopped; tenant %r closed cleanly", config.tenant)
    return 0


def settle_heap(huge_pages: bool = True, follows: bool = False) -> None:
    """Before serving: freeze what start-up built (store, compiled module, app) out of the
    cyclic GC's way, and make full collections rarer. A full collection walks every
    tracked object not frozen, so its pause grows with the records written since the
    last freeze (open or compaction, storage/store.py); at the default thresholds it ran
    several times a second under durable POSTs and set the p99 (docs/decisions.md, "Pauses").
    A server that `follows` a primary (a replica, a worker's reader) takes the young
    generation's threshold of FOLLOWER_GC_THRESHOLDS: its apply allocates in groups of
    up to 1,024 frames, and young collections ten times rarer cost it about half the
    collector's CPU a frame (docs/decisions.md, wt-rep14).
    Then the heap is advised for huge pages, unless `huge_pages` is off (SERVICE_HUGE_PAGES)."""
    gc.freeze()
    gc.set_threshold(*(FOLLOWER_GC_THRESHOLDS if follows else GC_THRESHOLDS))
    if huge_pages:
        from dbsvc.storage.heap import advise_heap  # here: importing service loads no storage

        advise_heap()


# Young collections every 2,000 tracked allocations (default 700), the middle generation
# every 10 of them, a full collection considered every 100 of those (default 10, 10).
GC_THRESHOLDS = (2_000, 10, 100)
# A follower's: young collections every 20,000 allocations (each one ~10 times longer, a few
# ms, beside a group's ~10 ms apply that readers already wait behind).
FOLLOWER_GC_THRESHOLDS = (20_000, 10, 100)

# A replica never compacts on its own: its epochs are the primary's (replica/follower.py).
FOLLOWER_COMPACT_BYTES = 1 << 62


def build_follower(
    module: GeneratedModule, config: Config, follow: str, directory: str, opener: Opener, primary: Primary | None = None
) -> Follower:
    """The read replica's follower: store opened, fingerprint checked, bootstrapped if empty.
    `primary`: how to reach it, when not over HTTP at `follow` (a worker's writer)."""
    from dbsvc.replica.consumer import parse_endpoint
    from dbsvc.replica.follower import Follower
    from dbsvc.schema.describe import schema_fingerprint

    endpoint = parse_endpoint(follow)
    follower = Follower(
        endpoint,
        directory,
        opener,
        schema_fingerprint(module.DESCRIPTION),
        token=config.token,
        rebootstrap=config.follow_rebootstrap,
        primary=primary,
    )
    try:
        follower.prepare()
    except BaseException:
        follower.store.close()
        raise
    return follower


async def _serve(
    app: Application,
    config: Config,
    guard: TokenGuard | None,
    sockets: list[socket.socket],
    follower: Follower | None = None,
    announce: Callable[[str, bool], None] | None = None,
    worker: WorkerRole | None = None,
) -> None:
    from dbsvc.http.hub import Hub
    from dbsvc.http.server import serve_until_signalled
    from dbsvc.workers import run as workers

    def on_ready(port: int) -> None:
        log.info("listening on http://%s:%d (tenant %r)", config.http.host, port, config.tenant)
        notify_ready(f"listening on {config.http.host}:{port} (tenant {config.tenant})")  # Type=notify units
        if announce is not None:
            announce(reachable_base(config.http.host, port), app.explorer is not None)

    if guard is not None:
        await guard.start()
    loop = asyncio.get_running_loop()
    app.broker.attach(loop.call_soon, loop.call_later)
    front = workers.front(app, worker, follower)  # a reader forwards writes; else the app itself
    hub = Hub(front.handler, config.http, loop)
    hub.meter = app.meters.unmatched  # requests no route matched (dbsvc/metrics.py rule 1)
    app.connections = lambda: {"http": len(hub.connections) - hub.sockets, "websockets": hub.sockets}
    if follower is not None:
        follower.start(loop)
    try:
        await front.start(app, config.http)  # the writer's private listener; a reader's catch-up
        await serve_until_signalled(front.handler, config.http, on_ready=on_ready, sockets=sockets, hub=hub)
    finally:
        await front.stop()
        notify_stopping()
        if follower is not None:
            await loop.run_in_executor(None, follower.stop)
        app.broker.detach()
        app.accepting = False
        if guard is not None:
            guard.close()
