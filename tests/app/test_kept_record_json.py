"""A page asked with texts keeps the JSON of the records the store keeps, at once (readcache.py
`EncodedRecords.encode_page` with `texts`; issue 36 item 2, wt-rand6): the store's record
cache and the app's encoded records then admit the same records, by the store's one
second-ask rule, and a page's last record not kept is joined from the text it came with
(storage/shown.py `SentRecord`). What a cache keeps never changes what it answers: pages at
many cursors between writes, with both caches full, answer what a fresh application and the
records themselves say.

The units are fixture-free; the pages run in process over a real store (files in
tmp_path), as test_list_present_pages.py does."""

from __future__ import annotations

import json
import random

import pytest

from dbsvc.app import Application
from dbsvc.cursors import encode_cursor
from dbsvc.errors import NotFound
from dbsvc.readcache import EncodedRecords
from dbsvc.realtime.broker import Broker
from dbsvc.runtime import json_bytes
from dbsvc.storage.shown import SentRecord
from support.app_calls import answer, fresh
from support.storage import BLOG, post, run

USER = BLOG.BY_NAME["User"]
POST = BLOG.BY_NAME["BlogPost"]


def person(i: int) -> dict:
    return {
        "id": i,
        "email": f"u{i}@x.io",
        "name": f"n{i}",
        "age": None,
        "role": "reader",
        "joined": "2026-01-01T00:00:00Z",
        "profile": None,
    }


def full_cache(capacity: int = 4) -> EncodedRecords:
    """An encoded-records cache of `capacity` entries, full: its own rule refuses a first miss."""
    cache = EncodedRecords([USER], capacity=capacity)
    for i in range(1000, 1000 + capacity):
        cache.encode(USER, person(i))
    return cache


# -- the units -------------------------------------------------------------------------------


def test_a_page_with_texts_keeps_the_json_of_its_dicts_without_asking_its_own_rule():
    cache = full_cache()
    page = [person(1), person(2), person(3)]
    assert cache.encode_page(USER, page, texts=True) == b",".join(map(json_bytes, page))
    assert cache.refused == 0  # the store kept these dicts: kept here too, at once
    kept = [cache.encode(USER, record) for record in page]
    assert all(cache.encode(USER, r) is k for r, k in zip(page, kept)) and cache.refused == 0


def test_a_page_without_texts_still_asks_its_own_rule():
    cache = full_cache()
    page = [person(1), person(2), person(3)]
    assert cache.encode_page(USER, page) == b",".join(map(json_bytes, page))
    assert cache.refused == 3  # dicts of any source: kept from their second miss


def test_a_sent_record_last_is_joined_from_its_text_and_kept_nowhere():
    cache = full_cache()
    last = SentRecord(person(3))
    last.text = json_bytes(person(3))
    page = [person(1), json_bytes(person(2)), last]
    first = cache.encode_page(USER, page, texts=True)
    assert first == b",".join(map(json_bytes, [person(1), person(2), person(3)]))
    assert cache.refused == 0
    assert cache.encode_page(USER, page, texts=True) is not first  # such a page is never kept
    cache.encode(USER, last)  # its JSON was not kept: a first miss, refused
    assert cache.refused == 1
    dicts_only = [person(4), last]  # no bytes, only the last not kept: not kept either
    assert cache.encode_page(USER, dicts_only, texts=True) == json_bytes(person(4)) + b"," + last.text
    assert cache.encode_page(USER, dicts_only, texts=True) is not cache.encode_page(USER, dicts_only, texts=True)


def test_a_page_of_dicts_with_texts_is_kept_from_its_second_join_as_without():
    cache = full_cache()
    page = [person(1), person(2)]
    once = cache.encode_page(USER, page, texts=True)  # their JSON kept at once; the page asked once
    second = cache.encode_page(USER, page, texts=True)
    assert second == once and second is not once
    assert cache.encode_page(USER, page, texts=True) is second


# -- pages at many cursors between writes, over a real store ----------------------------------


def body_text(i: int, rng: random.Random) -> str:
    """A body with commas, quotes and brackets, so that texts are cut by each of rows.py's ways."""
    return rng.choice(["plain", "a, b, c", 'say "x", then [y]', "{z}, done"]) + f" {i}"


def expected_page(records: dict[int, dict], by_score: bool, key: float, after: int) -> list[dict]:
    """The 5 records after the cursor (key, after), by brute force: id order, or score
    descending with ties by id ascending (docs/guide/queries.md: ties by id, ascending)."""
    if by_score:
        chosen = [r for r in records.values() if r["score"] < key or (r["score"] == key and r["id"] > after)]
        chosen.sort(key=lambda r: (-r["score"], r["id"]))
    else:
        chosen = sorted((r for r in records.values() if r["id"] > after), key=lambda r: r["id"])
    return chosen[:5]


