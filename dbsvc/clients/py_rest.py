"""The fixed part of the generated Python client: REST over the standard library.

This file is not imported by dbsvc: `dbsvc client SCHEMA --lang python` copies its body (every
line after the `# --- client body ---` marker) into the generated module, after a header that
names the schema, and before the classes generated for the schema's models (python.py). It is
kept as a real module so that it is linted, read and type-checked like the rest of the house,
and so the text each client carries is exactly this text.

Rules for what lives here:

1. Standard library only (`http.client`, `urllib.parse`, `json`, `threading`); the generated
   file must run wherever Python 3.11 runs. Nothing from dbsvc: the body is copied away.
2. Nothing schema-specific. What a model takes (its filters, operators, projections) comes
   from the generated part, as a `QuerySpec` literal per model, and from the generated
   `PROBLEM_CLASSES`, one exception class per problem code of the server.
3. Every refusal of the server becomes an `ApiError` subclass carrying `status`, `code`,
   `detail`, `errors` (the 422 field list) and the whole problem body; a network failure is
   `TransportError`; a keyword a model does not take is `QueryError`, raised before any I/O.
4. `mypy --strict` clean once it is in a generated module (tests/clients check it).

The names above the marker are imports the body needs; the generated module has its own
import block (python.py `IMPORTS`), which holds these and realtime's.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, cast
from urllib.parse import quote, unquote, urlsplit

# --- client body ---

R = TypeVar("R")
JsonObject = dict[str, Any]
Token = str | Callable[[], str] | None
"""A bearer token, a function that returns a fresh one (called for every request and every
reconnect, so it may refresh an expired token), or None for a server without the guard."""


class ClientError(Exception):
    """Every error this client raises."""


class TransportError(ClientError):
    """The server could not be reached, or answered something that is not HTTP/JSON."""


class QueryError(ClientError, TypeError):
    """A keyword argument the model's route does not take (raised before any request)."""


class FieldError(TypedDict):
    """One violation of a 422 `constraint_violation`: the field and what was wrong."""

    field: str
    message: str


class ApiError(ClientError):
    """A problem+json answer (RFC 9457). Branch on the class or on `code`, never on `detail`."""

    code = ""

    def __init__(self, status: int, problem: JsonObject) -> None:
        self.status = status
        self.problem = problem
        self.code = str(problem.get("code", self.code))
        self.detail = str(problem.get("detail", ""))
        self.request_id = str(problem.get("request_id", ""))
        raw = problem.get("errors")
        self.errors: list[FieldError] = list(raw) if isinstance(raw, list) else []
        super().__init__(f"{status} {self.code}: {self.detail}")


PROBLEM_CLASSES: dict[str, type[ApiError]] = {}  # code -> class; the generated part fills it


def problem_error(status: int, body: bytes) -> ApiError:
    """The exception of a refused request: the class of its `code`, else ApiError itself."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"code": "", "detail": body[:200].decode("utf-8", "replace")}
    return PROBLEM_CLASSES.get(str(problem.get("code")), ApiError)(status, problem)


@dataclass(frozen=True)
class Response:
    """One HTTP answer: the status, the headers (lower-case names) and the body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def header_int(self, name: str) -> int | None:
        value = self.headers.get(name)
        return int(value) if value is not None and value.isdigit() else None


