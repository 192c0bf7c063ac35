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


def run_server(module: Any, environ: Mapping[str, str]) -> int:
    """Serve a generated module until a signal; the exit status for the command line."""
    from dbsvc.logs import configure_logging
    from dbsvc.storage import Store

    config = load_config(environ, module.RUNTIME)
    configure_logging(config.log_level, config.log_format)
    guard = build_guard(module, environ, config)
    directory = resolve_tenant_dir(config)
    store = Store.open(
        directory,
        module.MODELS,
        module.DESCRIPTION,
        sync=config.sync,
        replication=config.replication,
        ring_capacity=config.changefeed_capacity,
    )
    from dbsvc.realtime.broker import Broker

    broker = Broker(store, module.BY_NAME, config.changefeed_capacity)
    app = Application(module, store, guard=guard, replication=config.replication, broker=broker,
                      origins=config.http.cors_origins)
    try:
        asyncio.run(_serve(app, config, guard))
    finally:
        stats = store.stats()
        store.close()
    log.info("storage: %d writes acknowledged, %d fsyncs", stats["commits"], stats["fsyncs"])
    log.info("stopped; tenant %r closed cleanly", config.tenant)
    return 0


async def _serve(app: Application, config: Config, guard: Any) -> None:
    from dbsvc.http.server import serve_until_signalled

    def on_ready(port: int) -> None:
        log.info("listening on http://%s:%d (tenant %r)", config.http.host, port, config.tenant)

    if guard is not None:
        await guard.start()
    app.broker.attach(asyncio.get_running_loop().call_soon)
    try:
        await serve_until_signalled(app, config.http, on_ready=on_ready)
    finally:
        app.broker.detach()
        app.accepting = False
        if guard is not None:
            guard.close()
