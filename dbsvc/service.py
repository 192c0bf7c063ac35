"""Start-up and shutdown of one server process: config -> logs -> store -> guard -> serve.

Order matters and each step fails before the next one touches anything:
1. configuration is read and checked (ConfigError -> exit 2);
2. logging is configured (so everything after is logged in the chosen format);
3. the tenant directory is resolved: `SERVICE_TENANT` unset (guard off) serves `default`,
   creating it; a named tenant must exist (`dbsvc tenant create NAME`);
4. the store opens, taking the writer lock (TenantLocked -> exit 2, nothing touched);
5. the guard is built (PEM loaded now; JWKS fetched in the background);
   the realtime broker is attached to the store's change stream on the running loop;
6. the protocol layer serves until SIGINT/SIGTERM, then lets in-flight requests finish
   within SERVICE_SHUTDOWN_TIMEOUT; the store is flushed, fsynced and unlocked; exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from dbsvc.app import Application
from dbsvc.config import Config, load_config
from dbsvc.errors import ConfigError

log = logging.getLogger("dbsvc")


def resolve_tenant_dir(config: Config) -> str:
    """The tenant's directory, creating the implicit `default` tenant on first use."""
    from dbsvc.storage import tenants

    directory = os.path.join(config.data_dir, config.tenant)
    if os.path.isdir(directory):
        return directory
    if config.tenant_explicit:
        raise ConfigError(
            f"tenant {config.tenant!r} does not exist under {config.data_dir!r}: "
            f"create it with `dbsvc tenant create {config.tenant}`"
        )
    return str(tenants.create_tenant(config.data_dir, config.tenant))


def build_guard(module: Any, environ: Mapping[str, str], config: Config) -> Any:
    """The token guard, or None when no key source is configured (cryptography stays unimported)."""
    from dbsvc.auth import Guard, load_auth_config
    from dbsvc.schema.ir import AuthSettings

    schema_dir = os.path.dirname(os.path.abspath(getattr(module, "SCHEMA_PATH", "") or "."))
    auth_config = load_auth_config(environ, AuthSettings(**module.AUTH), schema_dir)
    if auth_config is None:
        return None
    return Guard(auth_config)    # load_auth_config has already required SERVICE_TENANT


def run_server(module: Any, environ: Mapping[str, str], follow: str | None = None) -> int:
    """Serve a generated module until a signal; the exit status for the command line.
    `follow`: the base URL of a primary this server is a read replica of."""
    from dbsvc.logs import configure_logging
    from dbsvc.storage import Store
    from dbsvc.storage.recovery import AUTO_COMPACT_BYTES

    config = load_config(environ, module.RUNTIME)
    configure_logging(config.log_level, config.log_format)
    guard = build_guard(module, environ, config)
    directory = resolve_tenant_dir(config)

    def open_store(lock: Any = None, compact_bytes: int = AUTO_COMPACT_BYTES) -> Store:
        return Store.open(directory, module.MODELS, module.DESCRIPTION, sync=config.sync,
                          replication=config.replication, ring_capacity=config.changefeed_capacity,
                          retain_bytes=config.replication_retain_bytes, lock=lock,
                          compact_bytes=compact_bytes)

    follower = None
    if follow is None:
        store = open_store()
    else:
        follower = build_follower(module, environ, follow, directory,
                                  lambda lock: open_store(lock, compact_bytes=FOLLOWER_COMPACT_BYTES))
        store = follower.store
    from dbsvc.realtime.broker import Broker

    broker = Broker(store, module.BY_NAME, config.changefeed_capacity)
    app = Application(module, store, broker, guard=guard, replication=config.replication,
                      origins=config.http.cors_origins, replica=follower.status if follower else None)
    try:
        if follower is not None:
            follower.on_store = app.use_store
        asyncio.run(_serve(app, config, guard, follower))
    finally:
        store = follower.store if follower is not None else app.store
        stats = store.stats()
        store.close()
    log.info("storage: %d writes acknowledged, %d fsyncs", stats["commits"], stats["fsyncs"])
    log.info("stopped; tenant %r closed cleanly", config.tenant)
    return 0


# A replica never compacts on its own: its epochs are the primary's (replica/follower.py).
FOLLOWER_COMPACT_BYTES = 1 << 62


def build_follower(module: Any, environ: Mapping[str, str], follow: str, directory: str, opener: Any) -> Any:
    """The read replica's follower: store opened, fingerprint checked, bootstrapped if empty."""
    from dbsvc.replica.consumer import parse_endpoint
    from dbsvc.replica.follower import Follower
    from dbsvc.schema.describe import schema_fingerprint

    endpoint = parse_endpoint(follow)
    follower = Follower(endpoint, directory, opener, schema_fingerprint(module.DESCRIPTION),
                        token=environ.get("SERVICE_FOLLOW_TOKEN") or None)
    try:
        follower.prepare()
    except BaseException:
        follower.store.close()
        raise
    return follower


async def _serve(app: Application, config: Config, guard: Any, follower: Any = None) -> None:
    from dbsvc.http.server import serve_until_signalled

    def on_ready(port: int) -> None:
        log.info("listening on http://%s:%d (tenant %r)", config.http.host, port, config.tenant)

    if guard is not None:
        await guard.start()
    loop = asyncio.get_running_loop()
    app.broker.attach(loop.call_soon)
    if follower is not None:
        follower.start(loop)
    try:
        await serve_until_signalled(app, config.http, on_ready=on_ready)
    finally:
        if follower is not None:
            await loop.run_in_executor(None, follower.stop)
        app.broker.detach()
        app.accepting = False
        if guard is not None:
            guard.close()
