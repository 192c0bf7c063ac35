"""RFC 9457 problem details: the one place a `RequestError` becomes a response body.

Every error the service answers, from the protocol layer (413, 431, 503 ...) or from the
application (400 ... 422), goes through `problem_response`, so every error body has the
same shape (contract section 3)::

    {"type": "about:blank", "title": "Conflict", "status": 409, "code": "unique_violation",
     "detail": "email 'a@b.c' is already used by user 3", "request_id": "..."}
"""

from __future__ import annotations

import json

from dbsvc.errors import RequestError
from dbsvc.http.types import Response

PROBLEM_JSON = "application/problem+json"


def problem_body(exc: RequestError, request_id: str) -> dict:
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
    payload = json.dumps(problem_body(exc, request_id), ensure_ascii=False).encode("utf-8")
    return Response(exc.status, payload, list(exc.headers), PROBLEM_JSON)