def test_a_record_replaced_after_its_json_was_kept_is_answered_anew_beside_texts(tmp_path, stores):
    """Ids 1-5 read twice are kept by both caches; 3 is replaced; a page of 1-10 then holds
    texts (6-10 read once, refused) beside the kept dicts and 3's new dict, whose JSON the
    app holds for the old version: the body says the new one."""
    store = stores(str(tmp_path), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64), list_cache_bytes=0)
    table = store.table("BlogPost")
    app.encoded.capacity = table.dicts.capacity = 6
    first, wide = "/api/blog-post?limit=5", "/api/blog-post?limit=10"

    async def go() -> None:
        from support.storage import user

        await store.insert("User", user(1))
        for i in range(1, 21):
            await store.insert("BlogPost", post(i, body=f"b, {i}"))
        for i in range(11, 17):  # both caches full of other records (a whole GET keeps no dict)
            answer(app, f"/api/blog-post/{i}?expand=author_id")
            answer(app, f"/api/blog-post/{i}?expand=author_id")
        assert set(table.dicts.ids) == set(app.encoded.kept_ids(POST)) == set(range(11, 17))
        answer(app, first)
        answer(app, first)  # 1-5: their second read, kept by both
        await store.replace("BlogPost", 3, post(3, title="new, title", body="b, 3"))
        got = answer(app, wide)
        assert json.loads(got[1])["data"][2]["title"] == "new, title"
        assert got == answer(fresh(store), wide)

    run(go())


def test_pages_at_many_cursors_between_writes_answer_the_records_with_both_caches_full(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64), list_cache_bytes=0)
    table = store.table("BlogPost")
    app.encoded.capacity = table.dicts.capacity = 6  # both full after the first pages
    rng = random.Random(36)
    records: dict[int, dict] = {}

    async def go() -> None:
        from support.storage import user

        await store.insert("User", user(1))
        for i in range(1, 41):
            records[i] = post(i, title=f"t{i}", body=body_text(i, rng), score=float(rng.randint(0, 9)))
            await store.insert("BlogPost", records[i])
        pages = 0
        for _step in range(400):
            roll = rng.random()
            if roll < 0.2 and records:
                i = rng.choice(list(records))
                records[i] = post(i, title=f"t{i}-{_step}", body=body_text(_step, rng), score=float(rng.randint(0, 9)))
                await store.replace("BlogPost", i, records[i])
            elif roll < 0.27 and records:
                i = rng.choice(list(records))
                del records[i]
                await store.delete("BlogPost", i)
            elif roll < 0.32:
                i = max(records, default=0) + 1
                records[i] = post(i, title=f"t{i}", body=body_text(i, rng), score=float(rng.randint(0, 9)))
                await store.insert("BlogPost", records[i])
            else:
                by_score = rng.random() < 0.5
                key, after = float(rng.randint(0, 10)), rng.randint(0, 45)
                sort = (("score", True),) if by_score else ()
                cursor = encode_cursor("BlogPost", sort, [key] if by_score else [], after)
                target = f"/api/blog-post?{'sort=-score&' if by_score else ''}limit=5&cursor={cursor}"
                got = answer(app, target)
                expected = expected_page(records, by_score, key, after)
                assert got[0] == 200, got
                assert got[1].startswith(b'{"data":[' + b",".join(map(json_bytes, expected)) + b"]"), target
                assert json.loads(got[1])["data"] == expected
                assert got == answer(fresh(store), target)  # the same body, Link and headers
                pages += 1
        assert pages > 200

    run(go())
    # the store refused records (texts and a last record sent with its text happened), and
    # the app never asked its own rule on these pages: it kept what the store kept
    assert table.dicts.refused > 0 and app.encoded.refused == 0


