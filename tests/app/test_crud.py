"""Every CRUD route and query rule of docs/guide/rest.md and docs/guide/queries.md,
black-box over real sockets against `dbsvc serve schemas/blog.dbs`."""

from __future__ import annotations

import itertools
from urllib.parse import quote

import pytest

from dbsvc import __version__
from support.server import ROOT

_seq = itertools.count(1)


def unique(prefix: str = "u") -> str:
    return f"{prefix}{next(_seq)}-{id(_seq)}"


def make_user(server, **fields) -> int:
    body = {"email": f"{unique()}@example.com", "name": "Ann"}
    body.update(fields)
    reply = server.post("/api/user", body)
    assert reply.status == 201, reply
    return reply.json["id"]


def make_post(server, author: int, **fields) -> int:
    body = {"author_id": author, "title": "Hello", "body": "text", "score": 1.5}
    body.update(fields)
    reply = server.post("/api/blog-post", body)
    assert reply.status == 201, reply
    return reply.json["id"]


def test_create_answers_201_with_id_and_location(blog):
    reply = blog.post("/api/user", {"email": f"{unique()}@x.io", "name": "Bo"})
    assert reply.status == 201
    new_id = reply.json["id"]
    assert reply.json == {"id": new_id}
    assert reply.headers["location"] == f"/api/user/{new_id}"


def test_read_returns_fields_in_declaration_order_with_defaults(blog):
    uid = make_user(blog, age=30)
    reply = blog.get(f"/api/user/{uid}")
    assert reply.status == 200
    record = reply.json
    assert list(record) == ["id", "email", "name", "age", "role", "joined", "profile"]
    assert record["role"] == "reader"
    assert record["joined"].endswith("Z")
    assert record["profile"] is None
    assert reply.headers["content-type"].startswith("application/json")


def test_int_ids_are_assigned_one_more_than_the_largest_used(blog):
    first = make_user(blog)
    explicit = first + 50
    reply = blog.post("/api/user", {"id": explicit, "email": f"{unique()}@x.io", "name": "Cy"})
    assert reply.status == 201 and reply.json["id"] == explicit
    assert make_user(blog) == explicit + 1


def test_explicit_id_already_taken_is_unique_violation(blog):
    uid = make_user(blog)
    reply = blog.post("/api/user", {"id": uid, "email": f"{unique()}@x.io", "name": "Di"})
    assert reply.status == 409
    assert reply.json["code"] == "unique_violation"


def test_duplicate_unique_field_is_409_naming_field_and_value(blog):
    email = f"{unique()}@x.io"
    make_user(blog, email=email)
    reply = blog.post("/api/user", {"email": email, "name": "Ed"})
    assert reply.status == 409
    assert reply.json["code"] == "unique_violation"
    assert "email" in reply.json["detail"] and email in reply.json["detail"]


def test_missing_parent_is_foreign_key_violation(blog):
    reply = blog.post("/api/blog-post", {"author_id": 10**9, "title": "t", "body": "b", "score": 1})
    assert reply.status == 409
    assert reply.json["code"] == "foreign_key_violation"


def test_every_violation_is_listed_in_one_422(blog):
    reply = blog.post("/api/user", {"email": 5, "name": "", "age": 200, "role": "boss", "extra": 1})
    assert reply.status == 422
    problem = reply.json
    assert problem["code"] == "constraint_violation"
    fields = sorted(e["field"] for e in problem["errors"])
    assert fields == ["age", "email", "extra", "name", "role"]
    assert reply.headers["content-type"] == "application/problem+json"


def test_put_replaces_whole_record(blog):
    uid = make_user(blog, age=40, profile={"a": 1})
    email = f"{unique()}@x.io"
    reply = blog.request("PUT", f"/api/user/{uid}", body={"email": email, "name": "Fay"})
    assert reply.status == 200
    record = reply.json
    assert record["id"] == uid and record["email"] == email
    assert record["age"] is None and record["profile"] is None
    assert record["role"] == "reader"
    assert blog.get(f"/api/user/{uid}").json == record


