"""Issue 14 through a real server: bodies the decoder must refuse (lone surrogates, numbers
out of range, NaN/Infinity, excess nesting) get 400/422 naming what is wrong, never a 500
or a dropped connection, and leave the data as it was; str values are stored in NFC;
`.` and `..` are not ids; filter values are capped. Unit-level cases of the same rules:
tests/compiler/test_decode_hardening.py."""

from __future__ import annotations

import itertools
import json
from urllib.parse import quote

import pytest

from support.server import ROOT, start_server

MAX_DEPTH = 64
MAX_FILTER_VALUES = 1000
JSON = {"Content-Type": "application/json"}
NFD_CAFE = "cafe\u0301"
NFC_CAFE = "caf\u00e9"

_seq = itertools.count(1)


def unique(prefix: str = "h") -> str:
    return f"{prefix}{next(_seq)}"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    server = start_server(ROOT / "schemas" / "inventory.dbs", tmp_path_factory.mktemp("inventory") / "data")
    yield server
    server.stop()


def send(server, method: str, path: str, text: str):
    """Send `text` as the raw JSON body (json.dumps would escape or refuse what we test)."""
    return server.request(method, path, body=text.encode("utf-8"), headers=JSON)


def problem(reply) -> dict:
    """The problem body, checked to be UTF-8 JSON of the one shape."""
    assert reply.headers["content-type"].startswith("application/problem+json"), reply
    body = json.loads(reply.body.decode("utf-8"))
    assert body["status"] == reply.status
    return body


def make_user(server) -> tuple[int, dict]:
    reply = server.post("/api/user", {"email": f"{unique()}@x.io", "name": "Ann", "profile": {"k": [1, 2]}})
    assert reply.status == 201, reply
    uid = reply.json["id"]
    return uid, server.get(f"/api/user/{uid}").json


def user_total(server) -> int:
    return server.get("/api/user?limit=0").json["total"]


def nested(depth: int) -> str:
    """A `profile` value that makes the body nest `depth` levels (the body is level 1)."""
    return "[" * (depth - 1) + "]" * (depth - 1)


SURROGATE = "expected Unicode text (a lone surrogate has no UTF-8 form, RFC 8259 §8.2)"
TOO_DEEP = (
    f"request body nests arrays and objects deeper than {MAX_DEPTH} levels: "
    f"at most {MAX_DEPTH} are allowed, the body itself counted"
)

# (what the fields part of the body is, status, code, field named or a piece of the detail)
HOSTILE = [
    pytest.param('"name":"x","age":"\\ud800"', 422, "constraint_violation", "age", id="surrogate-in-int-field"),
    pytest.param('"name":"\\ud800"', 422, "constraint_violation", "name", id="surrogate-in-str-field"),
    pytest.param(
        '"name":"x","profile":{"k":["ok","a\\udc00b"]}',
        422,
        "constraint_violation",
        "profile",
        id="surrogate-in-json-field",
    ),
    pytest.param(
        '"name":"x","profile":{"\\udbff":1}', 422, "constraint_violation", "profile", id="surrogate-in-json-key"
    ),
    pytest.param('"name":"x","\\ud800":1', 400, "bad_request", 'in the key "\\ud800"', id="surrogate-key"),
    pytest.param(
        '"name":"x","profile":[1e400]', 400, "bad_request", "the number 1e400 is out of range", id="1e400-in-json"
    ),
    pytest.param(
        '"name":"x","profile":{"a":-1e400}',
        400,
        "bad_request",
        "the number -1e400 is out of range",
        id="minus-1e400-in-json",
    ),
    pytest.param('"name":"x","name":"y"', 400, "bad_request", 'names the member "name" twice', id="name-twice"),
    pytest.param(
        '"name":"x","profile":{"a":1,"\\u0061":2}',
        400,
        "bad_request",
        'names the member "a" twice',
        id="json-key-twice",
    ),
    pytest.param('"name":"x","profile":NaN', 400, "bad_request", "NaN is not valid JSON", id="nan"),
    pytest.param('"name":"x","profile":[Infinity]', 400, "bad_request", "Infinity is not valid JSON", id="infinity"),
    pytest.param(
        '"name":"x","profile":-Infinity', 400, "bad_request", "-Infinity is not valid JSON", id="minus-infinity"
    ),
    pytest.param(
        '"name":"x","age":1e400', 400, "bad_request", "the number 1e400 is out of range", id="1e400-in-int-field"
    ),
    pytest.param(f'"name":"x","profile":{nested(MAX_DEPTH + 1)}', 400, "bad_request", TOO_DEEP, id="depth-65"),
    pytest.param(f'"name":"x","profile":{nested(971)}', 400, "bad_request", TOO_DEEP, id="depth-971"),
    pytest.param(f'"name":"x","profile":{nested(972)}', 400, "bad_request", TOO_DEEP, id="depth-972"),
    pytest.param(f'"name":"x","profile":{nested(973)}', 400, "bad_request", TOO_DEEP, id="depth-973"),
    pytest.param(f'"name":"x","profile":{nested(50_000)}', 400, "bad_request", TOO_DEEP, id="depth-50000"),
]


