"""Every problem body as bytes (dbsvc/http/problem.py, the one place errors become bodies):
the key order, the status, title and code of each error class against the list
docs/guide/errors.md documents, the extra members
after `request_id` and the headers, compared with literals, never with errors.py's own
class attributes. In process: mutmut sees these (docs/mutation.md)."""

from __future__ import annotations

import pytest

from dbsvc import errors
from dbsvc.http.problem import internal_error_response, problem_response


def head(status: int, title: str, code: str, detail: str = "d") -> bytes:
    return (
        f'{{"type": "about:blank", "title": "{title}", "status": {status}, "code": "{code}", '
        f'"detail": "{detail}", "request_id": "r-1"'
    ).encode()


@pytest.mark.parametrize(
    ("error", "body"),
    [
        (errors.BadRequest("d"), head(400, "Bad Request", "bad_request") + b"}"),
        (errors.BadQuery("d"), head(400, "Bad Request", "bad_query") + b"}"),
        (errors.OffsetOutOfRange("d"), head(400, "Bad Request", "offset_out_of_range") + b"}"),
        (errors.Unauthorized("d"), head(401, "Unauthorized", "unauthorized") + b"}"),
        (errors.Forbidden("d"), head(403, "Forbidden", "forbidden") + b"}"),
        (errors.NotFound("d"), head(404, "Not Found", "not_found") + b"}"),
        (errors.ReplicationDisabled("d"), head(404, "Not Found", "replication_disabled") + b"}"),
        (errors.RequestTimeout("d"), head(408, "Request Timeout", "bad_request") + b"}"),
        (
            errors.UniqueViolation("d", field="email"),
            head(409, "Conflict", "unique_violation") + b', "field": "email"}',
        ),
        (
            errors.ForeignKeyViolation("d", field="author_id"),
            head(409, "Conflict", "foreign_key_violation") + b', "field": "author_id"}',
        ),
        (errors.Referenced("d", count=2), head(409, "Conflict", "referenced") + b', "count": 2}'),
        (errors.OffsetGone("d"), head(410, "Gone", "offset_gone") + b"}"),
        (errors.PayloadTooLarge("d"), head(413, "Content Too Large", "payload_too_large") + b"}"),
        (errors.UriTooLong("d"), head(414, "URI Too Long", "bad_request") + b"}"),
        (errors.UnsupportedMediaType("d"), head(415, "Unsupported Media Type", "unsupported_media_type") + b"}"),
        (
            errors.ConstraintViolation([{"field": "a", "message": "m"}, {"field": "b", "message": "n"}]),
            head(422, "Unprocessable Content", "constraint_violation", "a: m (and 1 more error)")
            + b', "errors": [{"field": "a", "message": "m"}, {"field": "b", "message": "n"}]}',
        ),
        (errors.HeadersTooLarge("d"), head(431, "Request Header Fields Too Large", "bad_request") + b"}"),
        (errors.InternalError("d"), head(500, "Internal Server Error", "internal") + b"}"),
        (errors.Unavailable("d"), head(503, "Service Unavailable", "unavailable") + b"}"),
        (errors.VersionNotSupported("d"), head(505, "HTTP Version Not Supported", "bad_request") + b"}"),
    ],
)
def test_each_error_class_is_its_documented_problem_body(error, body):
    response = problem_response(error, "r-1")
    assert (response.status, response.content_type, response.body) == (
        int(body.split(b'"status": ')[1][:3]),
        "application/problem+json",
        body,
    )


@pytest.mark.parametrize(
    ("error", "status", "headers"),
    [
        (errors.MethodNotAllowed("d", ["GET", "HEAD"]), 405, [("Allow", "GET, HEAD")]),
        (
            errors.ReadOnlyReplica("d", "http://primary:3000"),
            405,
            [("Allow", "GET, HEAD, OPTIONS"), ("Dbsvc-Primary", "http://primary:3000")],
        ),
        (errors.UpgradeRequired("d"), 426, [("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]),
    ],
)
def test_an_error_with_headers_carries_them_in_order(error, status, headers):
    response = problem_response(error, "r-1")
    assert response.status == status and response.headers == headers
    title = {405: "Method Not Allowed", 426: "Upgrade Required"}[status]
    code = {"MethodNotAllowed": "method_not_allowed", "ReadOnlyReplica": "read_only_replica"}.get(
        type(error).__name__, "upgrade_required"
    )
    assert response.body == head(status, title, code) + b"}"


def test_the_last_resort_500_is_the_same_shape_built_without_json():
    response = internal_error_response("r-1")
    assert (response.status, response.content_type) == (500, "application/problem+json")
    assert response.body == head(500, "Internal Server Error", "internal", "internal server error") + b"}"


def test_a_detail_keeps_its_characters_and_a_lone_surrogate_its_escape():
    response = problem_response(errors.BadRequest('\u00e9 \ud800 "q"'), "r-1")
    assert response.body == (
        b'{"type": "about:blank", "title": "Bad Request", "status": 400, "code": "bad_request", '
        b'"detail": "\xc3\xa9 \\ud800 \\"q\\"", "request_id": "r-1"}'
    )
