"""consumer.py's decisions at the unit where each is made, in process (so a mutation run sees
them; test_consumer_fake_primary.py runs the command as a subprocess): the URL
(`parse_endpoint`), the check of one message (`check_frame`, rule 1), which refusal ends the
run and what it says (`refusal_message`, rule 4), and the head-frame comparison and its
message (`same_row`, `diverged_message`, rule 7). The sinks (FILE and standard output) are
test_consumer_sinks_units.py.

Frames are built from the documented layout (offset u64, CRC32 u32, length u32, then the
payload, big-endian) by tests/support/replica_kit.py, never with logfile.py's encoder; every
message is compared word for word."""

from __future__ import annotations

import json

import pytest

from dbsvc.errors import ConfigError, HandshakeRefused
from dbsvc.replica.consumer import (
    Endpoint,
    FrameError,
    check_frame,
    diverged_message,
    parse_endpoint,
    refusal_message,
    same_row,
)
from support.replica_kit import MiB, event, frame, payload

# --- parse_endpoint -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, ws, http",
    [
        ("http://h:8080", "ws://h:8080", "http://h:8080"),
        ("ws://h:8080/", "ws://h:8080", "http://h:8080"),
        ("https://db.example/base/", "wss://db.example/base", "https://db.example/base"),
        ("WSS://db.example:9/base/replicate", "wss://db.example:9/base", "https://db.example:9/base"),
        ("  http://h:1/replicate/  ", "ws://h:1", "http://h:1"),
        ("http://h:1/DBX/", "ws://h:1/DBX", "http://h:1/DBX"),
    ],
)
def test_a_base_url_names_both_the_stream_and_the_http_side(url, ws, http):
    endpoint = parse_endpoint(url)
    assert endpoint == Endpoint(ws, http)
    assert endpoint.replicate_url(17) == f"{ws}/replicate?after=17"


@pytest.mark.parametrize("url", ["ftp://h:1", "h:1", "http://:80", "http://h:0", "http://h:99999", "http://h:x"])
def test_a_url_that_is_not_a_server_base_is_a_usage_error(url):
    with pytest.raises(ConfigError) as caught:
        parse_endpoint(url)
    assert str(caught.value) == f"URL {url!r} is not a server base URL: expected http://HOST:PORT or ws://HOST:PORT"


@pytest.mark.parametrize("url", ["http://h:1/?after=3", "http://h:1/#top"])
def test_a_url_with_a_query_or_fragment_is_a_usage_error(url):
    with pytest.raises(ConfigError) as caught:
        parse_endpoint(url)
    assert str(caught.value) == f"URL {url!r}: give the server's base URL without a query; use --after N"


# --- check_frame (rule 1) -----------------------------------------------------------------

P4 = payload(4)

BAD = [
    # message after offset 3; the offset the error names; its reason, word for word
    ("text", "hello", 4, "a text message (5 characters), expected a binary frame"),
    ("empty", b"", 4, "truncated frame header (0 of 16 bytes)"),
    ("short header", frame(4)[:10], 4, "truncated frame header (10 of 16 bytes)"),
    ("short payload", frame(4)[:-5], 4, f"truncated payload ({len(P4) - 5} of {len(P4)} bytes)"),
    ("crc", frame(4, crc=12345), 4, "payload checksum mismatch"),
    (
        "length past the message",
        frame(4, length=len(P4) + 10),
        4,
        f"truncated payload ({len(P4)} of {len(P4) + 10} bytes)",
    ),
    (
        "length short",
        frame(4, length=len(P4) - 3),
        4,
        f"length {len(P4) - 3} is short of the message's {len(P4)} payload bytes",
    ),
    ("gap of one", frame(5), 5, "offset gap: expected 4, offsets 4 are missing"),
    ("gap", frame(6), 6, "offset gap: expected 4, offsets 4..5 are missing"),
    ("repeat", frame(3), 3, "offset repeats: 3 was already received, expected 4"),
    ("far behind", frame(1), 1, "offset repeats: 1 was already received, expected 4"),
    ("not json", frame(4, b'{"kind": '), 4, "payload is not JSON (Expecting value: line 1 column 10 (char 9))"),
    (
        "not utf-8",
        frame(4, b'"\xff"'),
        4,
        "payload is not JSON ('utf-8' codec can't decode byte 0xff in position 1: invalid start byte)",
    ),
    ("a list", frame(4, b"[1,2]"), 4, "payload is a JSON list, expected an event object"),
    ("a link", frame(4, payload(4, kind="link")), 4, "payload is not an insert, update or delete event (kind 'link')"),
    ("no kind", frame(4, b'{"offset":4}'), 4, "payload is not an insert, update or delete event (kind None)"),
    (
        "kind object",
        frame(4, payload(4, kind={"a": 1})),
        4,
        "payload is not an insert, update or delete event (kind {'a': 1})",
    ),
    ("event offset", frame(4, payload(4, offset=7)), 4, "the event's offset 7 disagrees with the frame's 4"),
    ("no event offset", frame(4, b'{"kind":"delete"}'), 4, "the event's offset None disagrees with the frame's 4"),
]


