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
- `internal_error_response` is the last resort when rendering fails anyway (a value json
  cannot encode, a bug): fixed bytes around the request id, which is always ASCII
  (`message.RequestIds`), so it cannot fail.
"""

from __future__ import annotations

import json
from typing import Any

from dbsvc.errors import RequestError
from dbsvc.http.types import Response

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


_INTERNAL_HEAD = (b'{"type": "about:blank", "title": "Internal Server Error", "status": 500, '
                  b'"code": "internal", "detail": "internal server error", "request_id": "')


def internal_error_response(request_id: str) -> Response:
    """The 500 `internal` problem, built without json: what is answered when even an error
    response could not be rendered (connection.py rule 8)."""
    return Response(500, _INTERNAL_HEAD + request_id.encode("ascii", "replace") + b'"}', [], PROBLEM_JSON)
