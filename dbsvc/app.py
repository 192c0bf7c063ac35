"""The application: routes a `Request` to a generated model handler and the store.

Routes: the table in `dbsvc/routes.py` (docs/guide/rest.md); the WebSocket feeds are
opened by `dbsvc.realtime.routes`.

Reads are synchronous and answered on the loop turn that parsed them. The writes' handlers
are its base `WriteRoutes` (dbsvc/writeroutes.py): they answer a `Deferred`, sent once the
write is durable. Every schema-specific
decision (which query parameters exist, how a body validates, how an id parses) is a call
into the generated module's `CompiledModel`; this module only sequences them. Errors are
raised as `RequestError`s and rendered by `dbsvc.http.problem` in one place (the protocol
layer calls it for anything raised here). Access rules are asked through `dbsvc.access`
(the verified token's claims reach every handler); a model without rules pays one
`model.rules is None` test per request.

The operational routes include `/api/` (the index, dbsvc/index.py) and `/` (a redirect);
`/metrics` answers JSON or, asked for it, the Prometheus text (dbsvc/metrics.py): each
request gets its route's meter (`request.meter`, made at start-up), on which the protocol
layer counts the response.

Imports no storage module (the store is an `interfaces.ServedStore`) and, of replica, only its
status type (`replica/status.py`), so `import dbsvc.app` loads neither the WebSocket client nor
the replica consumer; never imports h11, wsproto or cryptography (tests/test_layers.py).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import unquote

from dbsvc import __version__
from dbsvc.access import NO_CLAIMS, Access, missing
from dbsvc.batchops import BatchRoute
from dbsvc.errors import BadQuery, MethodNotAllowed, NotFound, ReplicationDisabled, TokenError
from dbsvc.expand import Expander
from dbsvc.explorer import ExplorerPage
from dbsvc.http.conditional import etag, preconditions
from dbsvc.http.types import Deferred, Request, Response, Upgrade
from dbsvc.index import build_index
from dbsvc.interfaces import GeneratedModule, ServedStore, TokenGuard
from dbsvc.metrics import Meters
from dbsvc.operational import OperationalRoutes, served_openapi
from dbsvc.parsedlists import ParsedQueries
from dbsvc.readcache import EncodedRecords, PastPages, PresentPages
from dbsvc.realtime.broker import Broker
from dbsvc.realtime.feeds import FeedKind
from dbsvc.realtime.routes import RealtimeRoutes
from dbsvc.replica.status import ReplicaStatus
from dbsvc.routes import (
    API_PREFIX,
    BATCH_METHODS,
    BATCH_PATH,
    COLLECTION_METHODS,
    ITEM_METHODS,
    LIVE_QUERY,
    OPERATIONAL,
    READ_METHODS,
    REPLICATE_PATH,
    REPLICATE_SNAPSHOT_PATH,
    ROOT_PATH,
    SOCKET_METHODS,
    SUBSCRIBE,
    collection_path,
    item_path,
)
from dbsvc.rules import Claims, Refusals
from dbsvc.runtime import CompiledModel, Query, Record, json_bytes
from dbsvc.schema.describe import schema_fingerprint
from dbsvc.writeroutes import WriteRoutes, parse_json_body

log = logging.getLogger("dbsvc.app")


class _Never(Exception):
    """Stands in for the guard's KeyRefreshNeeded when there is no guard: never raised."""


def _raw_item_segment(target: str, kebab: str) -> str | None:
    """The id segment of `/api/<kebab>/<segment>` read from the raw request target, or None.

    The protocol layer percent-decodes the whole path, so a string id holding an encoded
    '/' (`%2F`, RFC 3986 §2.2: data, not a delimiter) reaches the app split in two. Routing
    on the raw target keeps such a record, created with that id, reachable.
    """
    path = target.partition("?")[0]
    if not path.startswith("/"):  # absolute form, RFC 9112 §3.2.2
        rest = path.partition("://")[2]
        path = rest[rest.find("/") :] if "/" in rest else "/"
    prefix = item_path(kebab, "")
    if not path.startswith(prefix) or "/" in path[len(prefix) :]:
        return None
    return unquote(path[len(prefix) :], errors="strict")


