"""Every exception dbsvc raises on purpose, in one tree.

This module imports nothing else from dbsvc (tests/test_layers.py holds it to that): every
layer may raise these, and `dbsvc.http.problem` turns each `RequestError` into an RFC 9457
problem+json body in one place. Messages are lower case, name the offending value with `!r` and say what
was expected.

Tree::

    DbsvcError
      SchemaError            one located problem in a schema file
      SchemaErrors           all problems of one check run (a list of SchemaError)
      ConfigError            bad environment or configuration value (exit status 2)
      BuildError             the zipapp cannot be built
      StorageError
        TenantError          bad tenant name, missing tenant, tenant exists
        TenantLocked         another process holds the writer lock (exit status 2)
        CorruptLog           damage before the tail of a log or snapshot
        StreamError          a replication frame a follower cannot apply
          EpochChanged       the primary compacted: bootstrap again
        IncompatibleSchema   stored schema cannot be migrated to the new one
        StoreReadOnly        an I/O error turned the store read-only
        BatchRejected        rows of a batch insert that break a constraint (nothing written)
        BadBackup            a backup directory that is incomplete or does not verify
      ImportRejected         bad lines of an import file (nothing imported)
      HistoryDiverged        a replica file no longer continues its server's history (exit status 3)
      TokenError             token rejected (mapped to 401 or 403 by the guard)
      MalformedAnswer        a primary's answer that parsed but is not what its route promises
      WebSocketClientError   the blocking WebSocket client could not open a socket, or it failed
        HandshakeRefused     the server answered the handshake with a status other than 101
        WebSocketClosed      the stream ended (the close code received, or 1006)
        MessageTooBig        a message over the client's limit (closed with 1009)
      RequestError           carries `status` and `code` (docs/guide/errors.md)
        BadRequest, BadQuery (MalformedCursor below it), Unauthorized, Forbidden, NotFound, MethodNotAllowed,
        RequestTimeout, OffsetGone, PayloadTooLarge, UnsupportedMediaType, UriTooLong, HeadersTooLarge,
        UniqueViolation, ForeignKeyViolation, Referenced, ConstraintViolation,
        OffsetOutOfRange, ReplicationDisabled, ReadOnlyReplica, UpgradeRequired, Unavailable,
        InternalError, VersionNotSupported
"""

from __future__ import annotations

import json
from typing import Any


class DbsvcError(Exception):
    """Base of every error dbsvc raises deliberately."""


class SchemaError(DbsvcError):
    """One problem in a schema file, at a 1-based line and column."""

    def __init__(self, message: str, line: int, col: int, path: str = "<schema>") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: error: {self.message}"


class SchemaErrors(DbsvcError):
    """Every problem found in one run over a schema, in source order."""

    def __init__(self, errors: list[SchemaError], source: str = "") -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors
        self.source = source


class ConfigError(DbsvcError):
    """A configuration value (environment or schema table) that cannot be used."""


class BuildError(DbsvcError):
    """`dbsvc build` cannot produce a self-contained zipapp (a dependency missing or not pure Python)."""


class StorageError(DbsvcError):
    """Base of the storage layer's errors."""


class TenantError(StorageError):
    """A tenant name that is invalid, missing, or already taken."""


class TenantLocked(StorageError):
    """Another process holds the tenant's writer lock."""

    def __init__(self, path: str, pid: int | None, hint: str = "") -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"tenant directory {path!r} is locked by {holder}; one writer per data directory"
            + (f"; {hint}" if hint else "")
        )
        self.path = path
        self.pid = pid


class CorruptLog(StorageError):
    """Damage that is not a torn tail: refusing to open is the only safe answer."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class StreamError(StorageError):
    """A replication frame a follower cannot apply: names the offset and what is wrong."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"replication frame at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class EpochChanged(StreamError):
    """The primary compacted: its frames now count watermarks in a new epoch, so the
    follower must bootstrap again from the primary's new snapshot."""


