"""Request meters and the Prometheus text exposition of `/metrics` (docs/guide/operations.md, "Monitoring").

`/metrics` answers JSON by default (docs/guide/rest.md); `Accept: text/plain` (what a
Prometheus scrape sends, after OpenMetrics, which it falls back from) or
`?format=prometheus` gets the text exposition format 0.0.4 instead (`wants_text`).

The hot path is `RouteMeter.observe(method, status, seconds)`, called by the protocol layer
once per HTTP response (dbsvc/http/account.py) on the meter the application set on the
request (`Request.meter`; the route's template, never its raw path, so the series are
bounded: one meter per route, made at start-up). Its cost is two dict increments and one
bucket increment (two compares find the commonest buckets): no allocation but the first
time a (method, status) pair is seen.

Rules:
1. Series are bounded: a route label is a route template (`/api/blog-post/{id}`), a method
   outside `METHODS` counts as `OTHER`, a status is a number from 100 to 599, and a request
   no route matched counts under the route `unmatched`.
2. Durations are seconds from the request's head parsed to its response encoded (the span
   log's `duration_ms`), in the cumulative buckets `DURATION_BOUNDS`.
3. The exposition is rendered at scrape time from counters the parts already keep (the
   store's, the broker's, the replica's, the access rules'); nothing here runs per request
   but `observe`.
4. Names follow Prometheus' conventions: `dbsvc_` prefix, `_total` on counters, base units
   (seconds, bytes); every family has its HELP and TYPE lines; label values are escaped
   (backslash, double quote, line feed).

Imports errors only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dbsvc.errors import BadQuery

TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
DURATION_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED = "unmatched"
FORMATS = ("json", "prometheus")


class RouteMeter:
    """Requests of one route by method and status, and their durations (rules 1 and 2)."""

    __slots__ = ("route", "counts", "buckets", "sum")

    def __init__(self, route: str) -> None:
        self.route = route
        self.counts: dict[str, dict[int, int]] = {}
        self.buckets = [0] * (len(DURATION_BOUNDS) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, method: str, status: int, seconds: float) -> None:
        by_status = self.counts.get(method)
        if by_status is None:
            if method not in METHODS:
                method = "OTHER"
            by_status = self.counts.setdefault(method, {})
        by_status[status] = by_status.get(status, 0) + 1
        # bisect_left(DURATION_BOUNDS, seconds), its two commonest answers by a compare each
        # (most requests take under a millisecond); tests/http/test_http_span_values.py holds every bound
        if seconds <= 0.0005:  # DURATION_BOUNDS[0]
            self.buckets[0] += 1
        elif seconds <= 0.001:  # DURATION_BOUNDS[1]
            self.buckets[1] += 1
        else:
            self.buckets[bisect_left(DURATION_BOUNDS, seconds)] += 1
        self.sum += seconds


class Meters:
    """Every route's meter, made once (`meter`), and the one of requests no route matched."""

    def __init__(self) -> None:
        self.routes: dict[str, RouteMeter] = {}
        self.unmatched = self.meter(UNMATCHED)

    def meter(self, route: str) -> RouteMeter:
        meter = self.routes.get(route)
        if meter is None:
            meter = self.routes[route] = RouteMeter(route)
        return meter


def wants_text(query: Sequence[tuple[str, str]], accept: str | None) -> bool:
    """Whether a `/metrics` request asks for the text format: `?format=prometheus`, else an
    Accept naming text/plain or OpenMetrics (a Prometheus scrape) and not JSON first.
    `?format=` other than json or prometheus is 400 naming both."""
    for name, value in query:
        if name == "format":
            if value not in FORMATS:
                raise BadQuery(f"format={value!r} is not a metrics format: expected one of {', '.join(FORMATS)}")
            return value == "prometheus"
    if not accept:
        return False
    accept = accept.lower()
    text = max(accept.find("text/plain"), accept.find("application/openmetrics-text"))
    if text < 0:
        return False
    json_at = accept.find("json")
    return json_at < 0 or text < json_at


