"""The Python client's methods: per model a reads class and an API class, then `Client`.

Per model, in the generated module (python.py draws the whole)::

    class UserReads(ReadApi[R])          get, fetch, list, pages, iterate, subscribe, live_query,
                                         typed by the model's query TypedDicts (Unpack) and
                                         generic over the record type R
    class UserApi(UserReads[User])       the writes (create, replace, patch, delete), their
                                         batch ops (create_op, ...), and one UserReads per
                                         projection as an attribute (`client.user.card`)
    class Client                         `client.user`, `client.blog_post`, batch(), snapshot(),
                                         check_fingerprint(), subscribe(model, query, handler)
                                         and live_query(model, query) by model name

Every method is a line or two calling ReadApi's helpers (py_rest.py): what differs per
model is only the types, so mypy checks a caller's filters, sorts, projections and bodies
against the schema. Imports the client model and the types emitter.
"""

from __future__ import annotations

import keyword

from dbsvc.clients.model import ClientModel, ClientSchema
from dbsvc.clients.python_types import Lines, id_type, spec_name

CLIENT_ATTRIBUTES = frozenset(
    {"transport", "batch", "snapshot", "check_fingerprint", "fingerprint", "models", "subscribe", "live_query", "close"}
)
CALLBACK = "Callable[[dict[Any, R]], None] | None"
ON_RESET = "Callable[[ApiError], None] | None"
ON_ERROR = "Callable[[BaseException], None] | None"


def snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def attribute(model: ClientModel) -> str:
    """`client.<attribute>` of a model: `BlogPost` -> `blog_post`."""
    name = snake(model.name)
    return f"{name}_" if keyword.iskeyword(name) or name in CLIENT_ATTRIBUTES else name


def projection_attribute(name: str) -> str:
    method_names = {"get", "fetch", "list", "pages", "iterate", "subscribe", "live_query", "head"}
    clash = keyword.iskeyword(name) or name in method_names or name.startswith("_") or name.endswith("_op")
    return f"{name}_" if clash or name in {"create", "replace", "patch", "delete", "path", "spec"} else name


def emit_api(out: Lines, schema: ClientSchema, model: ClientModel) -> None:
    reads = model.type("Reads")
    ident = id_type(model)
    expand = (
        f", expand: {model.type('Expand')} | Sequence[{model.type('Expand')}] | None = None" if model.expands else ""
    )
    expand_arg = ', "expand": expand' if model.expands else ""
    query, feed = model.type("Query"), model.type("FeedQuery")
    out.add(f"class {reads}(ReadApi[R]):")
    out.add(
        f'"""The reads and feeds of {model.name} ({schema.source}:{model.line}), whole or under one projection."""', 1
    )
    out.blank()
    out.add(f"def get(self, id: {ident}, *, as_of: int | None = None{expand}) -> R:", 1)
    out.add(f'"""GET /api/{model.kebab}/{{id}}: the record (NotFoundError if none)."""', 2)
    out.add(f'fetched: Fetched[R] = self._fetch(id, {{"as_of": as_of{expand_arg}}})', 2)
    out.add("return fetched.record", 2)
    out.blank()
    out.add(f"def fetch(self, id: {ident}, *, as_of: int | None = None{expand}) -> Fetched[R]:", 1)
    out.add('"""The record with its ETag (for `if_match=`), watermark and head offset."""', 2)
    out.add(f'return self._fetch(id, {{"as_of": as_of{expand_arg}}})', 2)
    out.blank()
    out.add(f"def list(self, **query: Unpack[{query}]) -> Page[R]:", 1)
    out.add(f'"""GET /api/{model.kebab}: one page (`next_cursor` leads to the next)."""', 2)
    out.add("return self._list(query)", 2)
    out.blank()
    out.add(f"def pages(self, **query: Unpack[{query}]) -> Iterator[Page[R]]:", 1)
    out.add('"""Every page, each after the last by its `Link` cursor."""', 2)
    out.add("return self._pages(query)", 2)
    out.blank()
    out.add(f"def iterate(self, **query: Unpack[{query}]) -> Iterator[R]:", 1)
    out.add('"""Every matching record, page after page."""', 2)
    out.add("for page in self._pages(query):", 2)
    out.add("yield from page.data", 3)
    out.blank()
    out.add("def subscribe(", 1)
    out.add("self,", 2)
    out.add("handler: Callable[[JsonObject], None],", 2)
    out.add("/,", 2)
    out.add("*,", 2)
    out.add("after: int | None = None,", 2)
    out.add(f"on_reset: {ON_RESET} = None,", 2)
    out.add(f"on_error: {ON_ERROR} = None,", 2)
    out.add(f"**query: Unpack[{feed}],", 2)
    out.add(") -> Subscription[R]:", 1)
    out.add(f'"""/subscribe/{model.kebab}: every event after `after` (default: now), once, in order."""', 2)
    out.add('params = self.feed_params(query, "subscribe")', 2)
    out.add("return Subscription(self, params, handler, after, on_reset, on_error)", 2)
    out.blank()
    out.add("def live_query(", 1)
    out.add("self,", 2)
    out.add("*,", 2)
    out.add(f"on_change: {CALLBACK} = None,", 2)
    out.add(f"on_reset: {ON_RESET} = None,", 2)
    out.add(f"on_error: {ON_ERROR} = None,", 2)
    out.add(f"**query: Unpack[{feed}],", 2)
    out.add(") -> LiveQuery[R]:", 1)
    out.add(f'"""/live-query/{model.kebab}: the matching records, kept up to date across reconnects."""', 2)
    out.add("if self.id_field is None:", 2)
    out.add(
        f'raise QueryError(f"a live query of {model.name} needs the id field; projection {{self.projection!r}} leaves it out")',
        3,
    )
    out.add('params = self.feed_params(query, "live_query")', 2)
    out.add("return LiveQuery(self, params, self.id_field, on_change, on_reset, on_error)", 2)
    out.blank()
    out.blank()
    emit_writes(out, schema, model)


