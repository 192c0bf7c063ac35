"""The request span line's exact text and the route meter's exact buckets on their edges.

The span log writes a duration as `str(round(duration_ms, 3))` would (docs/guide/operations.md
shows the line) without calling either (logformat.duration_parts), and the meter finds the
commonest buckets by compares before `bisect`: both are cuts for speed that must not move a
single byte or count, so each edge is held here to its literal value: 0, an exact tie of
the float (rounded half to even), a float just below a decimal tie, values `round` writes
with an exponent or not finite, a bound exactly and the next float above it."""

from __future__ import annotations

import math
import random
import time

import pytest

from dbsvc import logformat
from dbsvc.logformat import TextFormat, duration_parts
from dbsvc.logs import flush_logs, log_request
from dbsvc.metrics import DURATION_BOUNDS, RouteMeter
from support.logkit import logging_to

LINE = (
    "2025-11-30T10:53:20.007Z  INFO dbsvc.http.request: request method=GET path=/api/post/7 status=200 "
    "duration_ms={} bytes=12 request_id=r-1"
)


@pytest.mark.parametrize(
    "duration_ms, shown",
    [
        (0.0, "0.0"),
        (0.0004, "0.0"),
        (0.0005, "0.001"),  # the float lies just above the tie
        (0.0045, "0.004"),  # the float lies just below the tie: 0.00449999...
        (0.0625, "0.062"),  # an exact tie: half to even
        (0.0635, "0.064"),
        (2.0, "2.0"),
        (0.25, "0.25"),
        (0.1234567, "0.123"),
        (999.9996, "1000.0"),
        (1e12, "1000000000000.0"),
        (1e17, "1e+17"),
        (-0.0, "-0.0"),
        (math.nan, "nan"),
        (math.inf, "inf"),
    ],
)
def test_a_span_lines_duration_is_written_as_round_writes_it(duration_ms, shown):
    [line] = TextFormat().request_lines([(1764500000.0071, "GET", "/api/post/7", 200, duration_ms, 12, "r-1")])
    assert line == LINE.format(shown)


def test_a_span_line_quotes_a_path_with_a_space_a_quote_or_a_control_and_ends_with_its_worker():
    spans = [
        (1764500000.9999, "-", '/café x%"\n', 400, 0.25, 0, "r-2"),
        (1764500001.0, "GET", "/ünï%", 200, 1.5, 3, "r-3"),
    ]
    assert TextFormat("reader-1").request_lines(spans) == [
        '2025-11-30T10:53:20.999Z  INFO dbsvc.http.request: request method=- path="/café x%\\"\\n" status=400 '
        "duration_ms=0.25 bytes=0 request_id=r-2 worker=reader-1",
        "2025-11-30T10:53:21.000Z  INFO dbsvc.http.request: request method=GET path=/ünï% status=200 "
        "duration_ms=1.5 bytes=3 request_id=r-3 worker=reader-1",
    ]


def test_duration_parts_agree_with_round_near_every_kind_of_tie():
    rng = random.Random(21)
    cases = [k / 1000 for k in range(3000)] + [(k + 0.5) / 1000 for k in range(3000)]
    for _ in range(3000):
        tie = (rng.randrange(10**12) + 0.5) / 1000
        cases += [tie, math.nextafter(tie, 0.0), math.nextafter(tie, math.inf), rng.uniform(0.0, 5000.0)]
    for _ in range(3000):  # past 1e9 ms `round` answers: the float's error there passes 1e-4 of a microsecond
        big = (rng.randrange(10**16) + 0.5) / 1000
        cases += [big, math.nextafter(big, 0.0), math.nextafter(big, math.inf)]
    cases += [1e9, math.nextafter(1e9, 0.0), 5e-324, -1.0, -0.0004, -0.0, 0.0]
    wrong = [ms for ms in cases if "{}{}".format(*duration_parts(ms)) != str(round(ms, 3))]
    assert wrong == []


def test_the_meter_puts_a_bound_in_its_own_bucket_and_the_next_float_in_the_next():
    meter = RouteMeter("/api/post/{id}")
    meter.observe("GET", 200, 0.0)
    for bound in DURATION_BOUNDS:
        meter.observe("GET", 200, bound)
        meter.observe("GET", 200, math.nextafter(bound, math.inf))
    meter.observe("GET", 200, math.nan)  # as bisect_left: below every bound
    assert meter.buckets == [3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]
    assert meter.counts == {"GET": {200: 30}}