def test_pages_whole_projected_and_as_of_at_random_cursors_between_writes_answer_the_records(tmp_path, stores):
    """The store keeps a record's JSON beside its dict and hands it to whole pages (shown.py,
    wt-rand8): a page under a projection or at a past watermark, asked between them at the
    same cursors, never gets it, and no whole page gets a version's JSON after the record
    changed or left. Both caches shrunk to 6, so they are full and refuse; each body is the
    records' by brute force (the state at that watermark for `as_of`) and a fresh
    application's."""
    store = stores(str(tmp_path), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64), list_cache_bytes=0)
    table = store.table("BlogPost")
    app.encoded.capacity = table.dicts.capacity = 6
    rng = random.Random(53)
    records: dict[int, dict] = {}
    states: list[tuple[int, dict[int, dict]]] = []  # (watermark, the records then)
    asked = {"whole": 0, "projection": 0, "as_of": 0}

    def scored(i: int, step: int) -> dict:
        return post(i, title=f"t{i}-{step}", body=body_text(step, rng), score=float(rng.randint(0, 9)))

    async def go() -> None:
        from support.storage import user

        await store.insert("User", user(1))
        for i in range(1, 31):
            records[i] = scored(i, 0)
            await store.insert("BlogPost", records[i])
        states.append((store.watermarks()["BlogPost"], dict(records)))
        for step in range(1, 360):
            roll = rng.random()
            if roll < 0.25 and records:
                i = rng.choice(list(records))
                records[i] = scored(i, step)
                await store.replace("BlogPost", i, records[i])
            elif roll < 0.32 and records:
                i = rng.choice(list(records))
                del records[i]
                await store.delete("BlogPost", i)
            elif roll < 0.37:
                i = max(records, default=0) + 1
                records[i] = scored(i, step)
                await store.insert("BlogPost", records[i])
            else:
                kind = rng.choice(list(asked))
                by_score = rng.random() < 0.5
                key, after = float(rng.randint(0, 10)), rng.randint(0, 35)
                sort = (("score", True),) if by_score else ()
                cursor = encode_cursor("BlogPost", sort, [key] if by_score else [], after)
                target = f"/api/blog-post?{'sort=-score&' if by_score else ''}limit=5&cursor={cursor}"
                state = records
                if kind == "projection":
                    target += "&projection=summary"
                elif kind == "as_of":
                    watermark, state = rng.choice(states)
                    target += f"&as_of={watermark}"
                expected = expected_page(state, by_score, key, after)
                if kind == "projection":
                    expected = [{"id": r["id"], "title": r["title"], "score": r["score"]} for r in expected]
                got = answer(app, target)
                assert got[0] == 200, got
                assert json.loads(got[1])["data"] == expected, target
                assert got[1].startswith(b'{"data":[' + b",".join(map(json_bytes, expected)) + b"]"), target
                assert got == answer(fresh(store), target)
                asked[kind] += 1
                continue
            states.append((store.watermarks()["BlogPost"], dict(records)))

    run(go())
    assert min(asked.values()) > 50 and table.dicts.refused > 0


def test_records_a_whole_page_kept_as_json_answer_projections_gets_and_writes_after_it(tmp_path, stores):
    """A whole page keeps the records it admits as their JSON alone, their dicts decoded
    when first asked for (shown.py `_decoded`, wt-rand9): a projection page of the same
    records right after it, a GET of one, and the pages after a replace and a delete all
    answer the records and what a fresh application answers, twice each (the second from
    what the first kept)."""
    store = stores(str(tmp_path), sync="off")
    app = Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64), list_cache_bytes=0)
    whole, summary = "/api/blog-post?limit=5", "/api/blog-post?limit=5&projection=summary"
    records: dict[int, dict] = {}

    def check(target: str) -> None:
        page = sorted(records.values(), key=lambda r: r["id"])[:5]
        if "projection" in target:
            page = [{"id": r["id"], "title": r["title"], "score": r["score"]} for r in page]
        for _ in range(2):
            got = answer(app, target)
            assert got[0] == 200 and json.loads(got[1])["data"] == page, target
            assert got == answer(fresh(store), target)

    async def go() -> None:
        from support.storage import user

        await store.insert("User", user(1))
        for i in range(1, 9):
            records[i] = post(i, body=f"b, {i}", score=float(i))
            await store.insert("BlogPost", records[i])
        check(whole)  # 1-4 kept as their JSON alone
        check(summary)  # their dicts asked for: decoded now
        got = answer(app, "/api/blog-post/2")
        assert got[0] == 200 and json.loads(got[1]) == records[2]
        check(whole)
        records[3] = post(3, title="new, title", body="b, 3", score=30.0)
        await store.replace("BlogPost", 3, records[3])
        del records[1]
        await store.delete("BlogPost", 1)
        check(whole)
        check(summary)
        with pytest.raises(NotFound):  # the app raises it; the server answers 404
            answer(app, "/api/blog-post/1")
        got = answer(app, "/api/blog-post/3")
        assert got[0] == 200 and json.loads(got[1]) == records[3]

    run(go())