def emit_writes(out: Lines, schema: ClientSchema, model: ClientModel) -> None:
    ident = id_type(model)
    record = model.type_name
    api = model.type("Api")
    create, replace, patch = model.type("Create"), model.type("Replace"), model.type("Patch")
    out.add(f"class {api}({model.type('Reads')}[{record}]):")
    out.add(f'"""{model.name}: /api/{model.kebab} ({schema.source}:{model.line})."""', 1)
    out.blank()
    out.add("def __init__(self, transport: Transport) -> None:", 1)
    out.add(f"super().__init__(transport, {spec_name(model)})", 2)
    for projection in model.projections:
        name = projection_attribute(projection.name)
        reads = f"{model.type('Reads')}[{projection.type_name}]"
        out.add(f"self.{name}: {reads} = {model.type('Reads')}(transport, {spec_name(model)}, {projection.name!r})", 2)
    out.blank()
    out.add(f"def create(self, record: {create}) -> {ident}:", 1)
    out.add('"""POST: the new record\'s id (ConstraintViolationError, UniqueViolationError, ...)."""', 2)
    out.add(f"created: {ident} = self._create(record)", 2)
    out.add("return created", 2)
    out.blank()
    out.add(f"def replace(self, id: {ident}, record: {replace}, *, if_match: str | None = None) -> {record}:", 1)
    out.add('"""PUT: the stored record; with `if_match`, only if the record is at that ETag."""', 2)
    out.add(f'stored: {record} = self._write("PUT", id, record, if_match)', 2)
    out.add("return stored", 2)
    out.blank()
    out.add(f"def patch(self, id: {ident}, changes: {patch}, *, if_match: str | None = None) -> {record}:", 1)
    out.add('"""PATCH: merge `changes`; the stored record."""', 2)
    out.add(f'stored: {record} = self._write("PATCH", id, changes, if_match)', 2)
    out.add("return stored", 2)
    out.blank()
    out.add(f"def delete(self, id: {ident}, *, if_match: str | None = None) -> None:", 1)
    out.add('"""DELETE (ReferencedError while other records point to it)."""', 2)
    out.add("self._delete(id, if_match)", 2)
    out.blank()
    out.add(f"def create_op(self, record: {create}) -> JsonObject:", 1)
    out.add('"""A create for Client.batch()."""', 2)
    out.add('return self._op("create", record=record)', 2)
    out.blank()
    for method, body in (("replace", replace), ("patch", patch)):
        wire = "update" if method == "replace" else "patch"
        out.add(
            f"def {method}_op(self, id: {ident} | OpRef, record: {body}, *, if_match: str | None = None) -> JsonObject:",
            1,
        )
        out.add(f'"""A {method} for Client.batch()."""', 2)
        out.add(f'return self._op("{wire}", id, record, if_match)', 2)
        out.blank()
    out.add(f"def delete_op(self, id: {ident} | OpRef, *, if_match: str | None = None) -> JsonObject:", 1)
    out.add('"""A delete for Client.batch()."""', 2)
    out.add('return self._op("delete", id, None, if_match)', 2)
    out.blank()
    out.blank()


