"""Every exception of dbsvc/errors.py with arguments: its message word for word and the
attributes callers read (the CLI prints the messages, the guard reads `forbidden` and `sent`,
the protocol layer the `headers`, the ws client's callers `problem` and `code`).

Each error is made inside its test, never in a `parametrize` list: a value made at import is
made once, before any mutant is switched on (docs/mutation.md, session 16, wt-mpo6).
Fixture-free, so `bench/mutation_inprocess.py` runs it."""

from __future__ import annotations

from dbsvc import errors


def test_a_schema_error_is_located_and_prints_file_line_col():
    error = errors.SchemaError("expected ':' after field name, got 'int'", 3, 7, "blog.dbs")
    assert (error.message, error.line, error.col, error.path) == (
        "expected ':' after field name, got 'int'",
        3,
        7,
        "blog.dbs",
    )
    assert str(error) == "blog.dbs:3:7: error: expected ':' after field name, got 'int'"
    assert error.args == ("expected ':' after field name, got 'int'",)
    assert str(errors.SchemaError("m", 1, 2)) == "<schema>:1:2: error: m"


def test_schema_errors_hold_every_error_and_print_one_a_line():
    first, second = errors.SchemaError("a", 1, 1, "s.dbs"), errors.SchemaError("b", 2, 5, "s.dbs")
    both = errors.SchemaErrors([first, second], "model X {}")
    assert str(both) == "s.dbs:1:1: error: a\ns.dbs:2:5: error: b"
    assert both.errors == [first, second]
    assert both.source == "model X {}"
    assert errors.SchemaErrors([first]).source == ""


def test_tenant_locked_names_the_holder_and_the_hint():
    error = errors.TenantLocked("/d/t", 41, "stop it first")
    assert str(error) == "tenant directory '/d/t' is locked by process 41; one writer per data directory; stop it first"
    assert (error.path, error.pid) == ("/d/t", 41)
    unknown = errors.TenantLocked("/d/t", None)
    assert str(unknown) == "tenant directory '/d/t' is locked by another process; one writer per data directory"
    assert unknown.pid is None
    assert str(errors.TenantLocked("/d/t", 0)).endswith("locked by another process; one writer per data directory")


def test_corrupt_log_and_stream_error_name_where_and_why():
    corrupt = errors.CorruptLog("log.1", 4096, "bad checksum")
    assert str(corrupt) == "log.1: corrupt at byte 4096: bad checksum"
    assert (corrupt.path, corrupt.offset, corrupt.reason) == ("log.1", 4096, "bad checksum")
    stream = errors.EpochChanged(17, "new epoch")
    assert str(stream) == "replication frame at offset 17: new epoch"
    assert (stream.offset, stream.reason) == (17, "new epoch")


def test_incompatible_schema_lists_every_reason():
    error = errors.IncompatibleSchema(["removed field User.age", "changed type of User.name"])
    assert str(error) == "incompatible schema change:\n  - removed field User.age\n  - changed type of User.name"
    assert error.reasons == ["removed field User.age", "changed type of User.name"]


def test_batch_rejected_counts_and_names_the_first_row():
    clash = errors.UniqueViolation("email 'a' is already used")
    problems = [(3, clash, 1), (5, errors.ConstraintViolation([]), None)]
    error = errors.BatchRejected(problems, 10)
    assert str(error) == "2 of 10 rows refused, nothing written; first: row 3: email 'a' is already used"
    assert error.problems is problems


def test_import_rejected_shows_the_lines_and_how_many_more():
    error = errors.ImportRejected(["f:1: bad", "f:2: worse"], 5)
    assert str(error) == "f:1: bad\nf:2: worse\n... and 3 more"
    assert (error.problems, error.count) == (["f:1: bad", "f:2: worse"], 5)
    assert str(errors.ImportRejected(["f:1: bad"], 1)) == "f:1: bad"


def test_token_and_upstream_errors_carry_their_flags():
    default = errors.TokenError("expired")
    assert (str(default), default.forbidden, default.sent) == ("expired", False, True)
    chosen = errors.TokenError("tenant", forbidden=True, sent=False)
    assert (chosen.forbidden, chosen.sent) == (True, False)
    upstream = errors.UpstreamError("no answer", sent=False)
    assert (str(upstream), upstream.sent) == ("no answer", False)
    assert errors.UpstreamError("x", sent=True).sent is True