def _label_value(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, object]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_label_value(value)}"' for name, value in labels.items()) + "}"


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class Exposition:
    """The text format, family by family (rule 4)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self, name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, object], float]]
    ) -> None:
        sample = f"{name}_total" if kind == "counter" else name  # text 0.0.4 names the sample
        self.lines.append(f"# HELP {sample} {help_text}")
        self.lines.append(f"# TYPE {sample} {kind}")
        for labels, value in samples:
            self.lines.append(f"{sample}{_labels(labels)} {_number(value)}")

    def one(self, name: str, kind: str, help_text: str, value: float) -> None:
        self.family(name, kind, help_text, [({}, value)])

    def histogram(
        self,
        name: str,
        help_text: str,
        series: Iterable[tuple[Mapping[str, object], Sequence[float], Sequence[int], float]],
    ) -> None:
        """`series`: (labels, upper bounds, per-bucket counts with the +Inf one last, sum)."""
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for labels, bounds, buckets, total in series:
            running = 0
            for bound, count in zip((*bounds, None), buckets):
                running += count
                le = "+Inf" if bound is None else _number(bound)
                self.lines.append(f"{name}_bucket{_labels({**labels, 'le': le})} {running}")
            self.lines.append(f"{name}_sum{_labels(labels)} {_number(total)}")
            self.lines.append(f"{name}_count{_labels(labels)} {running}")

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode("utf-8")


def render_text(
    *,
    version: str,
    fingerprint: str,
    rows: Mapping[str, int],
    meters: Meters,
    store: Mapping[str, Any],
    realtime: Mapping[str, int],
    connections: Mapping[str, int],
    refused: Mapping[str, int] | None,
    replica: Mapping[str, Any] | None,
    list_cache: tuple[int, int] = (0, 0),
) -> bytes:
    """The whole exposition of one server (rule 3). `store`: `Store.stats()`; `realtime`:
    `Broker.metrics()`; `connections`: open HTTP connections and WebSockets (the protocol
    layer's hub); `refused`: access-rule refusals by operation (None: no rules); `replica`:
    `ReplicaStatus.report` plus `ready` (None: not a replica); `list_cache`: the list
    answers of the present kept (readcache.py `PresentPages`), entries and bytes."""
    out = Exposition()
    out.family("dbsvc_build_info", "gauge", "The dbsvc version and the schema fingerprint.",
               [({"version": version, "schema": fingerprint}, 1)])  # fmt: skip
    out.family("dbsvc_rows", "gauge", "Live records per model.", [({"model": m}, n) for m, n in rows.items()])
    requests = [
        ({"route": meter.route, "method": method, "status": status}, count)
        for meter in meters.routes.values()
        for method, by_status in meter.counts.items()
        for status, count in by_status.items()
    ]
    out.family("dbsvc_http_requests", "counter", "HTTP responses by route, method and status.", requests)
    out.histogram(
        "dbsvc_http_request_duration_seconds",
        "Seconds from a request's head to its response, by route.",
        [({"route": m.route}, DURATION_BOUNDS, m.buckets, m.sum) for m in meters.routes.values() if any(m.buckets)],
    )
    out.one("dbsvc_writes", "counter", "Writes acknowledged durable.", store.get("commits", 0))
    out.one("dbsvc_write_failures", "counter", "Writes that failed to become durable.", store.get("failed_writes", 0))
    out.one("dbsvc_fsyncs", "counter", "fsync calls of the log (group commit shares one).", store.get("fsyncs", 0))
    batches = store.get("batch_sizes")
    if batches is not None:
        bounds, counts = batches
        out.histogram("dbsvc_commit_batch_size", "Writes acknowledged per durable commit (group commit).",
                      [({}, bounds, counts, store.get("commits", 0))])  # fmt: skip
    out.one("dbsvc_log_bytes", "gauge", "Bytes of the current log.", store.get("log_bytes", 0))
    out.one("dbsvc_snapshot_bytes", "gauge", "Bytes of the current snapshot.", store.get("snapshot_bytes", 0))
    out.one("dbsvc_retained_bytes", "gauge", "Bytes of log kept for replicas past compaction.",
            store.get("retained_bytes", 0))  # fmt: skip
    out.one("dbsvc_compactions", "counter", "Compactions since start.", store.get("compactions", 0))
    out.one("dbsvc_list_cache_entries", "gauge", "List answers of the present kept.", list_cache[0])
    out.one("dbsvc_list_cache_bytes", "gauge", "Bytes of the list answers kept (SERVICE_LIST_CACHE_BYTES).",
            list_cache[1])  # fmt: skip
    out.one("dbsvc_store_writable", "gauge", "1 while the store takes writes.", store.get("write_state") == "ok")
    out.one("dbsvc_http_connections_open", "gauge", "Open HTTP connections.", connections.get("http", 0))
    out.one("dbsvc_websockets_open", "gauge", "Open WebSockets.", connections.get("websockets", 0))
    out.one("dbsvc_subscriptions_open", "gauge", "Open /subscribe feeds.", realtime.get("subscriptions", 0))
    out.one("dbsvc_live_queries_open", "gauge", "Open /live-query feeds.", realtime.get("live_queries", 0))
    out.one("dbsvc_replication_streams_open", "gauge", "Open /replicate streams.",
            realtime.get("replication_streams", 0))  # fmt: skip
    out.one("dbsvc_events_sent", "counter", "Feed events sent.", realtime.get("events_sent", 0))
    out.one("dbsvc_lagged_closes", "counter", "Feeds closed with 1013 for lagging.", realtime.get("lagged_closes", 0))
    if refused is not None:
        out.family("dbsvc_access_refusals", "counter", "Requests refused by access rules, by operation.",
                   [({"operation": op}, n) for op, n in refused.items()])  # fmt: skip
    if replica is not None:
        labels = {"primary": replica.get("primary", "")}
        out.family("dbsvc_replica_ready", "gauge", "1 once the replica holds a primary's epoch.",
                   [(labels, bool(replica.get("ready")))])  # fmt: skip
        out.family("dbsvc_replica_state", "gauge", "The replica's following state (1 for the current one).",
                   [({**labels, "state": s}, replica.get("state") == s) for s in REPLICA_STATES])  # fmt: skip
        out.family("dbsvc_replica_lag_offsets", "gauge", "The primary's head offset minus the replica's.",
                   [(labels, replica.get("lag_offsets", 0))])  # fmt: skip
        out.family("dbsvc_replica_lag_seconds", "gauge", "Seconds since the replica last had the primary's head.",
                   [(labels, replica.get("lag_seconds", 0.0))])  # fmt: skip
        out.family("dbsvc_replica_bootstraps", "counter", "Bootstraps from the primary's snapshot.",
                   [(labels, replica.get("bootstraps", 0))])  # fmt: skip
        out.family("dbsvc_replica_reconnects", "counter", "Reconnections to the primary.",
                   [(labels, replica.get("reconnects", 0))])  # fmt: skip
    return out.text()


REPLICA_STATES = ("starting", "bootstrapping", "following", "reconnecting", "stopped", "diverged")
