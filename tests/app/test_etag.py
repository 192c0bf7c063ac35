"""ETags and conditional requests through a real server (issue 35 item 2; docs/guide/rest.md,
"ETags and conditional writes"): the ETag of every single-record read and of every write
that answers a record, If-Match on PUT / PATCH / DELETE (412 `precondition_failed`, nothing
changed), If-None-Match on GET (304), malformed headers (400), a lost update refused, and
the exact bytes of a 412 body and a 304 response. Real sockets; the exact-bytes tests read
the raw response."""

from __future__ import annotations

import http.client
import itertools
import json
import re
import socket
import threading

import pytest

from support.server import ROOT, Reply, Server, start_server

_seq = itertools.count(1)


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path_factory.mktemp("etag") / "data")
    yield server
    server.stop()


def make_user(server: Server, **fields) -> tuple[int, str]:
    """A new user: its id and the ETag its 201 carried."""
    body = {"email": f"etag{next(_seq)}-{id(_seq)}@example.com", "name": "Ann", **fields}
    reply = server.post("/api/user", body)
    assert reply.status == 201, reply
    # the version is the offset of the row that wrote the record: the 201's Dbsvc-Offset
    assert reply.headers["etag"] == '"%s"' % reply.headers["dbsvc-offset"]
    return reply.json["id"], reply.headers["etag"]


def snapshot_of(server: Server) -> tuple:
    """What a refused write must leave as it was: the watermarks and the head offset."""
    snap = server.get("/snapshot").json
    return snap["watermarks"], snap["offset"]


def test_every_record_answer_carries_the_offset_of_its_last_write_as_a_strong_etag(blog):
    uid, created = make_user(blog)
    first = blog.get(f"/api/user/{uid}")
    assert first.headers["etag"] == created
    assert re.fullmatch(r'"[1-9][0-9]*"', created)
    put = blog.request("PUT", f"/api/user/{uid}", body={"email": f"put{uid}@example.com", "name": "Bo"})
    assert put.status == 200 and put.headers["etag"] == '"%s"' % put.headers["dbsvc-offset"]
    assert put.headers["etag"] != created
    assert blog.get(f"/api/user/{uid}").headers["etag"] == put.headers["etag"]
    patch = blog.request("PATCH", f"/api/user/{uid}", body={"name": "Cy"})
    assert patch.status == 200 and patch.headers["etag"] == '"%s"' % patch.headers["dbsvc-offset"]
    assert blog.get(f"/api/user/{uid}").headers["etag"] == patch.headers["etag"]
    # another record's write leaves this record's version alone
    make_user(blog)
    assert blog.get(f"/api/user/{uid}").headers["etag"] == patch.headers["etag"]
    assert "etag" not in blog.request("DELETE", f"/api/user/{uid}").headers


def test_a_projection_has_the_records_etag_and_an_as_of_read_the_version_it_shows(blog):
    uid, created = make_user(blog)
    assert blog.get(f"/api/user/{uid}?projection=card").headers["etag"] == created
    then = blog.get(f"/api/user/{uid}").headers["dbsvc-watermark"]
    changed = blog.request("PATCH", f"/api/user/{uid}", body={"name": "Later"})
    past = blog.get(f"/api/user/{uid}?as_of={then}")
    assert (past.json["name"], past.headers["etag"]) == ("Ann", created)
    now = blog.get(f"/api/user/{uid}?as_of={blog.get('/snapshot').json['watermarks']['User']}")
    assert (now.json["name"], now.headers["etag"]) == ("Later", changed.headers["etag"])
    assert blog.get(f"/api/user/{uid}?as_of={then}", headers={"If-None-Match": created}).status == 304


@pytest.mark.parametrize(
    "value, status",
    [
        ("{tag}", 304),
        ("W/{tag}", 304),  # If-None-Match compares weakly (RFC 9110 §13.1.2)
        ('"1", {tag}', 304),
        ("*", 304),
        ('"999999999"', 200),
        ('W/"999999999", "x"', 200),
    ],
)
def test_if_none_match_on_a_get_is_304_when_a_tag_matches(blog, value, status):
    uid, tag = make_user(blog)
    for method in ("GET", "HEAD"):
        reply = blog.request(method, f"/api/user/{uid}", headers={"If-None-Match": value.format(tag=tag)})
        assert reply.status == status, (method, reply)
        assert reply.headers["etag"] == tag
        if status == 304:
            assert reply.body == b"" and "content-length" not in reply.headers
            assert "dbsvc-watermark" in reply.headers and "dbsvc-offset" in reply.headers


