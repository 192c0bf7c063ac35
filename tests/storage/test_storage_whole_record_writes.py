"""A write whose record cannot be filled from its values' texts (a `json` value holding a
list or an object of two or more members: rows.py `pack_parts` gives no parts) is encoded
whole (dbsvc/storage/writes.py rule 5): its log payload is the promised bytes and
`written_json` hands back the record's own JSON. test_storage_shared_encoding.py's writes
all had parts; written for `insert_then`'s survivors in docs/mutation.md (session 13, wt-mpo3:
the two branches swapped, the whole record's text taken as `null`). A real store on disk."""

from __future__ import annotations

import asyncio

from dbsvc.compiler import compile_schema
from dbsvc.runtime import json_bytes
from dbsvc.schema import parse_schema
from dbsvc.storage import Store

BLOG = """\
model Post {
  id     int    @id
  title  str    @sort
  meta   json?
}
"""


def test_a_record_holding_a_list_and_an_object_is_logged_and_handed_back_whole(tmp_path):
    module = compile_schema(parse_schema(BLOG, "blog.dbs"))
    post = module.BY_NAME["Post"]

    async def body():
        store = Store.open(str(tmp_path), module.MODELS, module.DESCRIPTION, sync="off")
        try:
            record, _done = store.apply_insert("Post", post.validate_create({"title": "a", "meta": [1, 2]}))
            inserted = store.written_json(record)
            new = post.validate_replace({"title": "b", "meta": {"k": 1, "j": [3, 4]}}, 1)
            _previous, replaced, _done = store.apply_replace("Post", 1, new)
            assert (inserted, store.written_json(replaced)) == (json_bytes(record), json_bytes(replaced))
            return [frame[16:] for frame in store.frames_after(0)]
        finally:
            await store.aclose()

    assert asyncio.run(body()) == [
        b'{"kind":"insert","model":"Post","offset":1,"watermark":1,"id":1,"record":{"id":1,"title":"a","meta":[1,2]}}',
        b'{"kind":"update","model":"Post","offset":2,"watermark":2,"id":1,'
        b'"record":{"id":1,"title":"b","meta":{"k":1,"j":[3,4]}},'
        b'"previous":{"id":1,"title":"a","meta":[1,2]}}',
    ]