class Transport:
    """HTTP/1.1 to one server with keep-alive: one connection per thread, so a client may be
    shared by threads. A request on a kept connection that the server closed meanwhile (its
    idle timeout) is sent again once on a new connection; a fresh connection never is.

    Every read carries `Dbsvc-After`, the highest `Dbsvc-Offset` a write of this client
    (any thread's) was answered with, so a read replica or a worker of `serve --workers`
    that answers it holds this client's writes."""

    def __init__(self, base_url: str, token: Token = None, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {base_url!r} is not a server URL: expected http://HOST:PORT or https://HOST")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._local = threading.local()
        self._written = 0  # the highest Dbsvc-Offset a write was answered with
        self._written_lock = threading.Lock()

    def bearer(self) -> str | None:
        """The token to send now: the value, or what the token function returns."""
        return self.token() if callable(self.token) else self.token

    def headers(self) -> dict[str, str]:
        token = self.bearer()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def websocket_url(self, path: str, params: Sequence[tuple[str, str]]) -> str:
        scheme = "wss" if self.scheme == "https" else "ws"
        return f"{scheme}://{self.host}:{self.port}{self.prefix}{path}{query_string(params)}"

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        if self.scheme == "https":
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._local.conn = conn
        return conn, False

    def close(self) -> None:
        """Close this thread's kept connection (a later request opens a new one)."""
        self._drop()

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def request(
        self,
        method: str,
        path: str,
        params: Sequence[tuple[str, str]] = (),
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request; the answer, or the ApiError of a refusal (status 400 and up)."""
        target = f"{self.prefix}{path}{query_string(params)}"
        sent = {**self.headers(), **(headers or {})}
        read = method in ("GET", "HEAD")
        if read and self._written:
            sent["Dbsvc-After"] = str(self._written)
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
            sent["Content-Type"] = "application/json"
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                conn.request(method, target, body=payload, headers=sent)
                answer = conn.getresponse()
                data = answer.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop()
                if reused and attempt == 1:
                    continue  # the server closed the kept connection while it was idle
                raise TransportError(f"{method} {target}: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise TransportError(f"{method} {target}: {exc}") from exc
            if answer.will_close:
                self._drop()
            reply = Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, data)
            if reply.status >= 400:
                raise problem_error(reply.status, data)
            offset = None if read else reply.header_int("dbsvc-offset")
            if offset is not None:
                with self._written_lock:
                    self._written = max(self._written, offset)
            return reply
        raise AssertionError("unreachable: the second attempt returns or raises")


def query_string(params: Sequence[tuple[str, str]]) -> str:
    if not params:
        return ""
    return "?" + "&".join(f"{quote(k, safe='_')}={quote(v, safe='')}" for k, v in params)


def wire_value(value: object) -> str:
    """A query value as the server parses it: booleans `true`/`false`, numbers as JSON,
    None `null` (a filter's null, given inside a list: a lone None means "not given")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return str(value)


@dataclass(frozen=True)
class QuerySpec:
    """What one model's routes take, generated from the schema: the keywords of a list
    (`list_keys`: filters, operators, search, sort, limit, offset, cursor, as_of, expand),
    of a feed (`feed_keys`: filters, operators, search), and the Python keywords that stand
    for a field named like a Python keyword (`from_` for `from`)."""

    model: str
    kebab: str
    id_field: str
    list_keys: frozenset[str]
    feed_keys: frozenset[str]
    renamed: Mapping[str, str] = field(default_factory=dict)
    unkeyed: frozenset[str] = frozenset()  # projections without the id field

    def encode(self, query: Mapping[str, object], allowed: frozenset[str], route: str) -> list[tuple[str, str]]:
        """The query parameters of `query`; a keyword outside `allowed` is a QueryError."""
        params: list[tuple[str, str]] = []
        for key, value in query.items():
            if key not in allowed:
                raise QueryError(
                    f"{self.model} {route} takes no keyword {key!r}; it takes: {', '.join(sorted(allowed))}"
                )
            if value is None:
                continue
            wire = self.renamed.get(key, key)
            if key in ("sort", "expand") and not isinstance(value, str):
                value = ",".join(str(v) for v in cast(Iterable[object], value))
            if isinstance(value, (list, tuple, set, frozenset)):
                params.extend((wire, wire_value(v)) for v in value)
            else:
                params.append((wire, wire_value(value)))
        return params


@dataclass(frozen=True)
class Page(Generic[R]):
    """One list page: `data`, `total` (every match), `limit`, `offset`, and from the headers
    `next_cursor` (the `Link` rel="next" cursor; None on the last page), `watermark`
    (`Dbsvc-Watermark`) and `head` (`Dbsvc-Offset`: subscribe after it to miss nothing)."""

    data: list[R]
    total: int
    limit: int
    offset: int
    next_cursor: str | None
    watermark: int | None
    head: int | None


@dataclass(frozen=True)
class Fetched(Generic[R]):
    """One record with its `etag` (send it back as `if_match=`), `watermark` and `head`."""

    record: R
    etag: str | None
    watermark: int | None
    head: int | None


def next_cursor(link: str | None) -> str | None:
    """The `cursor` of a `Link: <...>; rel="next"` header (RFC 8288), else None."""
    if not link:
        return None
    for part in link.split(","):
        target, _, rest = part.strip().partition(";")
        if 'rel="next"' not in rest.replace(" ", "") or not target.startswith("<"):
            continue
        query = urlsplit(target.strip("<>")).query
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if name == "cursor":
                return unquote(value)
    return None


@dataclass(frozen=True)
class BatchResult:
    """What `POST /batch` answers: one result per op (`status`, `id`, `etag`, `record` for
    update and patch), and the offsets of the batch's first and last rows."""

    results: list[JsonObject]
    first: int
    last: int


OpRef = TypedDict("OpRef", {"$op": int})


def op_ref(index: int) -> OpRef:
    """`{"$op": index}`: the id the batch's op `index` wrote, as an id or a @ref value."""
    return {"$op": index}


class ReadApi(Generic[R]):
    """One model's routes under one projection (None: whole records). The generated classes
    of each model add the typed methods, which call these."""

    def __init__(self, transport: Transport, spec: QuerySpec, projection: str | None = None) -> None:
        if projection is not None and projection in spec.unkeyed:
            self.id_field: str | None = None  # the projection leaves the id out: no live query
        else:
            self.id_field = spec.id_field
        self.transport = transport
        self.spec = spec
        self.projection = projection
        self.path = f"/api/{spec.kebab}"

    def _params(self, query: Mapping[str, object], allowed: frozenset[str], route: str) -> list[tuple[str, str]]:
        params = self.spec.encode(query, allowed, route)
        if self.projection is not None:
            params.append(("projection", self.projection))
        return params

    def feed_params(self, query: Mapping[str, object], route: str) -> list[tuple[str, str]]:
        """The parameters of a feed (`route`: subscribe or live_query) of this model."""
        return self._params(query, self.spec.feed_keys, route)

    def _fetch(self, id: object, query: Mapping[str, object]) -> Fetched[Any]:
        params = self._params(query, frozenset({"as_of", "expand"}), "get")
        reply = self.transport.request("GET", f"{self.path}/{quote(str(id), safe='')}", params)
        return Fetched(
            reply.json(),
            reply.headers.get("etag"),
            reply.header_int("dbsvc-watermark"),
            reply.header_int("dbsvc-offset"),
        )

    def _list(self, query: Mapping[str, object]) -> Page[Any]:
        reply = self.transport.request("GET", self.path, self._params(query, self.spec.list_keys, "list"))
        body = reply.json()
        return Page(
            body["data"],
            body["total"],
            body["limit"],
            body["offset"],
            next_cursor(reply.headers.get("link")),
            reply.header_int("dbsvc-watermark"),
            reply.header_int("dbsvc-offset"),
        )

    def _pages(self, query: Mapping[str, object]) -> Iterator[Page[Any]]:
        """Every page of the list, each after the last by its `Link` cursor."""
        page = self._list(query)
        yield page
        while page.next_cursor is not None:
            rest = {k: v for k, v in query.items() if k != "offset"}
            page = self._list({**rest, "cursor": page.next_cursor})
            yield page

    def head(self) -> int:
        """The server's change-stream head now (`Dbsvc-Offset` of an empty page)."""
        reply = self.transport.request("GET", self.path, [("limit", "0")])
        return reply.header_int("dbsvc-offset") or 0

    def _create(self, record: Mapping[str, Any]) -> Any:
        return self.transport.request("POST", self.path, body=dict(record)).json()["id"]

    def _write(self, method: str, id: object, record: Mapping[str, Any], if_match: str | None) -> Any:
        headers = {"If-Match": if_match} if if_match is not None else None
        target = f"{self.path}/{quote(str(id), safe='')}"
        return self.transport.request(method, target, body=dict(record), headers=headers).json()

    def _delete(self, id: object, if_match: str | None) -> None:
        headers = {"If-Match": if_match} if if_match is not None else None
        self.transport.request("DELETE", f"{self.path}/{quote(str(id), safe='')}", headers=headers)

    def _op(
        self, op: str, id: object = None, record: Mapping[str, Any] | None = None, if_match: str | None = None
    ) -> JsonObject:
        built: JsonObject = {"op": op, "model": self.spec.kebab}
        if id is not None:
            built["id"] = id
        if record is not None:
            built["record"] = dict(record)
        if if_match is not None:
            built["if_match"] = if_match
        return built


def run_batch(transport: Transport, ops: Sequence[Mapping[str, Any]]) -> BatchResult:
    """`POST /batch`: all the ops or none; a refusal raises the one op's problem (its
    `problem["op"]` is that op's index)."""
    body = transport.request("POST", "/batch", body={"ops": [dict(op) for op in ops]}).json()
    return BatchResult(body["results"], body["first"], body["last"])
