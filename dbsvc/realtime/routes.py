"""WebSocket routes: an upgrade request becomes an `Upgrade` holding a feed session.

    GET /subscribe/<model-kebab>?<filter>=<value>&projection=<name>&after=<offset>
    GET /live-query/<model name or kebab>?<filter>=<value>&projection=<name>&after=<offset>
    GET /replicate?after=<offset>                       (when [runtime].replication is on)
    GET /replicate/snapshot                             the epoch's snapshot, to bootstrap a replica

Everything that can refuse the socket is checked here, before the upgrade, and refused
with the plain HTTP problem of docs/guide/errors.md and docs/guide/realtime.md: the token (the `Authorization`
header, or the offered subprotocols `bearer` and `bearer.<JWT>`), the Origin (against
SERVICE_CORS_ORIGINS when set: OWASP ASVS 4.4.2; a request without Origin is not a
browser's and passes, and a page of the service's own origin, such as the explorer at `/_/`,
passes: its Origin names the Host it connects to), the model, every query parameter (the generated
`parse_feed_query`), and `after` (410 `offset_gone`, 400 `offset_out_of_range`). The
WebSocket handshake itself is the protocol layer's (426 / 400).

Access rules (docs/realtime.md, "Access rules"): a model with `@allow` rules gives the
socket's token its `subscribe` Scope here, once (`ModelRules.subscribe(claims)`); a Scope
that sees nothing is 403 `forbidden` before the upgrade, naming the operation and the
model. The feed keeps the Scope (and the Scopes of the models that reference it, for its
links) for the socket's life: the claims are the token's that opened it. `/replicate` and
`/replicate/snapshot` stream every record, so when the schema has any rule (`rules`) they
need the schema-level `@allow(replicate, ...)` rule to hold for the token
(`replicate_rule`), else 403; without that rule they are 403 for every token. Every such
refusal is counted in the server's `Refusals` (`/metrics`).

The session is created and registered with the broker in the same synchronous step that
reads its starting point from the store (the replay iterator, or a live query's Init), so
no event falls between them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dbsvc.auth import authorize, token_from_subprotocols
from dbsvc.errors import BadQuery, Forbidden, NotFound
from dbsvc.http.cors import CorsPolicy
from dbsvc.http.types import Request, Upgrade
from dbsvc.interfaces import TokenGuard
from dbsvc.realtime.broker import Broker
from dbsvc.realtime.feeds import FeedKind, FeedSpec
from dbsvc.realtime.init import InitSlices
from dbsvc.realtime.session import FeedSession, ReplicationSession, SnapshotSession
from dbsvc.rules import Claims, Refusals, Scope
from dbsvc.runtime import INT64_MAX, CompiledModel, Query, parse_count

TOKEN_EXPIRED = 4401
AFTER_EXPECTED = f"a non-negative integer offset of at most {INT64_MAX}"


def check_after(after: int) -> int:
    """One answer for every route's `after` (docs/guide/realtime.md): not a non-negative
    integer, or past the int64 range offsets live in, is 400 `bad_query`; one ahead of the
    head is 400 `offset_out_of_range` and one no longer retained 410 `offset_gone`, both
    from the store."""
    if after > INT64_MAX:
        raise BadQuery(f"'after' must be {AFTER_EXPECTED}, got {str(after)!r}")
    return after


def offered_subprotocols(request: Request) -> list[str]:
    """The `Sec-WebSocket-Protocol` values offered, in order (the header may repeat)."""
    return [
        p.strip()
        for name, value in request.headers
        if name == "sec-websocket-protocol"
        for p in value.split(",")
        if p.strip()
    ]


class RealtimeRoutes:
    """Opens `/subscribe` and `/live-query` sockets for the application."""

    def __init__(
        self,
        broker: Broker,
        models: Mapping[str, CompiledModel],
        *,
        guard: TokenGuard | None = None,
        origins: tuple[str, ...] = (),
        fingerprint: str = "",
        refusals: Refusals | None = None,
        rules: bool = False,
        replicate_rule: Callable[[Claims], bool] | None = None,
    ) -> None:
        self.broker = broker
        self.guard = guard
        self.fingerprint = fingerprint
        self.refusals = Refusals() if refusals is None else refusals
        self.rules = rules  # the schema has a rule or a token default (the module's RULES)
        self.replicate_rule = replicate_rule  # the module's REPLICATE_RULE
        self._models = tuple(models.values())
        self._by_kebab = {m.kebab: m for m in models.values()}
        self._by_name = {**self._by_kebab, **{m.name: m for m in models.values()}}
        self._origins = CorsPolicy(origins)  # the same list and rules as CORS

    def open(self, kind: FeedKind, request: Request, segment: str) -> Upgrade:
        """The Upgrade for `/<kind>/<segment>`, or a RequestError (or the guard's
        `KeyRefreshNeeded`, which the application answers after refreshing the keys)."""
        table = self._by_kebab if kind is FeedKind.SUBSCRIBE else self._by_name
        model = table.get(segment)
        if model is None:
            raise NotFound(f"no route for path {request.path!r}")
        claims, subprotocol = self._authorize(request)
        self._check_origin(request)
        query = model.parse_feed_query(request.query)
        spec = self._spec(kind, model, query, {} if claims is None else claims)
        session = self._session(spec, query)
        return Upgrade(session, subprotocol=subprotocol, route=kind.value, close_at=self._close_at(claims))

    def _spec(self, kind: FeedKind, model: CompiledModel, query: Query, claims: Claims) -> FeedSpec:
        """The feed of `model` for a token's claims: its `subscribe` Scope (403 when it sees
        nothing), and for a change feed the Scopes of the models referencing it (links)."""
        if model.rules is None:
            scope: Scope | None = None
        else:
            scope = model.rules.subscribe(claims)
            if scope.nothing:
                self.refusals.count("subscribe")
                raise Forbidden(
                    f"subscribe is not allowed on {model.name}: no access rule of {model.name} "
                    "lets this token see any of its records"
                )
        link_scopes: dict[str, Scope] = {}
        if kind is FeedKind.SUBSCRIBE:
            for child in self._models:
                if child.rules is not None and any(parent == model.name for _field, parent in child.refs):
                    link_scopes[child.name] = child.rules.subscribe(claims)
        return FeedSpec(
            kind,
            model,
            query.filters,
            query.projection,
            scope,
            link_scopes,
            ranges=query.ranges,
            nulls=query.nulls,
            search=query.search,
        )

    def _check_replicate(self, claims: dict[str, Any] | None, path: str) -> None:
        """Under rules, the schema-level replicate rule must hold for the token (403)."""
        if not self.rules:
            return
        rule = self.replicate_rule
        if rule is not None and rule({} if claims is None else claims):
            return
        self.refusals.count("replicate")
        why = "its replicate rule refuses this token" if rule is not None else "it has no @allow(replicate, ...) rule"
        raise Forbidden(f"{path} is not allowed: the schema has access rules and {why}")

    def replicate(self, request: Request) -> Upgrade:
        """The Upgrade for `/replicate?after=N`: every committed frame after N, from the
        log, then live. `after` as for the feeds (`check_after`)."""
        claims, subprotocol = self._authorize(request)
        self._check_origin(request)
        self._check_replicate(claims, "/replicate")
        after = 0
        seen = False
        for name, value in request.query:
            if name != "after":
                raise BadQuery(f"unknown query parameter {name!r}; allowed: after")
            if seen:
                raise BadQuery("'after' given more than once")
            seen = True
            parsed = parse_count(value)
            if parsed is None:
                raise BadQuery(f"'after' must be {AFTER_EXPECTED}, got {value!r}")
            after = check_after(parsed)
        frames = self.broker.store.frames_after(after)  # 410 / 400 before the upgrade
        session = ReplicationSession(self.broker, after, frames)
        return Upgrade(session, subprotocol=subprotocol, route="replicate", close_at=self._close_at(claims))

    def replicate_snapshot(self, request: Request) -> Upgrade:
        """The Upgrade for `/replicate/snapshot` (session.SnapshotSession)."""
        claims, subprotocol = self._authorize(request)
        self._check_origin(request)
        self._check_replicate(claims, "/replicate/snapshot")
        if request.query:
            raise BadQuery(f"unknown query parameter {request.query[0][0]!r}; /replicate/snapshot takes none")
        epoch, offset, chunks = self.broker.store.epoch_snapshot()
        session = SnapshotSession(epoch, offset, self.fingerprint, chunks, self.broker.store.history_json)
        return Upgrade(session, subprotocol=subprotocol, route="replicate-snapshot", close_at=self._close_at(claims))

    def _close_at(self, claims: dict[str, Any] | None) -> tuple[float, int, str] | None:
        if claims is None or self.guard is None:  # claims come only from a guard
            return None
        expires = self.guard.expires_at(claims)
        return None if expires is None else (expires, TOKEN_EXPIRED, "token expired")

    def _session(self, spec: FeedSpec, query: Query) -> FeedSession:
        broker, store = self.broker, self.broker.store
        if query.after is not None:
            events = store.events_after(check_after(query.after))  # 410 / 400 before the upgrade
            return FeedSession(spec, broker, query.after, replay=events)
        if spec.kind is FeedKind.SUBSCRIBE:
            return FeedSession(spec, broker, store.head_offset)
        init = InitSlices(
            store,
            spec.model,
            spec.filters,
            spec.projection,
            store.applied_offset,
            broker.capacity,
            spec.scope,
            ranges=spec.ranges,
            nulls=spec.nulls,
            search=spec.search,
        )
        return FeedSession(spec, broker, init.offset, init=init)

    def _authorize(self, request: Request) -> tuple[dict[str, Any] | None, str | None]:
        """(claims or None without a guard, the subprotocol to answer)."""
        offered = offered_subprotocols(request)
        answer = "bearer" if any(p.lower() == "bearer" for p in offered) else None
        if self.guard is None:
            return None, answer
        authorization = request.header("authorization")
        token = token_from_subprotocols(offered) if authorization is None else None
        if token is None:
            return authorize(self.guard, authorization), answer
        return authorize(self.guard, token=token), answer

    def _check_origin(self, request: Request) -> None:
        origin = request.header("origin")
        if origin is None or same_origin(origin, request.header("host")):
            return
        if not self._origins.permits(origin):
            raise Forbidden(
                f"origin {origin!r} is not allowed to open WebSockets here; "
                "allowed: the origins of SERVICE_CORS_ORIGINS"
            )


def same_origin(origin: str, host: str | None) -> bool:
    """Whether `origin` is the service's own: its authority is the request's Host, as a
    browser sends for a page served by this process (scheme aside: a TLS proxy in front
    changes the scheme, not the Host it forwards)."""
    _, sep, authority = origin.partition("://")
    return bool(sep) and host is not None and authority.rstrip("/").lower() == host.lower()