def test_put_with_body_id_differing_from_path_is_422(blog):
    uid = make_user(blog)
    reply = blog.request("PUT", f"/api/user/{uid}", body={"id": uid + 1, "email": f"{unique()}@x.io", "name": "G"})
    assert reply.status == 422


def test_put_unknown_id_is_404(blog):
    reply = blog.request("PUT", "/api/user/987654321", body={"email": f"{unique()}@x.io", "name": "H"})
    assert reply.status == 404
    assert reply.json["code"] == "not_found"


def test_patch_merges_given_fields(blog):
    uid = make_user(blog, age=20, name="Ivy")
    reply = blog.request("PATCH", f"/api/user/{uid}", body={"age": 21})
    assert reply.status == 200
    assert reply.json["age"] == 21 and reply.json["name"] == "Ivy"


def test_delete_answers_204_then_404(blog):
    uid = make_user(blog)
    reply = blog.request("DELETE", f"/api/user/{uid}")
    assert reply.status == 204 and reply.body == b""
    assert blog.get(f"/api/user/{uid}").status == 404
    assert blog.request("DELETE", f"/api/user/{uid}").status == 404


def test_delete_of_referenced_parent_is_409_referenced(blog):
    uid = make_user(blog)
    make_post(blog, uid)
    reply = blog.request("DELETE", f"/api/user/{uid}")
    assert reply.status == 409
    assert reply.json["code"] == "referenced"
    assert blog.get(f"/api/user/{uid}").status == 200


def test_list_filters_sorts_and_pages(blog):
    author = make_user(blog)
    ids = [make_post(blog, author, title=f"t{i}", score=float(i % 3)) for i in range(7)]
    reply = blog.get(f"/api/blog-post?author_id={author}&sort=-score&limit=3&offset=1")
    assert reply.status == 200
    page = reply.json
    assert page["total"] == 7 and page["limit"] == 3 and page["offset"] == 1
    # score desc, ties on id ascending: scores 2,2,1,1,1,0,0 -> ids by score then id
    expected = sorted(ids, key=lambda i: (-float(ids.index(i) % 3), i))
    assert [r["id"] for r in page["data"]] == expected[1:4]


def test_list_without_sort_is_in_primary_key_order(blog):
    author = make_user(blog)
    ids = [make_post(blog, author) for _ in range(4)]
    page = blog.get(f"/api/blog-post?author_id={author}").json
    assert [r["id"] for r in page["data"]] == sorted(ids)


def test_list_sort_on_several_keys(blog):
    author = make_user(blog)
    a = make_post(blog, author, title="b", score=1.0)
    b = make_post(blog, author, title="a", score=1.0)
    c = make_post(blog, author, title="c", score=0.5)
    page = blog.get(f"/api/blog-post?author_id={author}&sort=-score,title").json
    assert [r["id"] for r in page["data"]] == [b, a, c]


def test_repeated_filter_matches_any_value(blog):
    a = make_user(blog, role="admin")
    e = make_user(blog, role="editor")
    r = make_user(blog, role="reader")
    page = blog.get("/api/user?role=admin&role=editor&limit=1000").json
    got = {rec["id"] for rec in page["data"]}
    assert a in got and e in got and r not in got


def test_float_filter_is_typed(blog):
    author = make_user(blog)
    pid = make_post(blog, author, score=3.0)
    page = blog.get(f"/api/blog-post?author_id={author}&score=3").json
    assert [r["id"] for r in page["data"]] == [pid]


def test_limit_defaults_to_100_and_clamps_to_1000(blog):
    assert blog.get("/api/user").json["limit"] == 100
    assert blog.get("/api/user?limit=5000").json["limit"] == 1000


