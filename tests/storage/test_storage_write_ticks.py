"""Every write moves its model's change tick to a number it never had (storage/table.py
`Table.tick`, `Store.tick`): the read caches keep an answer for as long as the ticks it was
made at are the models' (readcache.py, expand.py), so two writes that left the same tick
would let a list kept after the first be served after the second. Written for table.py
`insert` 6 (`tick = None`), which the present-page tests let survive (docs/mutation.md,
session 13, wt-mpo3). A real store on disk."""

from __future__ import annotations

import asyncio

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import Store

SCHEMA = """\
model Post {
  id     int    @id
  title  str    @sort
}

model Tag {
  id     int    @id
  name   str
}
"""


def test_each_write_moves_its_models_tick_to_a_new_number_and_leaves_the_others(tmp_path):
    module = compile_schema(parse_schema(SCHEMA, "ticks.dbs"))
    post = module.BY_NAME["Post"]

    async def body(path):
        store = Store.open(path, module.MODELS, module.DESCRIPTION, sync="off")
        try:
            seen, tag = [store.tick("Post")], store.tick("Tag")
            for write in (
                lambda: store.apply_insert("Post", post.validate_create({"title": "a"})),
                lambda: store.apply_insert("Post", post.validate_create({"title": "b"})),
                lambda: store.apply_replace("Post", 1, post.validate_replace({"title": "c"}, 1)),
                lambda: store.apply_delete("Post", 2),
            ):
                *_, done = write()
                await done
                seen.append(store.tick("Post"))
            return seen, tag, store.tick("Tag")
        finally:
            await store.aclose()

    seen, tag_before, tag_after = asyncio.run(body(str(tmp_path)))
    assert len(set(seen)) == len(seen) and None not in seen, seen
    assert tag_after == tag_before