def test_an_expanded_read_is_answered_whole_whatever_if_none_match_says(blog):
    # its body holds the author as well, whose version the post's tag does not follow: a 304
    # would keep a client's stale author (docs/decisions.md, "ETags are log offsets")
    uid, _ = make_user(blog)
    reply = blog.post("/api/blog-post", {"title": "t", "body": "b", "author_id": uid, "score": 1.5})
    assert reply.status == 201, reply
    pid, tag = reply.json["id"], reply.headers["etag"]
    assert blog.get(f"/api/blog-post/{pid}", headers={"If-None-Match": tag}).status == 304
    assert blog.request("PATCH", f"/api/user/{uid}", {"name": "Bea"}).status == 200
    reply = blog.get(f"/api/blog-post/{pid}?expand=author_id", headers={"If-None-Match": tag})
    assert reply.status == 200 and reply.headers["etag"] == tag  # the post's version, for If-Match
    assert reply.json["_expand"]["author_id"]["name"] == "Bea"


def test_if_none_match_on_a_missing_record_is_still_404(blog):
    assert blog.get("/api/user/987654321", headers={"If-None-Match": "*"}).status == 404


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_a_write_with_a_current_if_match_goes_through(blog, method):
    uid, tag = make_user(blog)
    body = None if method == "DELETE" else {"email": f"m{uid}@example.com", "name": "Dee"}
    for value in ("{tag}", '"1", {tag}', "*"):
        reply = blog.request(method, f"/api/user/{uid}", body=body, headers={"If-Match": value.format(tag=tag)})
        assert reply.status in (200, 204), reply
        if method == "DELETE":
            break
        assert reply.headers["etag"] != tag
        tag = reply.headers["etag"]


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize(
    "header, value",
    [
        ("If-Match", '"1"'),  # an old version
        ("If-Match", "W/{tag}"),  # a weak tag never matches under strong comparison (RFC 9110 §8.8.3.2)
        ("If-Match", '"1", "2"'),
        ("If-None-Match", "{tag}"),
        ("If-None-Match", "*"),
    ],
)
def test_a_write_whose_precondition_fails_is_412_and_changes_nothing(blog, method, header, value):
    uid, tag = make_user(blog)
    before = snapshot_of(blog), blog.get(f"/api/user/{uid}").body
    body = None if method == "DELETE" else {"email": f"x{uid}@example.com", "name": "Eve"}
    reply = blog.request(method, f"/api/user/{uid}", body=body, headers={header: value.format(tag=tag)})
    assert reply.status == 412, reply
    assert reply.json["code"] == "precondition_failed"
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.headers["etag"] == tag  # the current version rides along
    assert (snapshot_of(blog), blog.get(f"/api/user/{uid}").body) == before


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_if_match_on_a_missing_record_is_412_not_404(blog, method):
    body = None if method == "DELETE" else {"email": "nobody@example.com", "name": "No"}
    before = snapshot_of(blog)
    for value in ("*", '"5"'):
        reply = blog.request(method, "/api/user/987654321", body=body, headers={"If-Match": value})
        assert (reply.status, reply.json["code"]) == (412, "precondition_failed"), reply
        assert "does not exist" in reply.json["detail"] and "etag" not in reply.headers
    assert blog.request(method, "/api/user/987654321", body=body).status == 404  # without: 404 as before
    assert snapshot_of(blog) == before


@pytest.mark.parametrize("value", ["12", '"12', 'W/12', '"1" "2"', '*, "1"', '"a"b', 'w/"1"', '"tab\there"'])
@pytest.mark.parametrize("header", ["If-Match", "If-None-Match"])
def test_a_malformed_precondition_is_400_naming_the_header_and_the_value(blog, header, value):
    uid, _tag = make_user(blog)
    before = snapshot_of(blog)
    for method, body in (("GET", None), ("PATCH", {"name": "Fay"}), ("DELETE", None)):
        reply = blog.request(method, f"/api/user/{uid}", body=body, headers={header: value})
        assert (reply.status, reply.json["code"]) == (400, "bad_request"), (method, reply)
        assert reply.json["detail"] == (
            f"{header} header {value!r} is malformed: expected '*' or a comma-separated list of "
            'entity tags such as "12" or W/"12" (RFC 9110 §8.8.3)'
        )
    assert snapshot_of(blog) == before