def test_projection_on_list_and_read(blog):
    uid = make_user(blog, name="Jo")
    assert blog.get(f"/api/user/{uid}?projection=card").json == {"id": uid, "name": "Jo"}
    page = blog.get("/api/user?projection=card&limit=1000").json
    assert all(list(r) == ["id", "name"] for r in page["data"])


@pytest.mark.parametrize(
    "query",
    [
        "projection=nope",
        "as_of=abc",
        "as_of=-1",
        "nope=1",
        "age=3",  # not @filter
        "sort=email",  # not @sort
        "sort=-nope",
        "role=boss",  # outside the enum
        "limit=-1",
        "limit=ten",
        "offset=-5",
        "offset=1.5",
    ],
)
def test_bad_query_is_400_bad_query(blog, query):
    reply = blog.get(f"/api/user?{query}")
    assert reply.status == 400, reply
    assert reply.json["code"] == "bad_query"


def test_as_of_ahead_of_watermark_is_400(blog):
    watermark = int(blog.get("/api/user").headers["dbsvc-watermark"])
    reply = blog.get(f"/api/user?as_of={watermark + 1000}")
    assert reply.status == 400 and reply.json["code"] == "bad_query"


def test_as_of_reads_the_past(blog):
    uid = make_user(blog, name="Old")
    before = int(blog.get("/api/user").headers["dbsvc-watermark"])
    blog.request("PATCH", f"/api/user/{uid}", body={"name": "New"})
    past = blog.get(f"/api/user/{uid}?as_of={before}")
    assert past.status == 200 and past.json["name"] == "Old"
    assert past.headers["dbsvc-watermark"] == str(before)
    assert "dbsvc-offset" not in past.headers
    page = blog.get(f"/api/user?as_of={before}&name=Old&limit=1000").json
    assert uid in [r["id"] for r in page["data"]]
    assert blog.get(f"/api/user/{uid}").json["name"] == "New"


def test_reads_carry_watermark_and_offset(blog):
    make_user(blog)
    reply = blog.get("/api/user")
    assert int(reply.headers["dbsvc-watermark"]) >= 1
    assert int(reply.headers["dbsvc-offset"]) >= 1


def test_non_integer_path_id_is_400_bad_request(blog):
    reply = blog.get("/api/user/abc")
    assert reply.status == 400 and reply.json["code"] == "bad_request"


@pytest.mark.parametrize("body", [b"[1,2]", b"not json", b"42", b'"s"', b"{\"a\": NaN}", b""])
def test_body_that_is_not_a_json_object_is_400(blog, body):
    reply = blog.request("POST", "/api/user", body=body, headers={"Content-Type": "application/json"})
    assert reply.status == 400, reply
    assert reply.json["code"] == "bad_request"


