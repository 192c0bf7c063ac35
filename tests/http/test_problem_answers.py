"""dbsvc/http/problem.py's answers to what is not a RequestError: `error_response` (a logged
500 whose log keeps the exception and not its message; the last resort when rendering fails),
`internal_error_response` and `last_words`, byte for byte. Fixture-free (a handler of our own
on the `dbsvc.http` logger), so `bench/mutation_inprocess.py` runs it (session 16, wt-mpo6)."""

from __future__ import annotations

import logging

from dbsvc import errors
from dbsvc.http.problem import PROBLEM_JSON, error_response, internal_error_response, last_words
from dbsvc.http.types import Request

INTERNAL = (
    b'{"type": "about:blank", "title": "Internal Server Error", "status": 500, '
    b'"code": "internal", "detail": "internal server error", "request_id": "r-9"}'
)


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def logged(call):
    """(the call's answer, the records `dbsvc.http` logged meanwhile)."""
    handler = Kept()
    logger = logging.getLogger("dbsvc.http")
    logger.addHandler(handler)
    try:
        return call(), handler.records
    finally:
        logger.removeHandler(handler)


def test_a_request_error_is_its_problem_and_logs_nothing():
    answer, records = logged(lambda: error_response(errors.NotFound("no user 3"), None, "r-1"))
    assert answer.status == 404
    assert answer.body.endswith(b'"detail": "no user 3", "request_id": "r-1"}')
    assert records == []


def test_any_other_exception_is_a_500_logged_with_its_frames_and_not_its_message():
    request = Request("POST", "/api/user", "/api/user", [], [])
    failure = ValueError("secret client data")
    answer, records = logged(lambda: error_response(failure, request, "r-9"))
    assert (answer.status, answer.body, answer.headers, answer.content_type) == (500, INTERNAL, [], PROBLEM_JSON)
    [record] = records
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "unhandled error in POST /api/user (request_id=r-9)"
    assert record.exc_info is not None and record.exc_info[1] is failure
    assert record.exc_messages is False  # type: ignore[attr-defined]


def test_an_exception_without_a_request_logs_dashes():
    _, [record] = logged(lambda: error_response(KeyError("k"), None, "r-9"))
    assert record.getMessage() == "unhandled error in - - (request_id=r-9)"


def test_an_error_that_cannot_be_rendered_gets_the_fixed_500_and_is_logged():
    unencodable = errors.BadRequest("d", value=object())
    answer, records = logged(lambda: error_response(unencodable, None, "r-9"))
    assert (answer.status, answer.body, answer.headers, answer.content_type) == (500, INTERNAL, [], PROBLEM_JSON)
    [record] = records
    assert record.getMessage() == "the error response of request_id=r-9 could not be rendered"
    assert isinstance(record.exc_info[1], TypeError)
    assert record.exc_messages is False  # type: ignore[attr-defined]


def test_the_fixed_500_and_the_last_words_byte_for_byte():
    answer = internal_error_response("r-9")
    assert (answer.status, answer.body, answer.headers, answer.content_type) == (500, INTERNAL, [], PROBLEM_JSON)
    assert (
        last_words("r-9")
        == (
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/problem+json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(INTERNAL)
        )
        + INTERNAL
    )
