"""A batch's results name each record's id as JSON of its type (dbsvc/batchops.py rule 6):
an int id as its digits, a str id as a JSON string, escapes and all, for every op kind.
In process (`BatchRoute.answer` over a real store in a temporary directory), so mutation
testing sees the calls (docs/mutation.md); test_batch.py drives the route over the wire.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dbsvc.access import Access, Refusals
from dbsvc.batchops import BatchRoute
from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import Store

SCHEMA = """
model Tag {
  id    str  @id
  label str
}
model Counter {
  id    int  @id
  n     int
}
"""
MODULE = compile_schema(parse_schema(SCHEMA, "ids.dbs"))
ODD = 'a "quoted" \\ slash/é'  # a str id whose JSON needs escapes


def answered(tmp_path: Any, ops: list[dict]) -> tuple[bytes, dict]:
    """The 200 body of one batch, as bytes and parsed."""

    async def main() -> bytes:
        store = Store.open(str(tmp_path), MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:
            deferred = BatchRoute(dict(MODULE.ROUTES), Access(Refusals())).answer(store, {"ops": ops})
            await deferred.future
            assert deferred.response.status == 200
            return deferred.response.body
        finally:
            await store.aclose()

    body = asyncio.run(main())
    return body, json.loads(body)


def test_batch_results_give_str_ids_as_json_strings_for_every_op(tmp_path):
    body, parsed = answered(
        tmp_path,
        [
            {"op": "create", "model": "tag", "record": {"id": ODD, "label": "x"}},
            {"op": "update", "model": "tag", "id": ODD, "record": {"label": "y"}},
            {"op": "patch", "model": "tag", "id": ODD, "record": {"label": "z"}},
            {"op": "delete", "model": "tag", "id": ODD},
        ],
    )
    assert [r["id"] for r in parsed["results"]] == [ODD] * 4
    assert [r["status"] for r in parsed["results"]] == [201, 200, 200, 204]
    assert body.count(b'"id":"a \\"quoted\\" \\\\ slash/\xc3\xa9"') == 6  # four results, two records


def test_batch_results_give_int_ids_as_their_digits(tmp_path):
    body, parsed = answered(
        tmp_path,
        [
            {"op": "create", "model": "counter", "record": {"n": 1}},
            {"op": "create", "model": "counter", "record": {"id": 9007199254740993, "n": 2}},
            {"op": "patch", "model": "counter", "id": 9007199254740993, "record": {"n": 3}},
            {"op": "delete", "model": "counter", "id": 1},
        ],
    )
    assert [r["id"] for r in parsed["results"]] == [1, 9007199254740993, 9007199254740993, 1]
    assert body.startswith(b'{"results":[{"status":201,"id":1,"etag":"\\"1\\""},{"status":201,"id":9007199254740993,')
    assert b'{"status":204,"id":1}' in body