def test_non_json_content_type_is_415(blog):
    reply = blog.request(
        "POST", "/api/user", body=b"email=a", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert reply.status == 415
    assert reply.json["code"] == "unsupported_media_type"


def test_unknown_route_and_record_are_404(blog):
    assert blog.get("/api/nope").json["code"] == "not_found"
    assert blog.get("/nope").status == 404
    assert blog.get("/api/user/99999999").status == 404


def test_wrong_method_is_405_with_allow(blog):
    reply = blog.request("DELETE", "/api/user")
    assert reply.status == 405
    assert reply.json["code"] == "method_not_allowed"
    assert "POST" in reply.headers["allow"]
    reply = blog.request("POST", "/health", body={})
    assert reply.status == 405


def test_operational_routes(blog):
    make_user(blog)
    health = blog.get("/health").json
    assert list(health) == ["status", "version", "schema"] and health["status"] == "ok"
    assert health["version"] == __version__ and len(health["schema"]) == 16  # the schema's fingerprint
    assert blog.get("/ready").json == {"status": "ready"}
    metrics = blog.get("/metrics").json
    assert metrics["model_count"] == 3
    assert set(metrics["rows_per_model"]) == {"User", "BlogPost", "Comment"}
    assert metrics["total_rows"] == sum(metrics["rows_per_model"].values())
    snap = blog.get("/snapshot").json
    assert set(snap["watermarks"]) == {"User", "BlogPost", "Comment"}
    assert isinstance(snap["epoch"], str) and snap["replication"] is True


def test_error_bodies_share_one_shape_with_the_request_id(blog):
    reply = blog.get("/api/user/abc", headers={"X-Request-Id": "trace-123"})
    problem = reply.json
    assert set(problem) >= {"type", "title", "status", "code", "detail", "request_id"}
    assert problem["type"] == "about:blank"
    assert problem["status"] == reply.status
    assert problem["request_id"] == "trace-123" == reply.headers["x-request-id"]


def test_openapi_document_is_served_without_a_token(blog):
    reply = blog.get("/openapi.json")
    assert reply.status == 200
    document = reply.json
    assert document["openapi"].startswith("3.1")
    assert "/api/blog-post/{id}" in document["paths"]


@pytest.mark.parametrize("code", ["a/b", "w 1%", "caf\u00e9\U0001f4e6", "x\r\ny"])
def test_string_id_location_is_percent_encoded_and_reachable(serve, code):
    # A str @id is one path segment: Location percent-encodes it (a raw non-ASCII id used to
    # make a 500 after the record was stored), and an encoded '/' routes as data.
    server = serve(ROOT / "schemas" / "inventory.dbs")
    reply = server.post("/api/warehouse", {"code": code, "city": "Oslo", "opened": "2020-01-02"})
    assert reply.status == 201, reply
    location = reply.headers["location"]
    assert location == "/api/warehouse/" + quote(code, safe="")
    assert server.get(location).json["code"] == code
    replaced = server.request("PUT", location, {"city": "Bergen", "opened": "2020-01-02"})
    assert replaced.status == 200 and replaced.json["code"] == code
    assert server.request("DELETE", location).status == 204
    assert server.get(location).status == 404


def test_auto_int_id_never_leaves_the_int64_range(serve):
    server = serve()  # its own server: the shared one must keep small ids
    top = 2**63 - 1
    reply = server.post("/api/user", {"id": top, "email": f"{unique()}@x.io", "name": "Max"})
    assert reply.status == 201, reply
    reply = server.post("/api/user", {"email": f"{unique()}@x.io", "name": "Next"})
    assert reply.status == 422, reply
    assert reply.json["errors"][0]["field"] == "id"
    assert server.post("/api/user", {"id": 5, "email": f"{unique()}@x.io", "name": "Low"}).status == 201


def test_writes_name_the_offset_of_their_row(serve):
    server = serve()
    created = server.post("/api/user", {"email": "off@x.io", "name": "O"})
    assert created.headers["dbsvc-offset"] == "1"
    assert server.request("PATCH", "/api/user/1", {"name": "P"}).headers["dbsvc-offset"] == "2"
    assert server.request("PUT", "/api/user/1", {"email": "off@x.io", "name": "Q"}).headers["dbsvc-offset"] == "3"
    assert server.request("DELETE", "/api/user/1").headers["dbsvc-offset"] == "4"
    assert server.get("/snapshot").json["offset"] == 4


def _status_line(server, request: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return head.split(b"\r\n", 1)[0]


def test_status_lines_use_rfc_9110_reason_phrases_on_every_python(blog):
    """413 and 422 say "Content Too Large" and "Unprocessable Content", as their problem
    titles do, whichever Python serves (3.11 and 3.12's http.HTTPStatus say "Request Entity
    Too Large" and "Unprocessable Entity"; 3.13's say what RFC 9110 says)."""
    body = b'{"email": 5}'
    invalid = (
        b"POST /api/user HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    assert _status_line(blog, invalid) == b"HTTP/1.1 422 Unprocessable Content"
    too_big = (
        b"POST /api/user HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 999999999\r\n\r\n"
    )
    assert _status_line(blog, too_big) == b"HTTP/1.1 413 Content Too Large"
