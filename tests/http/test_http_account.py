"""What the protocol layer records of one response (dbsvc/http/account.py): the span line and
the count on a meter, for a response refused before any request existed, for a request the
application gave its route's meter, and for one it did not.

`account` is called by the connection with the response's fields; here it is called with a
real `Request`, real route meters (dbsvc/metrics.py) and the real span log written into a
string (support/logkit.py), so each field of the line and each count is read back exactly.
The served path (a request through a real socket to its span line) is
test_hub_counts.py's and test_http_logs.py's; these cases reach what those cannot: the
meters, which only the service sets (docs/guide/operations.md, "Monitoring"), and a refusal's
line. Fixture-free, so `bench/mutation_inprocess.py` runs them (docs/mutation.md, session 22)."""

from __future__ import annotations

from dbsvc.http.account import account
from dbsvc.http.types import Request
from dbsvc.logs import flush_logs
from dbsvc.metrics import DURATION_BOUNDS, RouteMeter
from support.logkit import logging_to


def request(method: str = "GET", path: str = "/api/post/7", meter: RouteMeter | None = None) -> Request:
    return Request(method, path + "?x=1", path, [("x", "1")], [], request_id="r-req", meter=meter)


def lines_of(stream) -> list[str]:
    flush_logs()
    """The lines written, each past its timestamp and level (from its target on)."""
    return [line[line.index(" dbsvc.") + 1 :] for line in stream.getvalue().splitlines()]


def bucket_of(seconds: float) -> int:
    """The meter's bucket for `seconds`: the first bound at or above it (the last: +Inf)."""
    return next((i for i, bound in enumerate(DURATION_BOUNDS) if seconds <= bound), len(DURATION_BOUNDS))


def test_a_response_refused_before_any_request_is_logged_with_dashes_and_counted_unmatched_as_other():
    unmatched = RouteMeter("unmatched")
    with logging_to() as stream:
        account(True, unmatched, None, 400, 87, "r-refused", 0.75)
        assert lines_of(stream) == [
            "dbsvc.http.request: request method=- path=- status=400 duration_ms=0.0 bytes=87 request_id=r-refused"
        ]
    # no request, no duration worth a bucket: counted as taking no time at all
    assert unmatched.counts == {"OTHER": {400: 1}}
    assert unmatched.buckets == [1] + [0] * len(DURATION_BOUNDS)
    assert unmatched.sum == 0.0


def test_a_refusal_without_the_span_log_is_still_counted_and_a_server_without_meters_counts_nothing():
    unmatched = RouteMeter("unmatched")
    with logging_to() as stream:
        account(False, unmatched, None, 431, 10, "r-a", 0.2)
        account(True, None, None, 400, 11, "r-b", 0.2)
        assert lines_of(stream) == [
            "dbsvc.http.request: request method=- path=- status=400 duration_ms=0.0 bytes=11 request_id=r-b"
        ]
    assert unmatched.counts == {"OTHER": {431: 1}}


def test_a_request_with_its_routes_meter_is_logged_in_milliseconds_and_counted_on_that_meter_alone():
    route, unmatched = RouteMeter("/api/post/{id}"), RouteMeter("unmatched")
    with logging_to() as stream:
        # the request's own id is the line's, not the connection's argument
        account(True, unmatched, request("PUT", meter=route), 201, 312, "r-conn", 0.0125)
        assert lines_of(stream) == [
            "dbsvc.http.request: request method=PUT path=/api/post/7 status=201 duration_ms=12.5 bytes=312 "
            "request_id=r-req"
        ]
    assert route.counts == {"PUT": {201: 1}}
    assert route.buckets[bucket_of(0.0125)] == 1 and sum(route.buckets) == 1
    assert route.sum == 0.0125
    assert unmatched.counts == {} and sum(unmatched.buckets) == 0


def test_a_request_no_route_took_is_counted_on_the_unmatched_meter_under_its_method():
    unmatched = RouteMeter("unmatched")
    with logging_to() as stream:
        account(False, unmatched, request("DELETE", "/nowhere"), 404, 9, "r-conn", 3.0)
        account(False, None, request(), 404, 9, "r-conn", 3.0)  # no meter anywhere: nothing counted, no error
        assert lines_of(stream) == []
    assert unmatched.counts == {"DELETE": {404: 1}}
    assert unmatched.buckets[bucket_of(3.0)] == 1 and sum(unmatched.buckets) == 1
    assert unmatched.sum == 3.0