@pytest.mark.parametrize("index", range(len(DURATION_BOUNDS)))
def test_the_meter_bucket_of_each_bound_is_that_bounds_own(index):
    bound = DURATION_BOUNDS[index]
    meter = RouteMeter("/api/post/{id}")
    meter.observe("GET", 200, bound)
    meter.observe("GET", 200, math.nextafter(bound, 0.0))
    meter.observe("GET", 200, math.nextafter(bound, math.inf))
    expected = [0] * (len(DURATION_BOUNDS) + 1)
    expected[index] += 2
    expected[index + 1] += 1
    assert meter.buckets == expected
    assert meter.sum == bound + math.nextafter(bound, 0.0) + math.nextafter(bound, math.inf)


def test_a_served_span_line_holds_the_decoded_path_and_never_its_query(make_server):
    demo = make_server()
    token = "c2VjcmV0LXNwYW4tdG9rZW4"
    response = demo.get(f"/caf%C3%A9%20%25x?auth=Bearer%20{token}", {"X-Request-Id": "span-edge"})
    assert response.status == 404
    deadline = time.monotonic() + 3
    lines: list[str] = []
    while not lines and time.monotonic() < deadline:
        lines = [line for line in demo.log().splitlines() if "request_id=span-edge" in line]
        time.sleep(0.02)
    [line] = lines
    assert ' INFO dbsvc.http.request: request method=GET path="/café %x" status=404 duration_ms=' in line
    assert line.endswith(f" bytes={len(response.body)} request_id=span-edge")
    assert token not in demo.log()


@pytest.mark.parametrize(
    "word", ["BeaRer abc.def", "bEARER abc.def", "AuThorization: abc.def", "authorızation: abc.def"]
)
def test_a_credential_in_a_path_is_redacted_in_any_case(word):
    with logging_to() as stream:
        log_request("GET", f"/x/{word}", 200, 0.5, 2, "r-case")
        flush_logs()
        [line] = stream.getvalue().splitlines()
    assert "abc.def" not in line and "[redacted]" in line


@pytest.mark.parametrize(
    "duration_ms, parts",
    [
        (0.1234567, (0, ".123")),
        (0.0008, (0, ".001")),  # under a microsecond, rounded up
        (2.0, (2, ".0")),
        (0.0, ("", 0.0)),  # 0 and below: `round`'s own
        (-0.0, ("", -0.0)),
        (0.0005, ("", 0.001)),  # within 1e-4 of a microsecond's half: `round`'s own
        (1e9, ("", 1000000000.0)),  # 1e12 microseconds and above: `round`'s own
        (1000000000.00025, ("", 1000000000.0)),
    ],
)
def test_duration_parts_cut_by_the_table_away_from_a_half_and_leave_the_rest_to_round(duration_ms, parts):
    """The docstring's two branches, each answer given whole: whole milliseconds and the
    decimals from the table, or "" and `round`'s float (whose text is the same)."""
    assert duration_parts(duration_ms) == parts


def test_a_span_line_quotes_a_path_holding_only_a_quote():
    [line] = TextFormat().request_lines([(1764500000.0071, "GET", '/a"b', 200, 0.25, 12, "r-1")])
    assert ' path="/a\\"b" status=200 ' in line


def test_span_lines_of_one_second_away_from_a_half_call_neither_round_nor_the_timestamp_again():
    """request_lines' two cuts, counted rather than timed: a line's duration comes from the
    table unless it lies within 1e-4 of a microsecond's half (`round` then), and the
    timestamp's second is formatted once a second (`_second_cache`). 501 lines in one second
    with durations away from a half: `round` never, `format_timestamp` at most once."""
    calls = {"round": 0, "timestamp": 0}

    def counted_round(value, digits=None):
        calls["round"] += 1
        return round(value, digits)

    def counted_timestamp(created):
        calls["timestamp"] += 1
        return timestamp(created)

    timestamp = logformat.format_timestamp
    spans = [(1764500000.0 + n / 1000, "GET", "/api/post/7", 200, 0.1 + n * 0.037, 12, "r-1") for n in range(500)]
    spans.append((1764500000.9, "GET", "/", 200, 0.0008, 0, "r-2"))  # under a microsecond: cut too
    logformat.round = counted_round  # a module global shadows the builtin for request_lines
    logformat.format_timestamp = counted_timestamp
    try:
        lines = TextFormat().request_lines(spans)
    finally:
        del logformat.round
        logformat.format_timestamp = timestamp
    assert calls["round"] == 0 and calls["timestamp"] <= 1
    assert [line.split(" duration_ms=")[1].split(" ")[0] for line in lines] == [str(round(t[4], 3)) for t in spans]
