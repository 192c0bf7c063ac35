"""Process configuration: the environment plus the schema's `[runtime]` table, frozen once.

Every value is checked at start-up; a bad one raises `ConfigError` naming the variable, the
value and what it accepts (the command line exits with status 2). Variables
(docs/guide/configuration.md):

    SERVICE_HOST (127.0.0.1)   SERVICE_PORT (3000)     SERVICE_DATA (data)
    SERVICE_TENANT (unset)     RUST_LOG (info)         SERVICE_LOG_FORMAT (text | json)
    SERVICE_MAX_BODY (1048576) SERVICE_MAX_CONNECTIONS (1024)
    SERVICE_SHUTDOWN_TIMEOUT (10)  SERVICE_SYNC (full | off)  SERVICE_CORS_ORIGINS (none)
    SERVICE_HEADER_TIMEOUT (10)    SERVICE_IDLE_TIMEOUT (60)
    SERVICE_MIN_BODY_RATE (240 bytes/s, 0 off)  SERVICE_BODY_MEMORY (67108864 bytes)
    SERVICE_WS_PING_INTERVAL (30)  SERVICE_WS_PONG_TIMEOUT (30)  -- WebSocket liveness
    SERVICE_WS_CLOSE_TIMEOUT (5)   seconds a closing WebSocket waits for the peer's close frame
                      (at most 6 times that while the peer is still reading: http/ws/server.py)
    SERVICE_MAX_SOCKETS (1024)     open WebSockets, counted apart from SERVICE_MAX_CONNECTIONS:
                      an upgrade past it is 503 before the 101 (dbsvc/http/hub.py rules 7-8)
    SERVICE_ALLOWED_HOSTS (unset)  comma list of the Host names requests may use (DNS
                      rebinding, dbsvc/http/hosts.py); unset: any Host, except on a loopback
                      bind with the guard off, where it is localhost, 127.0.0.1 and [::1]
                      (decided where the guard is known: dbsvc.service.host_check)
    SERVICE_HTTP_PARSER (fast | h11: h11 alone, the fast path off; dbsvc/http/fastpath.py)
    SERVICE_EXPLORER (on | off; unset: on for a loopback bind with the guard off, decided
                      where the guard is known: dbsvc.explorer.explorer_enabled)
    SERVICE_FOLLOW_REBOOTSTRAP (0)  1: a read replica whose history the primary cannot continue
                      bootstraps again even when that discards rows the primary lacks
                      (`serve --rebootstrap`; replica/follower.py rule 7)
    SERVICE_TOKEN (unset)          the token this process sends another dbsvc server: a read
                      replica (`serve --follow`) to its primary, `dbsvc replicate` unless
                      --token is given. SERVICE_FOLLOW_TOKEN, its old name for the replica,
                      is an alias; both set to different tokens is refused.
    SERVICE_ZIPAPP_CACHE (unset: $XDG_CACHE_HOME/dbsvc, else ~/.cache/dbsvc) where a
                      `dbsvc build --with-guard` app unpacks the packages it embeds
    SERVICE_HUGE_PAGES (on | off)  off: the heap is never advised for transparent huge pages
                      (storage/heap.py `advise_heap`, after the open and each compaction)

This module is the one reader of the SERVICE_* environment: every command builds its
`Config` here, so a variable has one default and one check wherever it is used. Given
the schema's `[auth]` table, `load_config` also builds the guard's settings through
`dbsvc.auth.load_auth_config` (the SERVICE_JWT_* variables; None: the guard is off),
after the tenant name has passed its check. A timeout of 0
(SERVICE_HEADER_TIMEOUT, SERVICE_IDLE_TIMEOUT, SERVICE_SHUTDOWN_TIMEOUT) turns it off, as in
Go's http.Server and Node's http; the WebSocket liveness values must be positive.
docs/security.md lists every limit and what is refused.

SERVICE_MAX_BODY is at most `MAX_BODY` (33,553,920 bytes, storage/events.py "Sizes"): a
PUT or PATCH writes one log frame holding the new record and the one it replaces, and a
frame holds at most 64 MiB, so a body past half of that could be acknowledged as a record
the log cannot hold beside its successor. A larger value is refused at start-up (exit 2).

`SERVICE_CHANGEFEED_BYTES` (default 8 MiB, at least 64 KiB) bounds in bytes what a feed
socket's queue holds, beside `changefeed_capacity`'s bound in frames (realtime/session.py
rule 4).

`SERVICE_LIST_CACHE_BYTES` (default 8 MiB; 0 turns it off) bounds the list answers of the
present the application keeps (readcache.py `PresentPages`).

`[runtime]` keys: `replication`, `changefeed_capacity`, and `replication_retain_mb` (MiB of
compacted log a compaction keeps for replicas that resume, storage/retain.py), carried as
`replication_retain_bytes`: 0 when replication is off (nothing is retained beyond the
ring: the feeds replay from the ring only, and a writer open removes a segment left over
from a time replication was on).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dbsvc.errors import ConfigError, TenantError
from dbsvc.http.types import HttpSettings
from dbsvc.storage.events import record_limit
from dbsvc.storage.logfile import MAX_PAYLOAD
from dbsvc.storage.tenants import validate_name

if TYPE_CHECKING:
    from dbsvc.auth.settings import AuthConfig
    from dbsvc.schema.ir import AuthSettings

DEFAULT_TENANT = "default"
DEFAULT_DATA = "data"
MAX_BODY = record_limit(MAX_PAYLOAD)  # the largest SERVICE_MAX_BODY (module docstring)


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the server needs to start, checked."""

    http: HttpSettings
    data_dir: str
    tenant: str
    tenant_explicit: bool  # SERVICE_TENANT was set (a missing directory is then an error)
    log_level: str
    log_format: str
    sync: str
    replication: bool
    changefeed_capacity: int
    changefeed_bytes: int  # SERVICE_CHANGEFEED_BYTES: bytes a feed socket's queue may hold
    replication_retain_bytes: int  # 0 when replication is off
    explorer: bool | None = None  # SERVICE_EXPLORER; None: the default (docs/explorer.md)
    auth: AuthConfig | None = None  # the guard's settings; None: the guard is off (or not asked for)
    follow_rebootstrap: bool = False  # SERVICE_FOLLOW_REBOOTSTRAP
    token: str | None = None  # SERVICE_TOKEN (or its alias SERVICE_FOLLOW_TOKEN)
    list_cache_bytes: int = 8 << 20  # SERVICE_LIST_CACHE_BYTES: kept list answers (0: none)
    huge_pages: bool = True  # SERVICE_HUGE_PAGES: the heap advised for transparent huge pages