class IncompatibleSchema(StorageError):
    """The tenant's stored schema cannot be migrated to the one being served."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("incompatible schema change:\n" + "\n".join(f"  - {r}" for r in reasons))
        self.reasons = reasons


class StoreReadOnly(StorageError):
    """An I/O error on write or fsync; nothing more is accepted until a restart."""


class BatchRejected(StorageError):
    """Rows of `Store.insert_batch` that break a constraint; nothing was written. `problems`
    lists (row index, the RequestError one insert would have raised, the index of the other
    batch row it clashes with or None)."""

    def __init__(self, problems: list[tuple[int, RequestError, int | None]], rows: int) -> None:
        index, error, _other = problems[0]
        super().__init__(f"{len(problems)} of {rows} rows refused, nothing written; first: row {index}: {error.detail}")
        self.problems = problems


class BadBackup(StorageError):
    """A backup directory that is incomplete, altered or damaged (`tenant create --from`)."""


class ImportRejected(DbsvcError):
    """An import file with bad lines; nothing was imported. `problems` holds one
    `FILE:LINE: message` per bad line shown (at most a fixed number), `count` all of them."""

    def __init__(self, problems: list[str], count: int) -> None:
        more = f"\n... and {count - len(problems)} more" if count > len(problems) else ""
        super().__init__("\n".join(problems) + more)
        self.problems = problems
        self.count = count


class HistoryDiverged(DbsvcError):
    """`dbsvc replicate --out FILE`: the server's history is no longer the one FILE holds
    (a restore, an import that rewrote it): the run stops, FILE untouched (exit status 3)."""


class TokenError(DbsvcError):
    """A bearer token the guard refuses; `forbidden` selects 403 over 401."""

    def __init__(self, message: str, *, forbidden: bool = False, sent: bool = True) -> None:
        super().__init__(message)
        self.forbidden = forbidden
        self.sent = sent


class MalformedAnswer(DbsvcError):
    """A primary's answer that parsed but is not what its route promises (a read replica's
    `GET /snapshot` body): `field` holds `value` (its repr shortened, or `missing`), not
    `expected`. As transient as no answer: the follower retries while serving."""

    def __init__(self, route: str, field: str, value: str, expected: str) -> None:
        super().__init__(f"the primary answered a malformed {route}: {field} {value}, expected {expected}")
        self.route = route
        self.field = field
        self.value = value
        self.expected = expected


class WebSocketClientError(DbsvcError):
    """A client WebSocket that could not be opened, or failed (dbsvc.http.ws.client rule C2)."""


class UpstreamError(DbsvcError):
    """A forwarded request got no answer from its upstream (dbsvc.http.upstream rule 4):
    `sent` False when it cannot have reached it (no connection), True when it may have."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class HandshakeRefused(WebSocketClientError):
    """The server answered the opening handshake with `status`, not 101 (client rule C2)."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        try:
            problem = json.loads(body) if body else None
        except ValueError:
            problem = None
        self.problem: dict[str, Any] | None = problem if isinstance(problem, dict) else None
        self.status = status
        self.headers = headers
        self.body = body
        detail = self.problem.get("detail") if self.problem else body[:200].decode("utf-8", "replace")
        code = f" {self.code}" if self.code else ""
        super().__init__(f"the server refused the WebSocket handshake: HTTP {status}{code}: {detail}")

    @property
    def code(self) -> str | None:
        """The problem's `code` (`offset_gone`, `unauthorized` ...), None without one."""
        code = self.problem.get("code") if self.problem else None
        return code if isinstance(code, str) else None


class WebSocketClosed(WebSocketClientError):
    """The stream ended: the close `code` received, or 1006 without a close frame (client rule C5)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"WebSocket closed with code {code}" + (f": {reason}" if reason else ""))
        self.code = code
        self.reason = reason


class MessageTooBig(WebSocketClientError):
    """A message over the client's `max_message` (client rule C3); the socket is closed with 1009."""


class RequestError(DbsvcError):
    """An error answered to a client; subclasses fix `status`, `code` and `title`."""

    status = 400
    code = "bad_request"
    title = "Bad Request"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
        self.headers: list[tuple[str, str]] = []


class BadRequest(RequestError):
    status, code, title = 400, "bad_request", "Bad Request"


class BadQuery(RequestError):
    status, code, title = 400, "bad_query", "Bad Request"


class MalformedCursor(BadQuery):
    """A `cursor` text that is no cursor this service makes (bad base64 or UTF-8, JSON that
    is not the cursor's array, nested past the parser's depth, a key of the wrong kind or
    an int key past the signed 64-bit range): refused by the decoder itself, so no text a
    client sends gets past it as anything but a 400 (cursors.py `decode_cursor`)."""


class OffsetOutOfRange(RequestError):
    status, code, title = 400, "offset_out_of_range", "Bad Request"


class Unauthorized(RequestError):
    status, code, title = 401, "unauthorized", "Unauthorized"