def test_a_lost_update_is_refused_one_editor_wins_the_other_gets_412(blog):
    """Two editors read the same version and both write with If-Match, at once (two
    connections, released together): exactly one write lands, the other is 412 and its
    change is nowhere; 20 rounds."""
    for round_ in range(20):
        uid, tag = make_user(blog, age=1)
        editors = [http.client.HTTPConnection("127.0.0.1", blog.port, timeout=30) for _ in range(2)]
        for editor in editors:
            editor.connect()
        gate = threading.Barrier(2, timeout=10)
        replies: dict[int, Reply] = {}

        def edit(i: int) -> None:
            body = json.dumps({"email": f"e{i}-{uid}@example.com", "name": f"editor{i}", "age": 10 + i})
            headers = {"If-Match": tag, "Content-Type": "application/json"}
            gate.wait()
            editors[i].request("PUT", f"/api/user/{uid}", body=body, headers=headers)
            answer = editors[i].getresponse()
            replies[i] = Reply(answer.status, answer.getheaders(), answer.read())

        threads = [threading.Thread(target=edit, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        for editor in editors:
            editor.close()
        assert sorted(r.status for r in replies.values()) == [200, 412], (round_, replies)
        winner = next(i for i, r in replies.items() if r.status == 200)
        loser = replies[1 - winner]
        assert loser.json["code"] == "precondition_failed"
        record = blog.get(f"/api/user/{uid}")
        assert (record.json["name"], record.json["age"]) == (f"editor{winner}", 10 + winner)
        assert record.headers["etag"] == replies[winner].headers["etag"] == loser.headers["etag"]


def _raw(port: int, request: bytes) -> bytes:
    """One request on a fresh socket; the response read to its end (the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def _normal(response: bytes) -> bytes:
    """The response with its varying header values (date, request id) replaced."""
    response = re.sub(rb"(?m)^date: [^\r]*", b"date: DATE", response)
    return re.sub(rb"(?m)^x-request-id: [^\r]*", b"x-request-id: ID", response)


def test_the_exact_bytes_of_a_304_and_of_a_412(blog):
    uid, tag = make_user(blog)
    version = tag.strip('"').encode()
    watermark = blog.get(f"/api/user/{uid}").headers["dbsvc-watermark"].encode()
    head = str(blog.get("/snapshot").json["offset"]).encode()
    got = _raw(
        blog.port,
        b"GET /api/user/%d HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-None-Match: %s\r\nConnection: close\r\n\r\n"
        % (uid, tag.encode()),
    )
    assert _normal(got) == (
        b"HTTP/1.1 304 Not Modified\r\nDbsvc-Watermark: %s\r\nDbsvc-Offset: %s\r\nETag: \"%s\"\r\n"
        b"date: DATE\r\nserver: dbsvc\r\nx-request-id: ID\r\nConnection: close\r\n\r\n" % (watermark, head, version)
    )
    got = _raw(
        blog.port,
        b'DELETE /api/user/%d HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-Match: "0"\r\nConnection: close\r\n\r\n' % uid,
    )
    request_id = re.search(rb'"request_id": "([^"]+)"', got).group(1)  # type: ignore[union-attr]
    body = (
        b'{"type": "about:blank", "title": "Precondition Failed", "status": 412, "code": "precondition_failed", '
        b'"detail": "If-Match \\"0\\" does not match: User %d is at version \\"%s\\"; read it again and retry '
        b'with its ETag", "request_id": "%s"}' % (uid, version, request_id)
    )
    assert (
        _normal(got)
        == (
            b"HTTP/1.1 412 Precondition Failed\r\ncontent-type: application/problem+json\r\nETag: \"%s\"\r\n"
            b"content-length: %d\r\ndate: DATE\r\nserver: dbsvc\r\nx-request-id: ID\r\nConnection: close\r\n\r\n"
            % (version, len(body))
        )
        + body
    )


def test_etags_stay_the_same_across_a_restart_and_dbsvc_compact(serve, tmp_path):
    """A version names a record version for good: a cached ETag stays valid (304, If-Match
    goes through) after the server stops, `dbsvc compact` runs and it starts again, until
    the record changes."""
    import os
    import subprocess
    import sys

    data = tmp_path / "data"
    server = serve(data_dir=data)
    tags = {}
    for _ in range(5):
        uid, tag = make_user(server)
        tags[uid] = tag
    changed = server.request("PATCH", f"/api/user/{min(tags)}", body={"name": "Changed"})
    tags[min(tags)] = changed.headers["etag"]
    gone = max(tags)
    assert server.request("DELETE", f"/api/user/{gone}").status == 204
    del tags[gone]

    def check(server: Server) -> None:
        for uid, tag in tags.items():
            assert server.get(f"/api/user/{uid}").headers["etag"] == tag
            assert server.get(f"/api/user/{uid}", headers={"If-None-Match": tag}).status == 304

    assert server.stop() == 0  # a plain restart replays the log: tests/storage/test_storage_versions.py
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(SERVICE_DATA=str(data), SERVICE_TENANT="default")
    done = subprocess.run([sys.executable, str(ROOT / "dbsvc.py"), "compact"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    server = serve(data_dir=data)
    check(server)
    uid = next(iter(tags))
    put = server.request(
        "PUT", f"/api/user/{uid}", body={"email": f"k{uid}@example.com", "name": "K"}, headers={"If-Match": tags[uid]}
    )
    assert put.status == 200 and put.headers["etag"] != tags[uid]