@pytest.mark.parametrize("message, offset, reason", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_each_bad_message_is_refused_naming_its_offset_and_fault(message, offset, reason):
    with pytest.raises(FrameError) as caught:
        check_frame(message, 4)
    assert (caught.value.offset, caught.value.reason) == (offset, reason)
    assert str(caught.value) == f"bad frame at offset {offset}: {reason}"


def test_an_event_offset_of_true_is_not_offset_1():
    with pytest.raises(FrameError) as caught:
        check_frame(frame(1, payload(1, offset=True)), 1)
    assert caught.value.reason == "the event's offset True disagrees with the frame's 1"


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_a_good_frame_gives_its_offset_and_event(kind):
    assert check_frame(frame(4, payload(4, kind=kind)), 4) == (4, event(4, kind=kind))


def test_the_payload_limit_is_inclusive_and_names_itself():
    body = payload(4, record={"id": 4, "pad": "x" * 100})
    assert check_frame(frame(4, body), 4, max_payload=len(body))[0] == 4
    with pytest.raises(FrameError) as caught:
        check_frame(frame(4, body), 4, max_payload=len(body) - 1)
    assert caught.value.offset == 4
    assert caught.value.reason == (
        f"record too large: a frame payload of {len(body)} bytes, over the limit of {len(body) - 1} "
        "(a log holding it would not reopen); nothing of it is kept"
    )
    # the log's own limit, 64 MiB, by default: a length over it, whatever the message holds
    with pytest.raises(FrameError) as caught:
        check_frame(frame(4, body, length=64 * MiB + 1), 4)
    assert caught.value.reason.startswith(
        f"record too large: a frame payload of {64 * MiB + 1} bytes, over the limit of {64 * MiB} "
    )
    with pytest.raises(FrameError) as caught:
        check_frame(frame(4, body, length=64 * MiB), 4)
    assert caught.value.reason == f"truncated payload ({len(body)} of {64 * MiB} bytes)"


# --- refusal_message (rule 4) -------------------------------------------------------------


def refused(status: int, body: dict | bytes | None = None) -> HandshakeRefused:
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    return HandshakeRefused(status, [], data)


def test_offset_gone_says_to_rebootstrap_and_where_the_log_now_starts():
    text = (
        "HTTP 410 offset_gone: the server no longer holds the rows after offset 12{}; "
        "they were compacted away, so this replica cannot be continued. Re-bootstrap it: copy "
        "the server's current records (note the Dbsvc-Offset header of the reads) and start a "
        "new replica file with --after that offset"
    )
    gone = {"code": "offset_gone", "detail": "compacted"}
    assert refusal_message(refused(410, {**gone, "oldest": 40}), 12) == text.format(
        " (its log now starts after offset 40)"
    )
    assert refusal_message(refused(410, gone), 12) == text.format("")
    assert refusal_message(refused(410, {**gone, "oldest": "40"}), 12) == text.format("")


@pytest.mark.parametrize("status, code", [(401, "unauthorized"), (403, "forbidden")])
def test_a_refused_token_says_how_to_give_one(status, code):
    exc = refused(status, {"code": code, "detail": "the token expired"})
    assert refusal_message(exc, 0) == (
        f"HTTP {status} {code}: the token expired (give a valid token with --token or SERVICE_TOKEN)"
    )


def test_replication_off_says_what_the_schema_needs():
    exc = refused(404, {"code": "replication_disabled", "detail": "replication is off"})
    assert refusal_message(exc, 0) == (
        "HTTP 404 replication_disabled: replication is off (the server's schema needs `[runtime] replication = true`)"
    )
    assert refusal_message(refused(404, {"code": "not_found", "detail": "no such path"}), 0) == (
        "HTTP 404 not_found: no such path"
    )


def test_a_replica_ahead_of_its_server_says_so():
    exc = refused(400, {"code": "offset_out_of_range", "detail": "after=9 is past the head 5"})
    assert refusal_message(exc, 9) == (
        "HTTP 400 offset_out_of_range: after=9 is past the head 5; this replica is ahead of the server, whose "
        "history no longer reaches offset 9 (a server restored from a backup, a different "
        "or reset server, or a wrong --after?). The rows after the server's head are not the "
        "server's: start a new replica file, keeping this one if its rows matter"
    )
    assert refusal_message(refused(400, {"code": "bad_query", "detail": "after=x"}), 9) == "HTTP 400 bad_query: after=x"


def test_other_client_errors_end_the_run_and_name_the_body_when_there_is_no_problem():
    assert refusal_message(refused(418, b"short and stout"), 0) == "HTTP 418 : short and stout"
    assert refusal_message(refused(499, b"x" * 300), 0) == "HTTP 499 : " + "x" * 200
    assert refusal_message(refused(422, {"code": "invalid"}), 0) == 'HTTP 422 invalid: {"code": "invalid"}'


def test_a_body_that_is_not_utf_8_is_shown_with_replacement_characters_and_single_spaces():
    assert refusal_message(refused(418, b"\xffbad  body"), 0) == "HTTP 418 : \ufffdbad body"


@pytest.mark.parametrize("status", [399, 408, 429, 500, 502, 503])
def test_busy_failing_or_timed_out_servers_are_retried(status):
    assert refusal_message(refused(status, {"code": "unavailable", "detail": "busy"}), 0) is None


# --- same_row and diverged_message (rule 7) -----------------------------------------------


def test_the_head_frame_is_the_files_when_byte_equal_or_equal_but_for_the_watermark():
    mine = frame(5)
    assert same_row(mine, mine)
    assert same_row(bytearray(mine), mine)
    assert same_row(frame(5, payload(5, watermark=2)), mine)
    no_watermark = b'{"kind":"insert","model":"User","offset":5,"id":5,"record":{"id":5}}'
    assert same_row(frame(5, no_watermark), mine)
    assert same_row(mine, frame(5, no_watermark))  # FILE's frame may be the one without it


@pytest.mark.parametrize(
    "theirs",
    [
        frame(5, payload(5, record={"id": 5, "name": "other"})),
        frame(5, payload(5, model="Post")),
        frame(6, payload(5)),  # the same payload under another offset
        frame(5)[:12],  # not even a header
        frame(5, b'{"kind":'),  # not JSON
        frame(5, b"[5]"),  # not an object
        frame(5).decode("latin-1"),  # a text message
    ],
    ids=["record", "model", "offset", "short", "not-json", "a-list", "text"],
)
def test_any_other_difference_is_another_history(theirs):
    assert not same_row(theirs, frame(5))


def test_a_file_frame_that_is_not_an_object_matches_only_itself():
    mine = frame(5, b"[5]")
    assert same_row(mine, mine)
    assert not same_row(frame(5, b"[5 ]"), mine)


def test_the_divergence_message_names_the_offset_and_the_file():
    assert diverged_message("r.log", 12) == (
        "the server's frame at offset 12 differs from the one r.log holds: the server's history "
        "is no longer this file's (restored from a backup, or rewritten), so its offsets after 12 "
        "may name other rows. r.log was left as it is; start a new replica file (keep this one if "
        "its rows matter)"
    )


def test_dbsvc_replicate_takes_as_many_messages_at_once_as_a_read_replica_s_group():
    """The two readers of /replicate take the stream alike (consumer.py BATCH's comment): a
    count changed in one is changed in both, or this says which one moved."""
    from dbsvc.replica import consumer, groups

    assert (consumer.BATCH, consumer.BATCH_BYTES) == (groups.BATCH, groups.BATCH_BYTES) == (1024, 1 << 20)