def _int(environ: Mapping[str, str], name: str, default: int, lo: int, hi: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        bound = f"an integer from {lo} to {hi}" if hi is not None else f"an integer of at least {lo}"
        raise ConfigError(f"{name}={raw!r} is not valid: expected {bound}")
    return value


def _max_body(environ: Mapping[str, str]) -> int:
    value = _int(environ, "SERVICE_MAX_BODY", 1_048_576, 1)
    if value > MAX_BODY:
        raise ConfigError(
            f"SERVICE_MAX_BODY={environ['SERVICE_MAX_BODY']!r} is too large: the largest allowed value is "
            f"{MAX_BODY} bytes, because a PUT or PATCH writes one log frame holding the new record and the "
            f"one it replaces, and a frame holds at most {MAX_PAYLOAD} bytes (docs/guide/configuration.md)"
        )
    return value


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={raw!r} is not valid: expected a non-negative number of seconds")
    return value


def _positive_seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    value = _seconds(environ, name, default)
    if value <= 0:
        raise ConfigError(f"{name}={environ.get(name)!r} is not valid: expected a positive number of seconds")
    return value


def _choice(environ: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value not in allowed:
        raise ConfigError(f"{name}={raw!r} is not valid: expected one of {', '.join(allowed)}")
    return value


def _switch(environ: Mapping[str, str], name: str) -> bool | None:
    """An `on`/`off` variable: True, False, or None when unset (the caller's default)."""
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    return _choice(environ, name, "", ("on", "off")) == "on"


def _flag(environ: Mapping[str, str], name: str) -> bool:
    """A yes/no variable, default no: 1/0, on/off, true/false, yes/no."""
    raw = environ.get(name, "").strip().lower()
    if raw in ("", "0", "off", "false", "no"):
        return False
    if raw in ("1", "on", "true", "yes"):
        return True
    raise ConfigError(f"{name}={environ[name]!r}: expected 1 or 0 (on/off, true/false, yes/no)")


def _hosts(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma list of Host names (dbsvc/http/hosts.py rule 2): `name`, `[ipv6]`, `.domain`, `*`."""
    hosts = tuple(h.strip().lower() for h in environ.get(name, "").split(",") if h.strip())
    for host in hosts:
        if host != "*" and not re.fullmatch(r"\.?[a-z0-9_.-]+|\[[0-9a-f:.]+\]", host):
            raise ConfigError(
                f"{name}: {host!r} is not a host name: expected a name (example.com), "
                "a domain and its subdomains (.example.com), an IP address ([::1] for IPv6) or *"
            )
    return hosts


def _runtime_int(runtime: Mapping[str, object], key: str, default: int, lo: int = 1) -> int:
    """An integer of the schema's `[runtime]` table (its checks already ran at generation)."""
    value = runtime.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        expected = "a positive integer" if lo == 1 else "a non-negative integer"
        raise ConfigError(f"[runtime] {key} = {value!r} is not valid: expected {expected}")
    return value


def check_tenant_name(name: str, source: str = "SERVICE_TENANT") -> str:
    """Refuse names that could escape the data directory (one rule, the storage layer's)."""
    try:
        return validate_name(name)
    except TenantError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _text(environ: Mapping[str, str], name: str) -> str | None:
    """A free-text variable; empty counts as unset."""
    return environ.get(name, "").strip() or None


def _data_dir(environ: Mapping[str, str]) -> str:
    """SERVICE_DATA: a directory, or a path where one can be created. A file there, or in
    place of one of its parents, is refused by name here rather than as an errno wherever
    the directory is first used (issue 32)."""
    path = environ.get("SERVICE_DATA", DEFAULT_DATA) or DEFAULT_DATA
    probe = os.path.abspath(path)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if os.path.exists(probe) and not os.path.isdir(probe):
        where = path if probe == os.path.abspath(path) else probe
        raise ConfigError(
            f"SERVICE_DATA {where!r} is a file, not a directory: set SERVICE_DATA to a directory (created if missing)"
        )
    return path


def _token(environ: Mapping[str, str]) -> str | None:
    """SERVICE_TOKEN, or SERVICE_FOLLOW_TOKEN, the name a read replica's token had before
    one variable served both the replica and `dbsvc replicate` (issue 32)."""
    token, alias = _text(environ, "SERVICE_TOKEN"), _text(environ, "SERVICE_FOLLOW_TOKEN")
    if token is not None and alias is not None and token != alias:
        raise ConfigError(
            "SERVICE_TOKEN and SERVICE_FOLLOW_TOKEN (its old name) are both set, to different tokens: "
            "set SERVICE_TOKEN only"
        )
    return token or alias


def zipapp_cache_dir(environ: Mapping[str, str]) -> str:
    """Where a built app unpacks the packages it embeds (dbsvc/zipapp.py): SERVICE_ZIPAPP_CACHE,
    else `dbsvc` under XDG_CACHE_HOME (the XDG base directory rule), else ~/.cache/dbsvc."""
    explicit = _text(environ, "SERVICE_ZIPAPP_CACHE")
    if explicit is not None:
        return os.path.abspath(explicit)
    base = _text(environ, "XDG_CACHE_HOME")
    if base is None or not os.path.isabs(base):  # the spec: a relative value is ignored
        home = _text(environ, "HOME") or os.path.expanduser("~")
        if not os.path.isabs(home):
            raise ConfigError(
                "no cache directory for the app's embedded packages: HOME is not set; "
                "set SERVICE_ZIPAPP_CACHE to a directory only this user can write"
            )
        base = os.path.join(home, ".cache")
    return os.path.join(base, "dbsvc")


def load_config(
    environ: Mapping[str, str],
    runtime: Mapping[str, object] | None = None,
    *,
    auth: AuthSettings | None = None,
    schema_dir: str = ".",
) -> Config:
    """Read and check the environment; `runtime` is the schema's `[runtime]` table. With
    `auth` (the schema's `[auth]` table; `schema_dir` resolves its relative key path) the
    guard's settings are read too: `Config.auth`, None when no key source is set."""
    runtime = runtime or {}
    origins = tuple(o.strip() for o in environ.get("SERVICE_CORS_ORIGINS", "").split(",") if o.strip())
    http = HttpSettings(
        host=environ.get("SERVICE_HOST", "127.0.0.1") or "127.0.0.1",
        port=_int(environ, "SERVICE_PORT", 3000, 0, 65535),
        max_body=_max_body(environ),
        max_connections=_int(environ, "SERVICE_MAX_CONNECTIONS", 1024, 1),
        header_timeout=_seconds(environ, "SERVICE_HEADER_TIMEOUT", 10.0),
        idle_timeout=_seconds(environ, "SERVICE_IDLE_TIMEOUT", 60.0),
        shutdown_timeout=_seconds(environ, "SERVICE_SHUTDOWN_TIMEOUT", 10.0),
        min_body_rate=_int(environ, "SERVICE_MIN_BODY_RATE", 240, 0),
        body_memory=_int(environ, "SERVICE_BODY_MEMORY", 64 << 20, 1),
        cors_origins=origins,
        ws_ping_interval=_positive_seconds(environ, "SERVICE_WS_PING_INTERVAL", 30.0),
        ws_pong_timeout=_positive_seconds(environ, "SERVICE_WS_PONG_TIMEOUT", 30.0),
        ws_close_timeout=_positive_seconds(environ, "SERVICE_WS_CLOSE_TIMEOUT", 5.0),
        # Socket budgets and the Host check (docs/security.md, issue 30): upgraded WebSockets
        # count apart from HTTP connections (http/hub.py rule 8).
        max_sockets=_int(environ, "SERVICE_MAX_SOCKETS", 1024, 1),
        allowed_hosts=_hosts(environ, "SERVICE_ALLOWED_HOSTS"),
        http_parser=_choice(environ, "SERVICE_HTTP_PARSER", "fast", ("fast", "h11")),
    )
    tenant_raw = environ.get("SERVICE_TENANT", "")
    tenant = check_tenant_name(tenant_raw) if tenant_raw else DEFAULT_TENANT
    replication = bool(runtime.get("replication", False))
    retain_mb = _runtime_int(runtime, "replication_retain_mb", 256, lo=0)
    guard = None
    if auth is not None:
        from dbsvc.auth.settings import load_auth_config

        guard = load_auth_config(environ, auth, schema_dir)
    return Config(
        http=http,
        data_dir=_data_dir(environ),
        tenant=tenant,
        tenant_explicit=bool(tenant_raw),
        log_level=environ.get("RUST_LOG", "info") or "info",
        log_format=_choice(environ, "SERVICE_LOG_FORMAT", "text", ("text", "json")),
        sync=_choice(environ, "SERVICE_SYNC", "full", ("full", "off")),
        replication=replication,
        changefeed_capacity=_runtime_int(runtime, "changefeed_capacity", 1024),
        changefeed_bytes=_int(environ, "SERVICE_CHANGEFEED_BYTES", 8 << 20, 65536),
        list_cache_bytes=_int(environ, "SERVICE_LIST_CACHE_BYTES", 8 << 20, 0),
        replication_retain_bytes=retain_mb << 20 if replication else 0,
        explorer=_switch(environ, "SERVICE_EXPLORER"),
        auth=guard,
        follow_rebootstrap=_flag(environ, "SERVICE_FOLLOW_REBOOTSTRAP"),
        token=_token(environ),
        huge_pages=_choice(environ, "SERVICE_HUGE_PAGES", "on", ("on", "off")) == "on",
    )
