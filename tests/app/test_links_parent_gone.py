"""Links whose parent is gone, end to end: the delete of a record that references itself, as
a user meets it through REST and `/subscribe` (unit tests: tests/storage/test_storage_parent_gone.py,
tests/realtime/test_links_parent_gone.py). Real server, raw message text."""

from __future__ import annotations

import asyncio

from support.wskit import nothing_within, open_ws, post, request, run

SCHEMA = """\
model Node {
  id     int  @id
  name   str  @filter
  parent int? @ref(Node) @filter
}
"""


def test_a_record_referencing_itself_is_deleted_and_its_unlink_goes_to_unfiltered_feeds_only(serve, tmp_path):
    schema = tmp_path / "tree.dbs"
    schema.write_text(SCHEMA)
    server = serve(schema=schema)

    async def body():
        assert (await post(server, "/api/node", {"id": 1, "name": "root"})).status == 201  # offset 1
        assert (await request(server, "PATCH", "/api/node/1", {"parent": 1})).status == 200  # offset 2
        assert (await post(server, "/api/node", {"id": 2, "name": "leaf", "parent": 1})).status == 201  # 3
        refused = await request(server, "DELETE", "/api/node/1")
        assert (refused.status, refused.json["code"], refused.json["detail"]) == (
            409,
            "referenced",
            "node 1 is referenced by 1 record(s) of Node",  # the leaf, not the root itself
        )
        assert (await request(server, "DELETE", "/api/node/2")).status == 204  # offset 4
        async with (
            open_ws(server, "/subscribe/node?after=4") as everything,
            open_ws(server, "/subscribe/node?name=root&after=4") as roots,
        ):
            assert (await request(server, "DELETE", "/api/node/1")).status == 204  # offset 5
            got = [await asyncio.wait_for(everything.recv(), 10) for _ in range(2)]
            assert got == [
                '{"kind":"delete","model":"Node","offset":5,"watermark":5,"id":1,'
                '"record":{"id":1,"name":"root","parent":1}}',
                '{"kind":"link","model":"Node","id":1,"child_model":"Node","child_id":1,"field":"parent",'
                '"linked":false,"offset":5}',
            ]
            assert await asyncio.wait_for(roots.recv(), 10) == got[0]
            assert await nothing_within(roots, 0.3)  # the parent is gone: it matches no filter
        assert (await request(server, "GET", "/api/node/1")).status == 404

    run(body())


def test_a_record_created_referencing_itself_is_taken_shown_linked_and_deleted(serve, tmp_path):
    """An insert naming its own id in its @ref (given, or the automatic one) is a record that
    exists once the write is in, as in PostgreSQL: 201, not 409 foreign_key_violation."""
    schema = tmp_path / "tree.dbs"
    schema.write_text(SCHEMA)
    server = serve(schema=schema)

    async def body():
        async with open_ws(server, "/subscribe/node") as feed:
            made = await post(server, "/api/node", {"id": 1, "name": "root", "parent": 1})  # offset 1
            assert (made.status, made.json) == (201, {"id": 1})
            got = [await asyncio.wait_for(feed.recv(), 10) for _ in range(2)]
            assert got == [
                '{"kind":"insert","model":"Node","offset":1,"watermark":1,"id":1,'
                '"record":{"id":1,"name":"root","parent":1}}',
                '{"kind":"link","model":"Node","id":1,"child_model":"Node","child_id":1,"field":"parent",'
                '"linked":true,"offset":1}',
            ]
        auto = await post(server, "/api/node", {"name": "auto", "parent": 2})  # the automatic id is 2
        assert (auto.status, auto.json) == (201, {"id": 2})
        missing = await post(server, "/api/node", {"id": 3, "name": "x", "parent": 4})
        assert (missing.status, missing.json["code"], missing.json["detail"]) == (
            409,
            "foreign_key_violation",
            "parent 4 does not match any node",
        )
        listed = await request(server, "GET", "/api/node?parent=1")
        assert [r["id"] for r in listed.json["data"]] == [1]
        assert (await request(server, "DELETE", "/api/node/1")).status == 204
        assert (await request(server, "GET", "/api/node/1")).status == 404
        assert (await request(server, "GET", "/api/node/2")).json == {"id": 2, "name": "auto", "parent": 2}

    run(body())
