"""What a user reads, byte for byte: record and projection bodies, list pages, problem bodies,
and the change-feed and live-query messages, each compared with a literal written here
(issue 33: "projections compared as dicts, so field order, which the interface promises,
is invisible").

The interface promises declaration order for records (REST, list pages, event payloads);
a projection's fields come in the order its `@projection` lists them (docs/guide/schema.md),
so the schema below lists them against declaration order, where a dict comparison, or a
projection built in declaration order, would still pass. A `json` value keeps its keys as
they were sent. Real server, real sockets; the bodies are read raw.
"""

from __future__ import annotations

import asyncio

import pytest

from support.server import start_server
from support.wskit import open_ws, post, request, run

SCHEMA = """\
model Author {
  id    int   @id
  name  str   @filter @sort
  born  date?
  @projection(rev, name, id)
}

model Book {
  id        int      @id
  author_id int      @ref(Author) @filter
  title     str      @sort
  price     float
  meta      json?
  @projection(head, title, id)
}
"""


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    path = tmp_path_factory.mktemp("shop") / "shop.dbs"
    path.write_text(SCHEMA)
    return path


@pytest.fixture(scope="module")
def rest(schema, tmp_path_factory):
    """One server for the REST tests (each uses its own ids)."""
    server = start_server(schema, tmp_path_factory.mktemp("rest") / "data")
    yield server
    server.stop()


@pytest.fixture
def shop(serve, schema):
    """A fresh server: the feed test's offsets start at 1."""
    return serve(schema=schema)


def test_records_projections_and_pages_are_written_in_the_promised_order(rest):
    shop = rest
    assert shop.post("/api/author", {"born": "1900-01-02", "name": "Ann", "id": 1}).body == b'{"id":1}'
    book = {"meta": {"z": 1, "a": [2]}, "price": 3, "title": "T", "author_id": 1, "id": 1}  # any order in
    assert shop.post("/api/book", book).body == b'{"id":1}'

    read = shop.get("/api/author/1")
    assert read.body == b'{"id":1,"name":"Ann","born":"1900-01-02"}'
    assert shop.get("/api/author/1?projection=rev").body == b'{"name":"Ann","id":1}'
    assert shop.get("/api/book/1").body == b'{"id":1,"author_id":1,"title":"T","price":3.0,"meta":{"z":1,"a":[2]}}'
    assert shop.get("/api/book?projection=head&author_id=1").body == (
        b'{"data":[{"title":"T","id":1}],"total":1,"limit":100,"offset":0}'
    )
    assert shop.get("/api/book?author_id=1").body == (
        b'{"data":[{"id":1,"author_id":1,"title":"T","price":3.0,"meta":{"z":1,"a":[2]}}],'
        b'"total":1,"limit":100,"offset":0}'
    )
    as_of = read.headers["dbsvc-watermark"]
    assert shop.get(f"/api/author?projection=rev&name=Ann&as_of={as_of}").body == (
        b'{"data":[{"name":"Ann","id":1}],"total":1,"limit":100,"offset":0}'
    )
    put = shop.request("PUT", "/api/book/1", body={"title": "U", "price": 4.5, "author_id": 1})
    assert put.body == b'{"id":1,"author_id":1,"title":"U","price":4.5,"meta":null}'
    patch = shop.request("PATCH", "/api/book/1", body={"meta": {"b": 1, "a": 2}})
    assert patch.body == b'{"id":1,"author_id":1,"title":"U","price":4.5,"meta":{"b":1,"a":2}}'


def problem(reply) -> bytes:
    """The body with its request id (checked against the header) taken out."""
    rid = reply.headers["x-request-id"]
    assert reply.body.count(f'"request_id": "{rid}"'.encode()) == 1
    return reply.body.replace(rid.encode(), b"RID")


