"""RFC 9457 problem details: the one place a `RequestError` becomes a response body.

Every error the service answers, from the protocol layer (413, 431, 503 ...) or from the
application (400 ... 422), goes through `problem_response`, so every error body has the
same shape (docs/guide/errors.md)::

    {"type": "about:blank", "title": "Conflict", "status": 409, "code": "unique_violation",
     "detail": "email 'a@b.c' is already used by user 3", "request_id": "..."}

Invariants:
- A body always encodes. Details echo client values, and a JSON string may decode to a
  lone surrogate (`"\\ud800"`), which UTF-8 cannot encode. Such a character can only sit
  inside a JSON string here, so `backslashreplace` writes it back as the very escape it
  came from (`\\ud800`): valid JSON, the same value, and every other character untouched.
- `error_response` answers any exception of the application's and never raises: a
  `RequestError` is its problem, anything else a logged 500 `internal` whose log shows the
  exception's type and frames, never its message (a message may hold the client's data).
- `internal_error_response` is the last resort when rendering fails anyway (a value json
  cannot encode, a bug): fixed bytes around the request id, which is always ASCII
  (`message.RequestIds`), so it cannot fail.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dbsvc.errors import InternalError, RequestError
from dbsvc.http.types import Request, Response

log = logging.getLogger("dbsvc.http")

PROBLEM_JSON = "application/problem+json"


def problem_body(exc: RequestError, request_id: str) -> dict[str, Any]:
    body = {
        "type": "about:blank",
        "title": exc.title,
        "status": exc.status,
        "code": exc.code,
        "detail": exc.detail,
        "request_id": request_id,
    }
    body.update(exc.extra)
    return body


def problem_response(exc: RequestError, request_id: str) -> Response:
    """The complete error response for `exc`, headers such as Allow or WWW-Authenticate included."""
    text = json.dumps(problem_body(exc, request_id), ensure_ascii=False)
    return Response(exc.status, text.encode("utf-8", "backslashreplace"), list(exc.headers), PROBLEM_JSON)


_INTERNAL_HEAD = (
    b'{"type": "about:blank", "title": "Internal Server Error", "status": 500, '
    b'"code": "internal", "detail": "internal server error", "request_id": "'
)


def internal_error_response(request_id: str) -> Response:
    """The 500 `internal` problem, built without json: what is answered when even an error
    response could not be rendered (connection.py rule 8)."""
    return Response(500, _INTERNAL_HEAD + request_id.encode("ascii", "replace") + b'"}', [], PROBLEM_JSON)


def error_response(exc: BaseException, request: Request | None, request_id: str) -> Response:
    """The response for an exception of the application's; never raises (connection.py rule 8)."""
    try:
        if isinstance(exc, RequestError):
            return problem_response(exc, request_id)
        log.error(
            "unhandled error in %s %s (request_id=%s)",
            request.method if request else "-",
            request.path if request else "-",
            request_id,
            exc_info=exc,
            extra={"exc_messages": False},
        )
        return problem_response(InternalError("internal server error"), request_id)
    except Exception as failure:
        log.error(
            "the error response of request_id=%s could not be rendered",
            request_id,
            exc_info=failure,
            extra={"exc_messages": False},
        )
        return internal_error_response(request_id)


# A response that needs no h11 and no json: what a crashed connection still says (rule 8).
_LAST_WORDS = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/problem+json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n"
)


def last_words(request_id: str) -> bytes:
    """The whole 500 `internal` response, status line and headers included, built without
    h11 or json: what a connection whose own code failed still writes (connection.py rule 8)."""
    body = internal_error_response(request_id).body
    return (_LAST_WORDS % len(body)) + body