def test_a_malformed_answer_names_the_route_the_field_the_value_and_what_was_expected():
    error = errors.MalformedAnswer("/snapshot", "offset", "'abc'", "a non-negative integer")
    assert str(error) == "the primary answered a malformed /snapshot: offset 'abc', expected a non-negative integer"
    assert (error.route, error.field, error.value, error.expected) == (
        "/snapshot",
        "offset",
        "'abc'",
        "a non-negative integer",
    )


def test_a_refused_handshake_reads_the_problem_body():
    body = b'{"code": "offset_gone", "detail": "offset 3 is gone"}'
    error = errors.HandshakeRefused(410, [("content-type", "application/problem+json")], body)
    assert str(error) == "the server refused the WebSocket handshake: HTTP 410 offset_gone: offset 3 is gone"
    assert (error.status, error.body, error.code) == (410, body, "offset_gone")
    assert error.headers == [("content-type", "application/problem+json")]
    assert error.problem == {"code": "offset_gone", "detail": "offset 3 is gone"}


def test_a_refused_handshake_without_a_problem_shows_the_body_start():
    text = errors.HandshakeRefused(502, [], b"bad gateway " + b"x" * 300)
    assert str(text) == "the server refused the WebSocket handshake: HTTP 502: bad gateway " + "x" * 188
    assert (text.problem, text.code) == (None, None)
    empty = errors.HandshakeRefused(500, [], b"")
    assert str(empty) == "the server refused the WebSocket handshake: HTTP 500: "
    assert empty.problem is None
    listed = errors.HandshakeRefused(400, [], b"[1, 2]")
    assert (listed.problem, str(listed)) == (None, "the server refused the WebSocket handshake: HTTP 400: [1, 2]")
    bad = errors.HandshakeRefused(400, [], b"\xff{")
    assert str(bad) == "the server refused the WebSocket handshake: HTTP 400: \ufffd{"
    numbered = errors.HandshakeRefused(403, [], b'{"code": 7, "detail": "no"}')
    assert (numbered.code, str(numbered)) == (None, "the server refused the WebSocket handshake: HTTP 403: no")


def test_web_socket_closed_names_the_code_and_reason():
    error = errors.WebSocketClosed(1013, "lagged after 5")
    assert str(error) == "WebSocket closed with code 1013: lagged after 5"
    assert (error.code, error.reason) == (1013, "lagged after 5")
    assert str(errors.WebSocketClosed(1006, "")) == "WebSocket closed with code 1006"


def test_a_request_error_keeps_detail_extra_and_starts_without_headers():
    error = errors.NotFound("no user 3", field="id")
    assert (str(error), error.detail, error.extra, error.headers) == ("no user 3", "no user 3", {"field": "id"}, [])


def test_each_error_with_headers_sets_them():
    allowed = errors.MethodNotAllowed("no", ["GET", "HEAD"])
    assert (allowed.detail, allowed.allow, allowed.headers) == ("no", ["GET", "HEAD"], [("Allow", "GET, HEAD")])
    replica = errors.ReadOnlyReplica("writes go to the primary", "http://p:3000")
    assert replica.detail == "writes go to the primary"
    assert replica.headers == [("Allow", "GET, HEAD, OPTIONS"), ("Dbsvc-Primary", "http://p:3000")]
    failed = errors.PreconditionFailed("changed", 12)
    assert (failed.detail, failed.headers) == ("changed", [("ETag", '"12"')])
    assert errors.PreconditionFailed("gone", 0).headers == []
    upgrade = errors.UpgradeRequired("needs a websocket")
    assert upgrade.detail == "needs a websocket"
    assert upgrade.headers == [("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]
    later = errors.WriterUnavailable("writer restarting", 2)
    assert (later.detail, later.headers) == ("writer restarting", [("Retry-After", "2")])


def test_a_constraint_violation_names_the_first_and_counts_the_others():
    one = errors.ConstraintViolation([{"field": "title", "message": "too long"}])
    assert (one.detail, one.errors, one.extra) == (
        "title: too long",
        [{"field": "title", "message": "too long"}],
        {"errors": [{"field": "title", "message": "too long"}]},
    )
    two = [{"field": "a", "message": "x"}, {"field": "b", "message": "y"}]
    assert errors.ConstraintViolation(two).detail == "a: x (and 1 more error)"
    assert errors.ConstraintViolation([*two, {"field": "c", "message": "z"}]).detail == "a: x (and 2 more errors)"
    none = errors.ConstraintViolation([])
    assert (none.detail, none.errors, none.extra) == (": invalid record", [], {"errors": []})