def test_problem_bodies_keep_their_key_order_and_codes(rest):
    shop = rest
    assert shop.post("/api/author", {"id": 50, "name": "Bo"}).status == 201
    assert shop.post("/api/book", {"id": 50, "title": "T", "price": 1, "author_id": 50}).status == 201
    assert problem(shop.get("/api/book/9")) == (
        b'{"type": "about:blank", "title": "Not Found", "status": 404, "code": "not_found", '
        b'"detail": "Book 9 does not exist", "request_id": "RID"}'
    )
    assert problem(shop.post("/api/book", {"title": "x"})) == (
        b'{"type": "about:blank", "title": "Unprocessable Content", "status": 422, '
        b'"code": "constraint_violation", '
        b"\"detail\": \"author_id: missing required field 'author_id' (an integer) (and 1 more error)\", "
        b'"request_id": "RID", "errors": ['
        b"{\"field\": \"author_id\", \"message\": \"missing required field 'author_id' (an integer)\"}, "
        b"{\"field\": \"price\", \"message\": \"missing required field 'price' (a number)\"}]}"
    )
    assert problem(shop.request("DELETE", "/api/author/50")) == (
        b'{"type": "about:blank", "title": "Conflict", "status": 409, "code": "referenced", '
        b'"detail": "author 50 is referenced by 1 record(s) of Book", "request_id": "RID", "count": 1}'
    )
    assert problem(shop.post("/api/book", {"title": "y", "price": 1, "author_id": 7})).startswith(
        b'{"type": "about:blank", "title": "Conflict", "status": 409, "code": "foreign_key_violation", '
    )
    assert problem(shop.get("/api/book?nope=1")) == (
        b'{"type": "about:blank", "title": "Bad Request", "status": 400, "code": "bad_query", '
        b"\"detail\": \"unknown query parameter 'nope'; allowed: filters on author_id; "
        b"sort, limit, offset, cursor, projection, as_of, expand; operators __gt, __gte, __lt, __lte on title; "
        b'__prefix on title", "request_id": "RID"}'
    )


async def texts(ws, n: int) -> list[str]:
    return [await asyncio.wait_for(ws.recv(), 10) for _ in range(n)]


def test_feed_and_live_query_messages_are_written_in_the_promised_order(shop):
    async def body():
        async with (
            open_ws(shop, "/subscribe/author") as authors,
            open_ws(shop, "/subscribe/author?projection=rev") as authors_rev,
            open_ws(shop, "/subscribe/book") as books,
            open_ws(shop, "/subscribe/book?projection=head") as books_head,
            open_ws(shop, "/live-query/book?projection=head") as live,
        ):
            init = await asyncio.wait_for(live.recv(), 10)
            assert (await post(shop, "/api/author", {"born": "1900-01-02", "name": "Ann"})).status == 201  # 1
            book = {"meta": {"z": 1, "a": [2]}, "price": 3, "title": "T", "author_id": 1}
            assert (await post(shop, "/api/book", book)).status == 201  # 2
            assert (await request(shop, "PATCH", "/api/book/1", {"title": "U"})).status == 200  # 3
            assert (await request(shop, "DELETE", "/api/book/1")).status == 204  # 4

            link = '{"kind":"link","model":"Author","id":1,"child_model":"Book","child_id":1,"field":"author_id",'
            assert await texts(authors, 3) == [
                '{"kind":"insert","model":"Author","offset":1,"watermark":1,"id":1,'
                '"record":{"id":1,"name":"Ann","born":"1900-01-02"}}',
                link + '"linked":true,"offset":2}',
                link + '"linked":false,"offset":4}',
            ]
            assert await texts(authors_rev, 3) == [
                '{"kind":"insert","model":"Author","offset":1,"watermark":1,"id":1,"record":{"name":"Ann","id":1}}',
                link + '"linked":true,"offset":2}',
                link + '"linked":false,"offset":4}',
            ]
            full = '"record":{"id":1,"author_id":1,"title":"T","price":3.0,"meta":{"z":1,"a":[2]}}'
            renamed = '{"id":1,"author_id":1,"title":"U","price":3.0,"meta":{"z":1,"a":[2]}}'
            assert await texts(books, 3) == [
                '{"kind":"insert","model":"Book","offset":2,"watermark":1,"id":1,' + full + "}",
                '{"kind":"update","model":"Book","offset":3,"watermark":2,"id":1,"record":'
                + renamed
                + ',"previous":'
                + full.removeprefix('"record":')
                + "}",
                '{"kind":"delete","model":"Book","offset":4,"watermark":3,"id":1,"record":' + renamed + "}",
            ]
            assert await texts(books_head, 3) == [
                '{"kind":"insert","model":"Book","offset":2,"watermark":1,"id":1,"record":{"title":"T","id":1}}',
                '{"kind":"update","model":"Book","offset":3,"watermark":2,"id":1,'
                '"record":{"title":"U","id":1},"previous":{"title":"T","id":1}}',
                '{"kind":"delete","model":"Book","offset":4,"watermark":3,"id":1,"record":{"title":"U","id":1}}',
            ]
            assert [init, *await texts(live, 3)] == [
                '{"type":"Init","model":"Book","records":[],"watermark":0,"offset":0,"complete":true}',
                '{"type":"Added","model":"Book","offset":2,"watermark":1,"record":{"title":"T","id":1}}',
                '{"type":"Updated","model":"Book","offset":3,"watermark":2,"record":{"title":"U","id":1}}',
                '{"type":"Removed","model":"Book","offset":4,"watermark":3,"id":1}',
            ]

    run(body())
