"""A list walked page by page through its `Link` cursors gives every record once, in order, for
each kind of sort key a cursor carries: a datetime, a bool, a float, an int past 2**53 (where a
float would round it), a str, and a str id (compiler/operators.py `build_decode_cursor`'s key
kinds; docs/mutation.md, session 14, wt-mpo4: each of these read back as the wrong kind passed
every earlier test).

In process over a real store, through the application's list answer (what a client gets)."""

from __future__ import annotations

import json
from urllib.parse import unquote

import pytest

from dbsvc.app import Application
from dbsvc.compiler import compile_schema
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from support.storage import run

SCHEMA = """
model Reading {
  id    str      @id
  at    datetime @sort
  ok    bool     @sort
  level float    @sort
  count int      @sort
  label str      @sort
}
"""
MODULE = compile_schema(parse_schema(SCHEMA, "cursor_kinds.dbs"))
READINGS = [
    {
        "id": f"r{i}",
        "at": f"2026-11-{10 + i % 4:02d}T08:00:00Z",
        "ok": i % 2 == 0,
        "level": i * 0.5,
        "count": 2**53 + 3 - i % 4,
        "label": f"l{i % 3}",
    }
    for i in range(7)
]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    store = Store.open(str(tmp_path_factory.mktemp("kinds")), MODULE.MODELS, MODULE.DESCRIPTION, sync="off")

    async def fill() -> None:
        for reading in READINGS:
            await store.insert("Reading", reading)

    run(fill())
    yield Application(MODULE, store, Broker(store, MODULE.BY_NAME, 64))
    store.close()


def get(app: Application, target: str) -> tuple[list[str], str | None]:
    path, pairs = split_target(target)
    answer = app(Request("GET", target, path, pairs, []))
    assert answer.status == 200, answer.body
    link = dict(answer.headers).get("Link")
    following = unquote(link[1 : link.index(">")]) if link else None
    return [r["id"] for r in json.loads(answer.body)["data"]], following


@pytest.mark.parametrize(
    "sort", ["", "at", "-at", "ok", "-ok", "level", "-level", "count", "-count,level", "label", "-label,at"]
)
def test_a_list_walked_by_its_cursors_is_the_whole_list_in_order(app, sort):
    query = f"sort={sort}&" if sort else ""
    whole, _ = get(app, f"/api/reading?{query}limit=100")
    assert sorted(whole) == sorted(r["id"] for r in READINGS)
    walked: list[str] = []
    target: str | None = f"/api/reading?{query}limit=2"
    for _page in range(len(READINGS)):  # bounded: a page of two, seven records
        assert target is not None
        ids, target = get(app, target)
        walked += ids
        if target is None:
            break
    assert target is None
    assert walked == whole