def check_refusal(reply, status: int, code: str, named: str) -> None:
    assert reply.status == status, reply
    body = problem(reply)
    assert body["code"] == code
    if status == 422:
        assert [e["field"] for e in body["errors"]] == [named]
        assert body["errors"][0]["message"].endswith(SURROGATE)
    else:
        assert named in body["detail"], body


@pytest.mark.parametrize("fields,status,code,named", HOSTILE)
def test_hostile_create_is_refused_and_stores_nothing(blog, fields, status, code, named):
    before = user_total(blog)
    email = f"{unique()}@x.io"
    reply = send(blog, "POST", "/api/user", f'{{"email":"{email}",{fields}}}')
    check_refusal(reply, status, code, named)
    assert user_total(blog) == before
    assert blog.get(f"/api/user?email={quote(email)}").json["total"] == 0
    # The same connection and server keep answering.
    assert blog.get("/health").status == 200


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize("fields,status,code,named", HOSTILE)
def test_hostile_update_is_refused_and_the_record_is_unchanged(blog, method, fields, status, code, named):
    uid, before = make_user(blog)
    reply = send(blog, method, f"/api/user/{uid}", f'{{"email":"{before["email"]}",{fields}}}')
    check_refusal(reply, status, code, named)
    assert blog.get(f"/api/user/{uid}").json == before


def test_nesting_at_the_limit_is_stored_and_read_back(blog):
    profile = json.loads(nested(MAX_DEPTH))
    reply = send(blog, "POST", "/api/user", f'{{"email":"{unique()}@x.io","name":"x","profile":{nested(MAX_DEPTH)}}}')
    assert reply.status == 201, reply
    assert blog.get(f"/api/user/{reply.json['id']}").json["profile"] == profile


def test_escaped_surrogate_pairs_and_extreme_finite_numbers_are_stored(blog):
    reply = send(
        blog,
        "POST",
        "/api/user",
        f'{{"email":"{unique()}@x.io","name":"smile \\ud83d\\ude00",'
        '"profile":[1.7976931348623157e308,1e-400,"\\\\ud800"]}',
    )
    assert reply.status == 201, reply
    record = blog.get(f"/api/user/{reply.json['id']}").json
    assert record["name"] == "smile \U0001f600"
    assert record["profile"] == [1.7976931348623157e308, 0.0, "\\ud800"]


def test_lone_surrogate_in_a_str_id_is_refused(inventory):
    before = inventory.get("/api/warehouse?limit=0").json["total"]
    reply = send(inventory, "POST", "/api/warehouse", '{"code":"w\\ud800","city":"x","opened":"2024-01-01"}')
    assert reply.status == 422, reply
    assert [e["field"] for e in problem(reply)["errors"]] == ["code"]
    assert inventory.get("/api/warehouse?limit=0").json["total"] == before


def test_non_finite_number_in_a_float_field_is_refused(blog):
    uid, _ = make_user(blog)
    before = blog.get("/api/blog-post?limit=0").json["total"]
    reply = send(blog, "POST", "/api/blog-post", f'{{"author_id":{uid},"title":"t","body":"b","score":1e999}}')
    assert reply.status == 400 and "the number 1e999 is out of range" in problem(reply)["detail"]
    assert blog.get("/api/blog-post?limit=0").json["total"] == before


# --- NFC ---------------------------------------------------------------------------------


def test_nfc_and_nfd_spellings_of_one_email_are_one_value(blog):
    local = unique("nfc")
    first = blog.post("/api/user", {"email": f"{local}{NFC_CAFE}@x.io", "name": "A"})
    assert first.status == 201, first
    second = blog.post("/api/user", {"email": f"{local}{NFD_CAFE}@x.io", "name": "B"})
    assert second.status == 409, second
    assert problem(second)["code"] == "unique_violation"
    found = blog.get(f"/api/user?email={quote(f'{local}{NFD_CAFE}@x.io')}").json
    assert [r["id"] for r in found["data"]] == [first.json["id"]]