class Forbidden(RequestError):
    status, code, title = 403, "forbidden", "Forbidden"


class NotFound(RequestError):
    status, code, title = 404, "not_found", "Not Found"


class ReplicationDisabled(RequestError):
    status, code, title = 404, "replication_disabled", "Not Found"


class MethodNotAllowed(RequestError):
    status, code, title = 405, "method_not_allowed", "Method Not Allowed"

    def __init__(self, detail: str, allow: list[str]) -> None:
        super().__init__(detail)
        self.allow = allow
        self.headers = [("Allow", ", ".join(allow))]


class ReadOnlyReplica(RequestError):
    """405 on a read replica: writes go to the primary, named in `Dbsvc-Primary`."""

    status, code, title = 405, "read_only_replica", "Method Not Allowed"

    def __init__(self, detail: str, primary: str) -> None:
        super().__init__(detail)
        self.headers = [("Allow", "GET, HEAD, OPTIONS"), ("Dbsvc-Primary", primary)]


class UniqueViolation(RequestError):
    status, code, title = 409, "unique_violation", "Conflict"


class ForeignKeyViolation(RequestError):
    status, code, title = 409, "foreign_key_violation", "Conflict"


class Referenced(RequestError):
    status, code, title = 409, "referenced", "Conflict"


class PreconditionFailed(RequestError):
    """412: an If-Match or If-None-Match of a write did not hold (RFC 9110 §13.1.1-2); the
    record's current `ETag` rides along when it has one, so the client need not read again
    to learn it (dbsvc/http/conditional.py)."""

    status, code, title = 412, "precondition_failed", "Precondition Failed"

    def __init__(self, detail: str, version: int) -> None:
        super().__init__(detail)
        if version:
            self.headers = [("ETag", f'"{version}"')]


class RequestTimeout(RequestError):
    """408: the request body did not arrive in time (the protocol layer's body deadline)."""

    status, code, title = 408, "bad_request", "Request Timeout"


class OffsetGone(RequestError):
    status, code, title = 410, "offset_gone", "Gone"


class PayloadTooLarge(RequestError):
    status, code, title = 413, "payload_too_large", "Content Too Large"


class UnsupportedMediaType(RequestError):
    status, code, title = 415, "unsupported_media_type", "Unsupported Media Type"


class ConstraintViolation(RequestError):
    """422 with every violation: `errors` is a list of {"field", "message"}."""

    status, code, title = 422, "constraint_violation", "Unprocessable Content"

    def __init__(self, errors: list[dict[str, str]]) -> None:
        first = errors[0] if errors else {"field": "", "message": "invalid record"}
        others = len(errors) - 1
        more = f" (and {others} more error{'s' if others > 1 else ''})" if others > 0 else ""
        super().__init__(f"{first['field']}: {first['message']}{more}", errors=errors)
        self.errors = errors


class UriTooLong(RequestError):
    """414: the request line alone is past the head limit, so the target is what to shorten
    (a query string of many filter values, say); the limit is the head's (rule 3)."""

    status, code, title = 414, "bad_request", "URI Too Long"


class HeadersTooLarge(RequestError):
    status, code, title = 431, "bad_request", "Request Header Fields Too Large"


class UpgradeRequired(RequestError):
    """426: a WebSocket route asked without a (version 13) WebSocket handshake."""

    status, code, title = 426, "upgrade_required", "Upgrade Required"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.headers = [("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]


class Unavailable(RequestError):
    status, code, title = 503, "unavailable", "Service Unavailable"


class RetryLater(Unavailable):
    """503 with `Retry-After`: what is missing now is expected back within seconds."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.headers = [("Retry-After", str(retry_after))]


class WriterUnavailable(RetryLater):
    """503 on a reader worker of `serve --workers N` while its writer is down (being
    restarted): a write cannot be forwarded; `Retry-After` says when to try again."""


class NotCaughtUp(RetryLater):
    """503 on a reader worker or a read replica asked for a read with `Dbsvc-After: N`
    that has not applied offset N within the bounded wait: the answer would miss writes
    the client has seen acknowledged (docs/workers.md, "Reading your writes on any
    connection")."""


class InternalError(RequestError):
    status, code, title = 500, "internal", "Internal Server Error"


class VersionNotSupported(RequestError):
    """505: a request line naming an HTTP major version other than 1 (RFC 9110 §15.6.6)."""

    status, code, title = 505, "bad_request", "HTTP Version Not Supported"
