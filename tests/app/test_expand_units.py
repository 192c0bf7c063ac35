"""dbsvc/expand.py without a server: a real store of the blog schema, the `Expander`, and a
count of the store's reads (rule 5: one lookup per distinct referenced record per answer)."""

from __future__ import annotations

from dbsvc.expand import Expander
from dbsvc.runtime import Query, json_bytes
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, CountingStore, open_store, post, run, user

POST = BLOG.BY_NAME["BlogPost"]


def filled(tmp_path):
    store = open_store(create_tenant(str(tmp_path), "t"), sync="off")
    for i in (1, 2, 3):
        run(store.insert("User", user(i)))
    for i in range(1, 21):
        run(store.insert("BlogPost", post(i, author=1 + i % 3)))
    return store


def test_a_page_of_twenty_posts_by_three_authors_reads_each_author_once(tmp_path):
    store = filled(tmp_path)
    try:
        counting = CountingStore(store)
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        records, _total, _wm = store.list_records("BlogPost", Query(limit=20))
        query = Query(expand=(("author_id", "card"),))
        out = expander.records(counting, POST, query, records, [json_bytes(r) for r in records], {})
        assert sorted(counting.gets) == [("User", 1, None), ("User", 2, None), ("User", 3, None)]
        assert out[0] == json_bytes(records[0])[:-1] + b',"_expand":{"author_id":{"id":2,"name":"user 2"}}}'
        assert len(out) == 20
    finally:
        store.close()


def test_a_past_moment_is_asked_of_the_store_once_per_watermark(tmp_path):
    store = filled(tmp_path)
    try:
        asked: list[tuple[str, int]] = []

        class Moments(CountingStore):
            def watermarks_at(self, model: str, n: int) -> dict[str, int]:
                asked.append((model, n))
                return self.store.watermarks_at(model, n)

        counting = Moments(store)
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        record, _wm = store.get("BlogPost", 1, as_of=5)
        query = Query(as_of=5, expand=(("author_id", None),))
        for _ in range(3):
            expander.records(counting, POST, query, [record], [json_bytes(record)], {})
        assert asked == [("BlogPost", 5)]
        assert counting.gets == [("User", 2, 3)] * 3  # users 1..3 were written before post 1
        # the present watermark is not a past moment: nothing asked, read live
        now = Query(as_of=20, expand=(("author_id", None),))
        expander.records(counting, POST, now, [record], [json_bytes(record)], {})
        assert asked == [("BlogPost", 5)] and counting.gets[-1] == ("User", 2, None)
    finally:
        store.close()


# -- rule 7: a list's expanded page kept by its record objects and the embedded ticks ----


def counted_encoder(records: list, made: list[int]):
    """The page's encode step, noting in `made` the size of each page it encodes."""

    def encode() -> list[bytes]:
        made.append(len(records))
        return [json_bytes(r) for r in records]

    return encode


def test_an_expanded_page_is_kept_while_its_records_and_the_embedded_model_are_unchanged(tmp_path):
    store = filled(tmp_path)
    try:
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        made: list[int] = []
        query = Query(limit=20, expand=(("author_id", None),))

        def page() -> bytes:
            records, _total, _wm = store.list_records("BlogPost", Query(limit=20))
            encode = counted_encoder(records, made)
            out = expander.page(store, POST, query, records, encode, {})
            assert out == b",".join(expander.records(store, POST, query, records, encode(), {}))
            return out

        first = page()
        assert page() is first and made == [20, 20, 20]  # the second page: only the check's encode
        run(store.replace("User", 2, user(2, name="renamed")))  # the embedded model's tick moves
        renamed = page()
        assert renamed != first and b'"name":"renamed"' in renamed and made[-2:] == [20, 20]
        run(store.replace("BlogPost", 4, post(4, author=3)))  # a listed record's new version
        moved = page()
        assert moved != renamed and made[-2:] == [20, 20]
        assert page() is moved
    finally:
        store.close()


def test_an_expanded_page_at_a_watermark_is_made_every_time(tmp_path):
    store = filled(tmp_path)
    try:
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        records, _total, _wm = store.list_records("BlogPost", Query(limit=20))
        query = Query(limit=20, as_of=23, expand=(("author_id", None),))
        made: list[int] = []
        encode = counted_encoder(records, made)
        pages = [expander.page(store, POST, query, records, encode, {}) for _ in range(3)]
        assert made == [20, 20, 20] and pages[0] == pages[2]
    finally:
        store.close()