def unknown_model(kebab: str, models: dict[str, CompiledModel]) -> str:
    """The 404 detail of `/api/<kebab>` for a model that does not exist: the models there
    are, and the likeliest one meant (the declared name or snake case of one, else the
    closest spelling by difflib), as every other refusal lists its choices."""
    folded = {route.replace("-", ""): route for route in models}
    meant = folded.get(kebab.lower().replace("-", "").replace("_", ""))
    if meant is None:
        close = difflib.get_close_matches(kebab.lower(), list(models), n=1)
        meant = close[0] if close else None
    guess = f"did you mean {meant!r}? " if meant else ""
    return f"no model {kebab!r} under /api/: {guess}the models are {', '.join(models)} (GET /api/<model>)"


class Application(WriteRoutes, OperationalRoutes):
    """The callable the protocol layer serves: `app(request) -> Response | Deferred |
    Upgrade | Awaitable[Response | Upgrade]`."""

    def __init__(
        self,
        module: GeneratedModule,
        store: ServedStore,
        broker: Broker,
        *,
        guard: TokenGuard | None = None,
        replication: bool = False,
        origins: tuple[str, ...] = (),
        replica: ReplicaStatus | None = None,
        explorer: bool = False,
        list_cache_bytes: int = 8 << 20,
    ) -> None:
        self.models: dict[str, CompiledModel] = dict(module.ROUTES)
        self.store = store
        self.guard = guard
        self.replication = replication
        self.accepting = True
        self.replica = replica  # a read replica's following status, else None
        self.encoded = EncodedRecords(list(self.models.values()))
        self.queries = ParsedQueries()
        self.past = PastPages()  # list answers at a past watermark (as_of), kept whole
        # list answers of the present, kept while their models are unchanged (SERVICE_LIST_CACHE_BYTES)
        self.present = PresentPages(budget=list_cache_bytes)
        self.list_cache = self.present.size  # /metrics (operational.py)
        self._reads: dict[tuple[str, tuple], tuple[str, ...]] = {}  # the models a list reads (_read_models)
        self.expander = Expander(list(self.models.values()), self.encoded.encode)  # `expand=` (dbsvc/expand.py)
        self.broker = broker
        self.fingerprint = schema_fingerprint(module.DESCRIPTION)
        # Access rules (dbsvc/access.py): whether the schema has any (`/metrics` shows the
        # refusals then), and the one refusal counter of the server, shared with the feeds.
        self.rules = bool(getattr(module, "RULES", False))
        self.refusals = Refusals()
        self.access = Access(self.refusals)
        self.realtime = RealtimeRoutes(
            self.broker,
            module.BY_NAME,
            guard=guard,
            origins=origins,
            fingerprint=self.fingerprint,
            rules=self.rules,  # access rules (issue 31): /replicate's rule
            replicate_rule=getattr(module, "REPLICATE_RULE", None),
            refusals=self.refusals,  # one counter: /metrics shows REST's and the sockets' refusals
        )
        self._operational: dict[str, Callable[[Request], Response]] = {
            route.path: getattr(self, route.name) for route in OPERATIONAL
        }
        # Request meters (dbsvc/metrics.py), one per route template, made here so the hot
        # path only sets `request.meter`: the collection and the item route of each model.
        self.meters = Meters()
        self._collection_meters = {k: self.meters.meter(collection_path(k)) for k in self.models}
        self._item_meters = {k: self.meters.meter(item_path(k)) for k in self.models}
        self._route_meters = {route.path: self.meters.meter(route.path) for route in OPERATIONAL}
        self._route_meters[ROOT_PATH] = self.meters.meter(ROOT_PATH)
        self._route_meters[BATCH_PATH] = self.meters.meter(BATCH_PATH)
        self.batches = BatchRoute(self.models, self.access)  # POST /batch (dbsvc/batchops.py)
        self._route_meters.update({k: self.meters.meter(f"/{k}/{{model}}") for k in (SUBSCRIBE, LIVE_QUERY)})
        # The protocol layer's open connections for /metrics (the service sets it).
        self.connections: Callable[[], dict[str, int]] = dict
        self._openapi = served_openapi(getattr(module, "OPENAPI_JSON", "{}"), guarded=guard is not None)
        self._asyncapi = getattr(module, "ASYNCAPI_JSON", "{}").encode("utf-8")
        self._feeds = {SUBSCRIBE: FeedKind.SUBSCRIBE, LIVE_QUERY: FeedKind.LIVE}
        # The explorer's static page (docs/explorer.md); None: its paths are unknown routes.
        self.explorer = ExplorerPage() if explorer else None
        self._index = build_index(
            self.models.values(),
            version=__version__,
            fingerprint=self.fingerprint,
            explorer=explorer,
            replication=replication,
        )
        self._refresh_needed: type[Exception] = _Never
        if guard is not None:
            from dbsvc.auth import KeyRefreshNeeded, authorize, token_problem

            self._refresh_needed = KeyRefreshNeeded
            self._authorize = authorize
            self._token_problem = token_problem

    # -- dispatch ---------------------------------------------------------------------

    def __call__(self, request: Request) -> Response | Deferred | Upgrade | Awaitable[Response | Upgrade]:
        path = request.path
        if path.startswith(API_PREFIX) and path != API_PREFIX:
            return self.api(request, path[len(API_PREFIX) :])
        handler = self._operational.get(path)
        if handler is None and path == ROOT_PATH:
            handler = self.root
        if handler is not None:
            request.meter = self._route_meters[path]
            if request.method not in READ_METHODS:
                raise MethodNotAllowed(f"method {request.method!r} is not allowed on {path!r}", list(READ_METHODS))
            return handler(request)
        prefix, slash, segment = path[1:].partition("/")
        kind = self._feeds.get(prefix)
        if kind is not None and slash and segment and "/" not in segment:
            request.meter = self._route_meters[prefix]
            return self.feed(request, kind, segment)
        if path == REPLICATE_PATH or path == REPLICATE_SNAPSHOT_PATH:
            return self.replicate(request)
        if path == BATCH_PATH:
            return self.batch(request)
        if self.explorer is not None and self.explorer.owns(path):
            return self.explorer.answer(request)
        raise NotFound(f"no route for path {path!r}")

    def replicate(self, request: Request) -> Upgrade | Awaitable[Upgrade]:
        """`/replicate`: 404 `replication_disabled` unless `[runtime].replication` is on."""
        if not self.replication:
            raise ReplicationDisabled("replication is off: set replication = true in the schema's [runtime] table")
        if request.path == REPLICATE_PATH:
            return self._open_socket(request, lambda: self.realtime.replicate(request))
        return self._open_socket(request, lambda: self.realtime.replicate_snapshot(request))

    def feed(self, request: Request, kind: FeedKind, segment: str) -> Upgrade | Awaitable[Upgrade]:
        """A `/subscribe` or `/live-query` socket (dbsvc.realtime.routes checks everything)."""
        return self._open_socket(request, lambda: self.realtime.open(kind, request, segment))

    def _open_socket(self, request: Request, open_: Callable[[], Upgrade]) -> Upgrade | Awaitable[Upgrade]:
        """GET only; `open_()` checks the rest, asked again after a key refresh if the guard needs one."""
        if request.method not in SOCKET_METHODS:
            raise MethodNotAllowed(
                f"method {request.method!r} is not allowed on {request.path!r}", list(SOCKET_METHODS)
            )
        try:
            return open_()
        except self._refresh_needed:
            return self._after_key_refresh(open_)

    def api(self, request: Request, rest: str) -> Response | Deferred | Awaitable[Response]:
        kebab, slash, rest_of_path = rest.partition("/")
        model = self.models.get(kebab)
        segment: str | None = rest_of_path
        if model is not None and "/" in rest_of_path:
            segment = _raw_item_segment(request.target, kebab)
        if model is None and kebab:
            raise NotFound(unknown_model(kebab, self.models))
        if model is None or (slash and not segment) or segment is None:
            raise NotFound(f"no route for path {request.path!r}")
        item = segment if slash else None
        request.meter = self._collection_meters[kebab] if item is None else self._item_meters[kebab]
        claims = NO_CLAIMS
        if self.guard is not None:
            try:
                claims = self.authenticate(request)
            except self._refresh_needed:
                return self._after_key_refresh(lambda: self._authenticated_dispatch(request, model, item))
        return self.dispatch(request, model, item, claims)

    def _authenticated_dispatch(
        self, request: Request, model: CompiledModel, segment: str | None
    ) -> Response | Deferred:
        return self.dispatch(request, model, segment, self.authenticate(request))

    def dispatch(
        self, request: Request, model: CompiledModel, segment: str | None, claims: Claims = NO_CLAIMS
    ) -> Response | Deferred:
        """Answer an `/api/` request for `model` (`segment`: the item's id, None for the
        collection) made with the verified token's `claims` (none without a guard)."""
        method = request.method
        if segment is None:
            if method == "GET" or method == "HEAD":
                return self.list(request, model, claims)
            if method == "POST":
                return self.create(request, model, claims)
            if method == "OPTIONS":
                return Response(204, headers=[("Allow", ", ".join(COLLECTION_METHODS))], content_type=None)
            raise MethodNotAllowed(f"method {method!r} is not allowed on {request.path!r}", list(COLLECTION_METHODS))
        if method == "GET" or method == "HEAD":
            return self.read(request, model, segment, claims)
        if method == "PUT":
            return self.replace(request, model, segment, claims)
        if method == "PATCH":
            return self.patch(request, model, segment, claims)
        if method == "DELETE":
            return self.delete(request, model, segment, claims)
        if method == "OPTIONS":
            return Response(204, headers=[("Allow", ", ".join(ITEM_METHODS))], content_type=None)
        raise MethodNotAllowed(f"method {method!r} is not allowed on {request.path!r}", list(ITEM_METHODS))

    # -- the token guard --------------------------------------------------------------

    def authenticate(self, request: Request) -> dict[str, Any]:
        """Verify the bearer token: its claims, or 401 / 403 / 503 (`dbsvc.auth.authorize`)."""
        assert self.guard is not None  # api() calls this only with a guard
        return self._authorize(self.guard, request.header("authorization"))

    async def _after_key_refresh(self, retry: Callable[[], Any]) -> Any:
        """The guard asked for fresh keys (an unknown `kid`): fetch them, then answer
        `retry()`; a key still unknown afterwards is 401."""
        assert self.guard is not None  # only the guard asks for a refresh
        await self.guard.refresh_keys()
        try:
            result = retry()
        except self._refresh_needed:
            raise self._token_problem(TokenError("the token's key id is not known")) from None
        if isinstance(result, Deferred):
            await result.future
            return result.response
        return result

    # -- reads --------------------------------------------------------------------------

    def _read_headers(self, watermark: int, as_of: int | None) -> list[tuple[str, str]]:
        if as_of is None:  # the present: the store's head too (docs/replication.md)
            return [("Dbsvc-Watermark", str(watermark)), ("Dbsvc-Offset", str(self.store.head_offset))]
        return [("Dbsvc-Watermark", str(watermark))]

    def _check_as_of(self, model: CompiledModel, as_of: int) -> int:
        """400 for an `as_of` ahead of the model's watermark; else that watermark."""
        current = self.store.watermarks()[model.name]
        if as_of > current:
            raise BadQuery(
                f"as_of={as_of} is ahead of the current watermark of {model.name} ({current}): "
                f"expected an integer from 0 to {current}"
            )
        return current

    def list(self, request: Request, model: CompiledModel, claims: Claims = NO_CLAIMS) -> Response:
        # A list of the present kept while no model it reads has changed (readcache.py);
        # only answers that do not depend on the token are ever kept (below); a budget of 0
        # (SERVICE_LIST_CACHE_BYTES=0) keeps none, and then asks nothing of it
        keeping = self.present.budget > 0
        kept_now = self.present.get(self.store, request) if keeping else None
        if kept_now is not None:
            body, watermark, link = kept_now
            headers = [("Dbsvc-Watermark", str(watermark)), ("Dbsvc-Offset", str(self.store.head_offset))]
            if link is not None:
                headers.append(("Link", link))
            return Response(200, body, headers)
        listing = self.queries.listing(model, request)  # the parsed query and its Link maker
        query = listing.query
        past = False
        if query.as_of is not None:
            current = self._check_as_of(model, query.as_of)
            # A list at a past watermark never changes in an epoch: kept whole (readcache.py),
            # unless the token may change it: the model's rules, or an embedded model's
            past = query.as_of < current and model.rules is None and not (query.expand and self.rules)
            if past:
                kept = self.past.get(self.store, model, request)
                if kept is not None:
                    return Response(200, kept[0], kept[1])
        if model.rules is not None:
            token = request.header("authorization") if self.guard is not None else None
            scoped = self.access.list_query(model, model.rules, query, claims, token)
            if scoped is None:  # the token may see nothing the query asks for: no scan
                watermark = self.store.watermarks()[model.name] if query.as_of is None else query.as_of
                body = b'{"data":[],"total":0,"limit":%d,"offset":%d}' % (query.limit, query.offset)
                return Response(200, body, self._read_headers(watermark, query.as_of))
            query = scoped
        # a page sent whole (no expand, projection, as_of or rules) comes as its records' JSON,
        # kept beside their dicts or cut from their stored text (storage/shown.py)
        whole = query.as_of is None and query.projection is None and not query.expand and model.rules is None
        records, total, watermark, more = self.store.list_page(model.name, query, whole)
        if query.expand:
            encode = lambda: self._encoded(model, query, records)  # noqa: E731 (only on a miss)
            page = self.expander.page(self.store, model, query, records, encode, claims)
        elif query.projection is not None:
            page = b",".join(self.encoded.projected(model, query.projection, records))
        else:
            page = self.encoded.encode_page(model, records, whole)
        body = b'{"data":[%s],"total":%d,"limit":%d,"offset":%d}' % (page, total, query.limit, query.offset)
        headers = self._read_headers(watermark, query.as_of)
        link = None
        if more and records:  # RFC 8288: the next page, keyed on this page's last record
            last = records[-1]  # not a dict: the store's SentRecord, its sort keys read from its key columns
            link = listing.link_after(model, request, last, last.sort_keys if type(last) is not dict else None)
            headers.append(("Link", link))
        if past:
            self.past.keep(self.store, model, request, body, headers)
        elif keeping and query.as_of is None and model.rules is None and not (query.expand and self.rules):
            # a page at a cursor or an offset is kept from its second ask (readcache.py)
            if listing.base is None or self.present.admits_page(request):
                self.present.keep(self.store, request, self._read_models(model, query), body, watermark, link)
        return Response(200, body, headers)

    def _read_models(self, model: CompiledModel, query: Query) -> tuple[str, ...]:
        """The models a list of `model` reads: itself, and each model `expand=` embeds (made
        once per model and `expand=` value: the schema declares finitely many)."""
        key = (model.name, query.expand)
        names = self._reads.get(key)
        if names is None:
            parents = dict(model.refs)
            names = self._reads[key] = tuple(dict.fromkeys([model.name, *(parents[f] for f, _p in query.expand)]))
        return names

    def read(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Response:
        key = model.parse_id(segment)
        query = model.parse_get_query(request.query)
        if query.as_of is not None:
            self._check_as_of(model, query.as_of)
        # a record sent whole (no projection, expand or rules) comes as its stored text,
        # which is its JSON, live or as_of: no dict made (storage/store.py `get_versioned`)
        whole = query.projection is None and not query.expand and model.rules is None
        record, watermark, version = self.store.get_versioned(model.name, key, query.as_of, whole)
        if record is None:
            raise missing(model, key)
        if model.rules is not None:  # as_of: the rule asked of the record as it was
            assert not isinstance(record, bytes)  # not `whole`: the store made its dict
            self.access.check_get(model, model.rules, record, key, claims)
        headers = self._read_headers(watermark, query.as_of)
        headers.append(etag(version))  # the record version, whatever the projection (http/conditional.py)
        conditions = preconditions(request)
        # RFC 9110 §13.1.2; an expanded read embeds records with versions of their own, so the
        # record's tag cannot say the answer is unchanged: it is always answered whole
        if conditions is not None and not query.expand and not conditions.none_match(version):
            return Response(304, b"", headers, content_type=None)
        if isinstance(record, bytes):  # its stored text (`whole`)
            body = record
        elif query.expand:
            body = self.expander.records(
                self.store, model, query, [record], self._encoded(model, query, [record]), claims
            )[0]
        elif query.projection is not None:
            body = json_bytes(model.project[query.projection](record))
        else:
            body = self.encoded.encode(model, record)
        return Response(200, body, headers)

    def _encoded(self, model: CompiledModel, query: Query, records: Sequence[Record]) -> Sequence[bytes]:
        """The records' JSON, projected if asked: what `expand=` writes `_expand` into."""
        if query.projection is not None:
            project = model.project[query.projection]
            return [json_bytes(project(record)) for record in records]
        return [self.encoded.encode(model, record) for record in records]

    def batch(self, request: Request) -> Deferred | Awaitable[Response]:
        """`POST /batch`: guarded like the model routes; dbsvc/batchops.py does the rest."""
        request.meter = self._route_meters[BATCH_PATH]
        if request.method not in BATCH_METHODS:
            raise MethodNotAllowed(f"method {request.method!r} is not allowed on {request.path!r}", list(BATCH_METHODS))
        claims = NO_CLAIMS
        if self.guard is not None:  # 401/403 first, as on the model routes
            try:
                claims = self.authenticate(request)
            except self._refresh_needed:
                return self._after_key_refresh(lambda: self.batch(request))
        self._check_writable()
        return self.batches.answer(self.store, parse_json_body(request), claims)

    # -- a read replica's new store ---------------------------------------------------

    def use_store(self, store: ServedStore) -> None:
        """A read replica bootstrapped again: serve `store` from now on (on the loop)."""
        self.store = store
        self.broker.rebind(store, 1012, "the replica bootstrapped again; resubscribe")