def emit_client(out: Lines, schema: ClientSchema) -> None:
    out.add("class Client:")
    out.add(f'"""The service of {schema.source}: one attribute per model, and the routes of the whole service."""', 1)
    out.blank()
    out.add("fingerprint = SCHEMA_FINGERPRINT", 1)
    out.blank()
    out.add("def __init__(self, base_url: str, *, token: Token = None, timeout: float = 30.0) -> None:", 1)
    out.add('"""`token`: a bearer token, or a function returning a fresh one (called per request)."""', 2)
    out.add("self.transport = Transport(base_url, token, timeout)", 2)
    for model in schema.models:
        out.add(f"self.{attribute(model)} = {model.type('Api')}(self.transport)", 2)
    out.add("self.models: dict[str, ReadApi[Any]] = {", 2)
    for model in schema.models:
        out.add(f"{model.name!r}: self.{attribute(model)},", 3)
        if model.kebab != model.name:
            out.add(f"{model.kebab!r}: self.{attribute(model)},", 3)
    out.add("}", 2)
    out.blank()
    out.add("def subscribe(", 1)
    out.add("self,", 2)
    out.add("model: str,", 2)
    out.add("query: Mapping[str, object],", 2)
    out.add("handler: Callable[[JsonObject], None],", 2)
    out.add("*,", 2)
    out.add("after: int | None = None,", 2)
    out.add(f"on_reset: {ON_RESET} = None,", 2)
    out.add(f"on_error: {ON_ERROR} = None,", 2)
    out.add(") -> Subscription[Any]:", 1)
    out.add('"""`client.<model>.subscribe` by name (`\'User\'` or `\'user\'`), its query as a dict."""', 2)
    out.add('api, params = feed_by_name(self.models, model, query, "subscribe")', 2)
    out.add("return Subscription(api, params, handler, after, on_reset, on_error)", 2)
    out.blank()
    out.add("def live_query(", 1)
    out.add("self,", 2)
    out.add("model: str,", 2)
    out.add("query: Mapping[str, object],", 2)
    out.add("*,", 2)
    out.add("on_change: Callable[[dict[Any, Any]], None] | None = None,", 2)
    out.add(f"on_reset: {ON_RESET} = None,", 2)
    out.add(f"on_error: {ON_ERROR} = None,", 2)
    out.add(") -> LiveQuery[Any]:", 1)
    out.add('"""`client.<model>.live_query` by name, its query as a dict."""', 2)
    out.add('api, params = feed_by_name(self.models, model, query, "live_query")', 2)
    out.add("if api.id_field is None:", 2)
    out.add('raise QueryError(f"a live query of {model} needs the id field; this projection leaves it out")', 3)
    out.add("return LiveQuery(api, params, api.id_field, on_change, on_reset, on_error)", 2)
    out.blank()
    out.add("def close(self) -> None:", 1)
    out.add('"""Close the calling thread\'s kept connection (feeds close on their own)."""', 2)
    out.add("self.transport.close()", 2)
    out.blank()
    out.add("def __enter__(self) -> Client:", 1)
    out.add("return self", 2)
    out.blank()
    out.add("def __exit__(self, *exc: object) -> None:", 1)
    out.add("self.close()", 2)
    out.blank()
    out.add("def batch(self, ops: Sequence[JsonObject]) -> BatchResult:", 1)
    out.add('"""POST /batch: every op (from `<model>.create_op(...)`, ...) or none."""', 2)
    out.add("return run_batch(self.transport, ops)", 2)
    out.blank()
    out.add("def snapshot(self) -> JsonObject:", 1)
    out.add('"""GET /snapshot: watermarks, epoch, head offset, the server\'s schema fingerprint."""', 2)
    out.add('body: JsonObject = self.transport.request("GET", "/snapshot").json()', 2)
    out.add("return body", 2)
    out.blank()
    out.add("def check_fingerprint(self) -> None:", 1)
    out.add('"""Raise ClientError unless the server serves the schema this client was made from."""', 2)
    out.add('served = self.snapshot().get("fingerprint")', 2)
    out.add("if served != SCHEMA_FINGERPRINT:", 2)
    out.add("raise ClientError(", 3)
    out.add(
        f'f"the server serves schema fingerprint {{served!r}}; this client was generated from '
        f'{schema.source} ({{SCHEMA_FINGERPRINT}}): generate it again"',
        4,
    )
    out.add(")", 3)