def test_str_values_come_back_in_nfc(blog):
    reply = blog.post("/api/user", {"email": f"{unique()}@x.io", "name": f"Ren{NFD_CAFE}e"})
    assert reply.status == 201
    uid = reply.json["id"]
    assert blog.get(f"/api/user/{uid}").json["name"] == f"Ren{NFC_CAFE}e"
    patched = blog.request("PATCH", f"/api/user/{uid}", body={"name": NFD_CAFE})
    assert patched.status == 200 and patched.json["name"] == NFC_CAFE
    # json fields are documents: stored exactly as sent.
    patched = blog.request("PATCH", f"/api/user/{uid}", body={"profile": {NFD_CAFE: NFD_CAFE}})
    assert patched.json["profile"] == {NFD_CAFE: NFD_CAFE}


def test_a_str_id_is_found_by_either_spelling(inventory):
    prefix = unique("w")
    nfd, nfc = prefix + NFD_CAFE, prefix + NFC_CAFE
    created = inventory.post("/api/warehouse", {"code": nfd, "city": "Lyon", "opened": "2024-01-01"})
    assert created.status == 201, created
    assert created.json["id"] == nfc
    for spelling in (nfd, nfc):
        reply = inventory.get(f"/api/warehouse/{quote(spelling)}")
        assert reply.status == 200 and reply.json["code"] == nfc
    again = inventory.post("/api/warehouse", {"code": nfc, "city": "Nice", "opened": "2024-01-01"})
    assert again.status == 409, again
    replaced = inventory.request("PUT", f"/api/warehouse/{quote(nfd)}", body={"city": "Lille", "opened": "2024-01-01"})
    assert replaced.status == 200 and replaced.json["code"] == nfc
    listed = inventory.get("/api/warehouse?limit=1000").json["data"]
    assert [r["city"] for r in listed if r["code"] in (nfd, nfc)] == ["Lille"]


# --- . and .. ---------------------------------------------------------------------------


@pytest.mark.parametrize("code", [".", ".."])
def test_dot_segments_cannot_be_created_as_ids(inventory, code):
    before = inventory.get("/api/warehouse?limit=0").json["total"]
    reply = inventory.post("/api/warehouse", {"code": code, "city": "x", "opened": "2024-01-01"})
    assert reply.status == 422, reply
    assert problem(reply)["errors"] == [
        {
            "field": "code",
            "message": f"'code' must not be \"{code}\": '.' and '..' are path segments, not ids (RFC 3986 §3.3)",
        }
    ]
    assert inventory.get("/api/warehouse?limit=0").json["total"] == before


@pytest.mark.parametrize("segment,shown", [(".", "."), ("..", ".."), ("%2E", "."), ("%2e%2E", "..")])
@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
def test_dot_segments_in_the_path_are_400(inventory, segment, shown, method):
    before = inventory.get("/api/warehouse").json
    body = {"city": "x", "opened": "2024-01-01"} if method in ("PUT", "PATCH") else None
    reply = inventory.request(method, f"/api/warehouse/{segment}", body=body)
    assert reply.status == 400, reply
    assert problem(reply)["detail"] == f"invalid id {shown!r}: '.' and '..' are path segments, not ids (RFC 3986 §3.3)"
    assert inventory.get("/api/warehouse").json == before


# --- filter values ------------------------------------------------------------------------


def test_filter_values_up_to_the_cap_are_answered(blog):
    name = unique("nm")
    reply = blog.post("/api/user", {"email": f"{name}@x.io", "name": name})
    assert reply.status == 201, reply
    values = [name] + [str(i) for i in range(MAX_FILTER_VALUES - 1)]
    found = blog.get("/api/user?" + "&".join(f"name={v}" for v in values))
    assert found.status == 200, found
    assert [r["id"] for r in found.json["data"]] == [reply.json["id"]]


# Short values: the whole request head must stay under the protocol layer's 16 KiB (431 past it).
@pytest.mark.parametrize("count", [MAX_FILTER_VALUES + 1, 2000])
def test_more_filter_values_than_the_cap_is_400(blog, count):
    before = user_total(blog)
    reply = blog.get("/api/user?" + "&".join(f"name={i % 10}" for i in range(count)))
    assert reply.status == 400, reply
    body = problem(reply)
    assert body["code"] == "bad_query"
    assert body["detail"] == f"{count} filter values given: at most {MAX_FILTER_VALUES} are allowed in one query"
    assert user_total(blog) == before


def test_feed_query_filter_values_are_capped_before_the_upgrade(blog):
    reply = blog.get("/subscribe/user?" + "&".join(f"name={i}" for i in range(MAX_FILTER_VALUES + 1)))
    assert reply.status == 400, reply
    assert problem(reply)["code"] == "bad_query"
