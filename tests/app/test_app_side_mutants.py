"""The app-side modules of issue 36 at their decisions (docs/mutation.md, session 8):
cursors.py `decode_cursor` (each refusal, word for word, and each key kind), expand.py's
entries kept per tick (rule 6), config.py `SERVICE_LIST_CACHE_BYTES`, and storage/tenants.py's
drop refused while a workers reader holds its lock.

No pytest fixture (the in-process mutation runner, bench/mutation_inprocess.py, calls these
functions itself): each test that needs files makes its own directory.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.config import load_config
from dbsvc.cursors import decode_cursor, encode_cursor
from dbsvc.errors import BadQuery, ConfigError, TenantError, TenantLocked
from dbsvc.expand import Expander
from dbsvc.operators import operator_problem, ranges
from dbsvc.runtime import Query, json_bytes
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.lock import WriterLock, probe_lock
from dbsvc.storage.tenants import create_tenant, drop_tenant
from support.storage import BLOG, CountingStore, open_store, post, user

POST = BLOG.BY_NAME["BlogPost"]

KINDS = {"score": "f", "title": "s", "n": "i", "pinned": "b"}


def cursor_of(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def refusal(text: str, model: str = "Post", sort=(("score", True),), id_kind: str = "i") -> str:
    with pytest.raises(BadQuery) as refused:
        decode_cursor(text, model, sort, KINDS, id_kind)
    return str(refused.value)


def shown(text: str) -> str:
    """A cursor as a refusal quotes it (docs/guide: at most 40 characters)."""
    return text if len(text) <= 40 else text[:39] + "…"


def malformed(text: str) -> str:
    return f"malformed cursor {shown(text)!r}: expected the cursor of a Link rel=\"next\" header of this list"


@pytest.mark.parametrize(
    "sort, keys, id_, kind, decoded",
    [
        ((("score", True),), [2.5], 7, "i", ((2.5,), 7)),
        ((("score", True),), [3], 7, "i", ((3.0,), 7)),  # an int score is a float key
        ((("score", False), ("title", False)), [None, "ab"], 1, "i", ((None, "ab"), 1)),
        ((("n", True),), [4], "x", "s", ((4,), "x")),
        ((("pinned", False),), [True], 2, "i", ((True,), 2)),
        ((), [], 9, "i", ((), 9)),
    ],
)
def test_a_cursor_of_ours_decodes_to_its_keys_and_id(sort, keys, id_, kind, decoded):
    result = decode_cursor(encode_cursor("Post", sort, keys, id_), "Post", sort, KINDS, kind)
    assert result == decoded and [type(k) for k in result[0]] == [type(k) for k in decoded[0]]


@pytest.mark.parametrize(
    "value",
    [
        ["c2", "Post", "-score", [2.5], 7],  # another version
        ["c1", "Post", "-score", [2.5]],  # four items
        ["c1", "Post", "-score", [2.5], 7, 8],  # six
        {"c1": 1},
        "c1",
        ["c1", "Post", "-score", 2.5, 7],  # keys not a list
        ["c1", "Post", "-score", [], 7],  # too few keys
        ["c1", "Post", "-score", [2.5, 1.0], 7],  # too many
        ["c1", "Post", "-score", ["2.5"], 7],  # a str for a float key
        ["c1", "Post", "-score", [True], 7],  # a bool is no number here
        ["c1", "Post", "-score", [2.5], None],  # an id is never null
        ["c1", "Post", "-score", [2.5], "7"],  # a str id where ids are ints
        ["c1", "Post", "-score", [2.5], 7.0],
        ["c1", "Post", "-score", [2.5], True],
    ],
)
def test_a_cursor_not_of_this_shape_is_malformed(value):
    text = cursor_of(value)
    assert refusal(text) == malformed(text)


@pytest.mark.parametrize(
    "sort, key, id_kind",
    [
        (("n", False), 2.0, "i"),
        (("n", False), True, "i"),
        (("n", False), "2", "i"),
        (("title", False), 2, "i"),
        (("pinned", False), 1, "i"),
        (("pinned", False), "true", "i"),
        (("n", False), 2, "s"),  # the id 7 is no str
        (("n", False), 2, "b"),
        (("n", False), 2, "x"),  # a kind of no index: nothing fits it
    ],
)
def test_a_key_or_id_of_the_wrong_kind_is_malformed(sort, key, id_kind):
    text = cursor_of(["c1", "Post", sort_text_of(sort), [key], 7])
    assert refusal(text, sort=(sort,), id_kind=id_kind) == malformed(text)


def sort_text_of(sort: tuple[str, bool]) -> str:
    return ("-" if sort[1] else "") + sort[0]


def test_a_float_key_must_be_finite_and_an_int_or_a_float():
    for raw in (b'["c1","Post","-score",[Infinity],7]', b'["c1","Post","-score",[NaN],7]'):
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        assert refusal(text) == malformed(text)
    big = cursor_of(["c1", "Post", "-score", [10**400], 7])  # an int too large for a float
    with pytest.raises(BadQuery):
        decode_cursor(big, "Post", (("score", True),), KINDS, "i")
    assert decode_cursor(cursor_of(["c1", "Post", "-score", [-0.0], 7]), "Post", (("score", True),), KINDS, "i") == (
        (-0.0,),
        7,
    )


def test_json_constants_anywhere_in_a_cursor_make_it_malformed():
    for raw in (b'["c1",NaN,"-score",[2.5],7]', b'["c1","Post","-score",[2.5],-Infinity]', b'[NaN,1,2,3,4]'):
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        assert refusal(text) == malformed(text)


@pytest.mark.parametrize(
    "text",
    [
        "!!!!",  # not base64
        "a",  # one character: no whole byte
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        base64.urlsafe_b64encode(b"[1,").decode(),  # not JSON
        "",
    ],
)
def test_text_that_is_no_json_under_base64url_is_malformed(text):
    assert refusal(text) == malformed(text)


def test_a_cursor_of_4096_characters_is_read_and_one_more_is_refused_unread():
    def padded(spaces: int) -> str:
        return cursor_of(["c1", "Post", "title", ["t" * 3000 + " " * spaces], 7])

    spaces = next(n for n in range(200) if len(padded(n)) >= 4096)
    fits, over = padded(spaces), padded(spaces + 1)
    assert len(fits) == 4096 and len(over) > 4096
    assert decode_cursor(fits, "Post", (("title", False),), KINDS, "i") == (("t" * 3000 + " " * spaces,), 7)
    assert refusal(over, sort=(("title", False),)) == malformed(over)


def test_a_cursor_of_another_list_is_refused_naming_the_list_it_came_from():
    text = encode_cursor("User", (("score", True),), [1.0], 1234)
    assert len(text) > 40 and refusal(text) == f"cursor {text[:39] + '…'!r} was made for a list of 'User', not 'Post'"
    short = encode_cursor("U", (), [], 7)
    assert len(short) <= 40 and len(encode_cursor("User", (), [], 7)) <= 40
    assert refusal(short, sort=()) == f"cursor {short!r} was made for a list of 'U', not 'Post'"
    sorted_ = encode_cursor("Post", (("score", False),), [1.0], 123456)
    assert len(sorted_) > 40 and refusal(sorted_) == (
        f"cursor {sorted_[:39] + '…'!r} was made for sort='score', and this request sorts by '-score': "
        "a cursor continues the list it came from, with the same sort"
    )


def test_a_refusal_quotes_40_characters_whole_and_41_cut_to_39_and_an_ellipsis():
    forty = cursor_of(["c1", "Post", "-score", [2.5], "abcdefgh"])[:40]
    assert len(forty) == 40 and refusal(forty) == (
        f"malformed cursor {forty!r}: expected the cursor of a Link rel=\"next\" header of this list"
    )
    longer = forty + "A"
    assert refusal(longer) == (
        f"malformed cursor {longer[:39] + '…'!r}: expected the cursor of a Link rel=\"next\" header of this list"
    )


# --- expand.py rule 6: entries kept per tick ------------------------------------------------


def with_posts(go: Callable[[Store], Awaitable[None]]) -> None:
    """Run `go(store)` over a store of users 1-3 and posts 1-6 by authors 1, 2, 3, 1, 2, 3."""
    directory = tempfile.mkdtemp(prefix="app-side-")
    store = open_store(create_tenant(directory, "t"), sync="off")

    async def filled() -> None:
        for i in (1, 2, 3):
            await store.insert("User", user(i))
        for i in range(1, 7):
            await store.insert("BlogPost", post(i, author=1 + (i - 1) % 3))
        await go(store)

    try:
        asyncio.run(asyncio.wait_for(filled(), 30))
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def page(store: Store) -> tuple[list, list[bytes]]:
    records, _total, _wm = store.list_records("BlogPost", Query(limit=20))
    return records, [json_bytes(r) for r in records]


def author(i: int, name: str | None = None) -> bytes:
    return (
        b'"author_id":{"id":%d,"email":"u%d@example.com","name":"%s","age":null,"role":"reader",'
        % (i, i, (name or f"user {i}").encode())
        + b'"joined":"2026-01-01T00:00:00Z","profile":null}'
    )


def test_expand_entries_are_kept_while_the_referenced_models_tick_stands():
    async def go(store: Store) -> None:
        counting = CountingStore(store)
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        records, encoded = page(store)
        query = Query(expand=(("author_id", None),))
        first = expander.records(counting, POST, query, records, encoded, {})
        assert counting.gets == [("User", 1, None), ("User", 2, None), ("User", 3, None)]
        assert first[0] == encoded[0][:-1] + b',"_expand":{' + author(1) + b"}}"
        counting.gets.clear()
        assert expander.records(counting, POST, query, records, encoded, {}) == first
        assert counting.gets == []  # every entry kept
        await store.insert("BlogPost", post(7, author=1))  # another model's tick
        assert expander.records(counting, POST, query, records, encoded, {}) == first and counting.gets == []
        await store.replace("User", 2, user(2, name="renamed"))
        again = expander.records(counting, POST, query, records, encoded, {})
        assert counting.gets == [("User", 1, None), ("User", 2, None), ("User", 3, None)]
        assert again[1] == encoded[1][:-1] + b',"_expand":{' + author(2, "renamed") + b"}}"
        counting.gets.clear()
        card = Query(expand=(("author_id", "card"),))  # another projection: entries of its own
        carded = expander.records(counting, POST, card, records, encoded, {})
        assert len(counting.gets) == 3
        assert carded[0] == encoded[0][:-1] + b',"_expand":{"author_id":{"id":1,"name":"user 1"}}}'

    with_posts(go)


def test_expand_entries_start_over_at_the_kept_capacity():
    async def go(store: Store) -> None:
        records, encoded = page(store)
        query = Query(expand=(("author_id", None),))
        for capacity, second_reads in ((4, 0), (3, 3), (2, 3)):
            counting = CountingStore(store)
            expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
            expander.kept_capacity = capacity
            expander.records(counting, POST, query, records, encoded, {})
            assert len(counting.gets) == 3
            counting.gets.clear()
            expander.records(counting, POST, query, records, encoded, {})
            assert len(counting.gets) == second_reads, capacity
        assert Expander(BLOG.MODELS, lambda model, record: json_bytes(record)).kept_capacity == 4096

    with_posts(go)


def test_a_past_moment_keeps_nothing_across_answers_and_reads_each_parent_once_per_answer():
    async def go(store: Store) -> None:
        counting = CountingStore(store)
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        records, encoded = page(store)
        query = Query(as_of=5, expand=(("author_id", None),))
        for _ in range(2):
            counting.gets.clear()
            expander.records(counting, POST, query, records, encoded, {})
            assert sorted(counting.gets) == [("User", 1, 3), ("User", 2, 3), ("User", 3, 3)]

    with_posts(go)


def test_a_null_reference_has_no_entry_and_an_empty_object_takes_no_comma():
    async def go(store: Store) -> None:
        expander = Expander(BLOG.MODELS, lambda model, record: json_bytes(record))
        query = Query(expand=(("author_id", "card"),))
        orphan = {"id": 9, "author_id": None}
        gone = {"id": 10, "author_id": 77}
        out = expander.records(store, POST, query, [orphan, gone, orphan], [b'{"id":9}', b"{}", b"{}"], {})
        assert out == [b'{"id":9,"_expand":{}}', b'{"_expand":{}}', b'{"_expand":{}}']
        await store.insert("User", user(77))  # the insert moves the tick: the kept None goes
        out = expander.records(store, POST, query, [gone], [b"{}"], {})
        assert out == [b'{"_expand":{"author_id":{"id":77,"name":"user 77"}}}']

    with_posts(go)


# --- config.py: SERVICE_LIST_CACHE_BYTES ----------------------------------------------------


@pytest.mark.parametrize(
    "raw, kept", [(None, 8388608), ("", 8388608), ("0", 0), ("1", 1), (" 70001 ", 70001), ("16777216", 16777216)]
)
def test_the_list_cache_bytes_default_to_8_mib_and_0_keeps_none(raw, kept):
    environ = {} if raw is None else {"SERVICE_LIST_CACHE_BYTES": raw}
    assert load_config(environ).list_cache_bytes == kept


@pytest.mark.parametrize("raw", ["-1", "1.5", "8M", "x"])
def test_a_list_cache_bytes_below_0_or_not_an_integer_is_refused_naming_it(raw):
    with pytest.raises(ConfigError) as refused:
        load_config({"SERVICE_LIST_CACHE_BYTES": raw})
    assert str(refused.value) == f"SERVICE_LIST_CACHE_BYTES={raw!r} is not valid: expected an integer of at least 0"


# --- storage/tenants.py: a drop refused while a workers reader holds its copy -----------------


def tenant_with_readers(*readers: str, locked: tuple[str, ...] = ()) -> tuple[str, str]:
    """(data dir, tenant path) of tenant "shop" with `workers/<name>/` copies; those in
    `locked` have a LOCK file (a reader opened them once)."""
    data = tempfile.mkdtemp(prefix="tenants-")
    path = create_tenant(data, "shop")
    with open(os.path.join(path, "log"), "wb") as log:
        log.write(b"x")
    for name in readers:
        os.makedirs(os.path.join(path, "workers", name))
        if name in locked:
            WriterLock.acquire(os.path.join(path, "workers", name)).release()
    return data, path


def test_the_drop_names_the_first_reader_that_holds_its_copy_and_leaves_every_lock_free():
    data, path = tenant_with_readers("reader-1", "reader-2", "reader-3", locked=("reader-1", "reader-2", "reader-3"))
    try:
        held = [WriterLock.acquire(os.path.join(path, "workers", n)) for n in ("reader-3", "reader-2")]
        before = sorted(os.listdir(data)), sorted(os.listdir(os.path.join(path, "workers")))
        with pytest.raises(TenantLocked) as refused:
            drop_tenant(data, "shop")
        assert str(refused.value) == (
            f"tenant directory {path!r} is locked by process {os.getpid()}; one writer per data directory; "
            "reader-2 of `serve --workers` serves it while its writer restarts"
        )
        assert refused.value.pid == os.getpid() and refused.value.path == path
        assert (sorted(os.listdir(data)), sorted(os.listdir(os.path.join(path, "workers")))) == before
        assert not probe_lock(path)[0] and not probe_lock(os.path.join(path, "workers", "reader-1"))[0]
        held[1].release()
        with pytest.raises(TenantLocked) as again:
            drop_tenant(data, "shop")
        assert str(again.value).endswith("; reader-3 of `serve --workers` serves it while its writer restarts")
        held[0].release()
        drop_tenant(data, "shop")
        assert os.listdir(data) == []
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_copies_never_served_and_a_tenant_without_workers_are_dropped_whole():
    data, path = tenant_with_readers("reader-1", "reader-2", locked=("reader-2",))
    try:
        with open(os.path.join(path, "workers", "notes"), "w") as notes:
            notes.write("a file, not a copy")
        never = WriterLock.acquire(os.path.join(path, "workers", "reader-1"))  # its LOCK file made now
        os.remove(os.path.join(path, "workers", "reader-1", "LOCK"))  # held, but no lock file: never served
        drop_tenant(data, "shop")
        never.release()
        assert os.listdir(data) == []
        create_tenant(data, "plain")
        drop_tenant(data, "plain")
        assert os.listdir(data) == []
        with pytest.raises(TenantError) as missing:
            drop_tenant(data, "plain")
        assert str(missing.value) == f"tenant 'plain' does not exist under {data!r}"
    finally:
        shutil.rmtree(data, ignore_errors=True)


MESSAGES = """
model Person {
  id    int  @id
  name  str
  team  str  @filter
  @allow(read, record.team == token.team)
  @allow(write, token.role == "admin")
}

model Note {
  id    int  @id
  text  str
}

model Message {
  id       int   @id
  about_id int?  @ref(Person) @filter
  from_id  int   @ref(Note) @filter
  to_id    int   @ref(Note) @filter
}
"""
MESSAGES_MODULE = compile_schema(parse_schema(MESSAGES, "messages.dbs"))
MESSAGE = MESSAGES_MODULE.BY_NAME["Message"]


def with_messages(go: Callable[[Store], Awaitable[None]]) -> None:
    """Run `go(store)` over people 1 (team a) and 2 (team b), notes 1 and 2, and messages
    1 (about nobody, 1 -> 2), 2 (about 1, 2 -> 2) and 3 (about 2, 1 -> 1)."""
    directory = tempfile.mkdtemp(prefix="app-side-messages-")
    store = Store.open(directory, MESSAGES_MODULE.MODELS, MESSAGES_MODULE.DESCRIPTION, sync="off")

    async def filled() -> None:
        await store.insert("Person", {"id": 1, "name": "ann", "team": "a"})
        await store.insert("Person", {"id": 2, "name": "bob", "team": "b"})
        await store.insert("Note", {"id": 1, "text": "one"})
        await store.insert("Note", {"id": 2, "text": "two"})
        for i, about, sender, to in ((1, None, 1, 2), (2, 1, 2, 2), (3, 2, 1, 1)):
            await store.insert("Message", {"id": i, "about_id": about, "from_id": sender, "to_id": to})
        await go(store)

    try:
        asyncio.run(asyncio.wait_for(filled(), 30))
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


NOTE = {1: b'{"id":1,"text":"one"}', 2: b'{"id":2,"text":"two"}'}
ANN = b'"about_id":{"id":1,"name":"ann","team":"a"}'


def test_two_fields_of_one_model_keep_entries_of_their_own_and_share_its_reads():
    async def go(store: Store) -> None:
        counting = CountingStore(store)
        encoded_models: list[str] = []

        def encode(model: Any, record: Any) -> bytes:
            encoded_models.append(model.name)
            return json_bytes(record)

        expander = Expander(MESSAGES_MODULE.MODELS, encode)
        records, _total, _wm = store.list_records("Message", Query(limit=10))
        data = [json_bytes(r) for r in records]
        query = Query(expand=(("about_id", None), ("from_id", None), ("to_id", None)))
        out = expander.records(counting, MESSAGE, query, records, data, {"team": "a"})
        assert out == [
            b'{"id":1,"about_id":null,"from_id":1,"to_id":2,"_expand":{"from_id":'
            + NOTE[1]
            + b',"to_id":'
            + NOTE[2]
            + b"}}",
            b'{"id":2,"about_id":1,"from_id":2,"to_id":2,"_expand":{'
            + ANN
            + b',"from_id":'
            + NOTE[2]
            + b',"to_id":'
            + NOTE[2]
            + b"}}",
            b'{"id":3,"about_id":2,"from_id":1,"to_id":1,"_expand":{"from_id":'
            + NOTE[1]
            + b',"to_id":'
            + NOTE[1]
            + b"}}",
        ]  # bob (team b) is hidden from a token of team a, as if absent
        assert counting.gets == [("Note", 1, None), ("Note", 2, None), ("Person", 1, None), ("Person", 2, None)]
        # the live records' cache (`encode`) for each entry made: once per field and record
        assert encoded_models == ["Note", "Note", "Person", "Note", "Note"]
        counting.gets.clear()
        again = expander.records(counting, MESSAGE, query, records, data, {"team": "b"})
        assert counting.gets == [("Person", 1, None), ("Person", 2, None)]  # a ruled model's entries are never kept
        assert (
            again[1]
            == b'{"id":2,"about_id":1,"from_id":2,"to_id":2,"_expand":{"from_id":'
            + NOTE[2]
            + b',"to_id":'
            + NOTE[2]
            + b"}}"
        )
        assert again[2].startswith(
            b'{"id":3,"about_id":2,"from_id":1,"to_id":1,"_expand":{"about_id":{"id":2,"name":"bob"'
        )

    with_messages(go)


def test_a_past_moment_embeds_the_version_of_then_without_the_live_cache():
    async def go(store: Store) -> None:
        encoded_models: list[str] = []

        def encode(model: Any, record: Any) -> bytes:
            encoded_models.append(model.name)
            return json_bytes(record)

        records, _total, _wm = store.list_records("Message", Query(limit=1))
        await store.replace("Note", 1, {"id": 1, "text": "ONE"})
        expander = Expander(MESSAGES_MODULE.MODELS, encode)
        past = expander.records(store, MESSAGE, Query(as_of=1, expand=(("from_id", None),)), records, [b"{}"], {})
        assert past == [b'{"_expand":{"from_id":' + NOTE[1] + b"}}"] and encoded_models == []
        now = expander.records(store, MESSAGE, Query(expand=(("from_id", None),)), records, [b"{}"], {})
        assert now == [b'{"_expand":{"from_id":{"id":1,"text":"ONE"}}}'] and encoded_models == ["Note"]

    with_messages(go)


def test_the_plans_and_moments_kept_are_bounded_by_capacity():
    async def go(store: Store) -> None:
        expander = Expander(MESSAGES_MODULE.MODELS, lambda model, record: json_bytes(record), capacity=1)
        records, _total, _wm = store.list_records("Message", Query(limit=1))
        for field in ("from_id", "to_id", "from_id"):
            out = expander.records(store, MESSAGE, Query(expand=((field, None),)), records, [b"{}"], {})
            assert out == [b'{"_expand":{"%s":%s}}' % (field.encode(), NOTE[1] if field == "from_id" else NOTE[2])]
        for as_of in (1, 2, 1):
            out = expander.records(
                store, MESSAGE, Query(as_of=as_of, expand=(("from_id", None),)), records, [b"{}"], {}
            )
            assert out == [b'{"_expand":{"from_id":' + NOTE[1] + b"}}"]
        assert Expander(MESSAGES_MODULE.MODELS, lambda model, record: b"").capacity == 256

    with_messages(go)


def test_each_past_watermark_reads_the_parents_of_its_own_moment_and_the_current_one_reads_live():
    async def go(store: Store) -> None:
        encoded_models: list[str] = []

        def encode(model: Any, record: Any) -> bytes:
            encoded_models.append(model.name)
            return json_bytes(record)

        expander = Expander(MESSAGES_MODULE.MODELS, encode)
        records, _total, _wm = store.list_records("Message", Query(limit=1))
        query = Query(as_of=3, expand=(("from_id", None),))  # Message's watermark now: the present
        assert expander.records(store, MESSAGE, query, records, [b"{}"], {}) == [
            b'{"_expand":{"from_id":' + NOTE[1] + b"}}"
        ]
        assert encoded_models == ["Note"]  # read live
        await store.replace("Note", 1, {"id": 1, "text": "ONE"})
        await store.insert("Message", {"id": 4, "about_id": None, "from_id": 1, "to_id": 1})
        await store.insert("Message", {"id": 5, "about_id": None, "from_id": 1, "to_id": 1})
        for as_of, text in ((2, b"one"), (4, b"ONE"), (2, b"one")):  # the last moment of each watermark
            query = Query(as_of=as_of, expand=(("from_id", None),))
            out = expander.records(store, MESSAGE, query, records, [b"{}"], {})
            assert out == [b'{"_expand":{"from_id":{"id":1,"text":"%s"}}}' % text], as_of
        assert encoded_models == ["Note"]

    with_messages(go)


# --- operators.py's ranges and cursors.py's encode_cursor's exact text ---------------------------


def test_bounds_of_one_field_keep_the_tighter_and_an_equal_key_keeps_the_exclusive():
    assert ranges([("s", "lte", 5)]) == (("s", None, True, 5, True),)
    assert ranges([("s", "lt", 5), ("s", "lte", 5)]) == (("s", None, True, 5, False),)
    assert ranges([("s", "lte", 5), ("s", "lt", 5)]) == (("s", None, True, 5, False),)
    assert ranges([("s", "lte", 5), ("s", "lt", 3), ("s", "lte", 4)]) == (("s", None, True, 3, False),)
    assert ranges([("s", "gt", 5), ("s", "gte", 5)]) == (("s", 5, False, None, True),)
    assert ranges([("s", "gte", 5), ("s", "gt", 7), ("s", "gte", 6)]) == (("s", 7, False, None, True),)


@pytest.mark.parametrize("key", ["???", "~~~", "ab", "é"])
def test_a_cursor_is_the_unpadded_base64url_of_its_compact_json(key):
    text = json.dumps(["c1", "Post", "title", [key], 7], separators=(",", ":")).encode()
    expected = base64.urlsafe_b64encode(text).decode().rstrip("=")
    assert encode_cursor("Post", (("title", False),), [key], 7) == expected
    assert "\n" not in expected and "=" not in expected


def test_the_cursors_above_use_both_url_safe_letters_and_need_padding():
    texts = [json.dumps(["c1", "Post", "title", [k], 7], separators=(",", ":")).encode() for k in ("???", "~~~")]
    standard = "".join(base64.b64encode(t).decode() for t in texts)
    assert "+" in standard and "/" in standard and "=" in standard


FIELDS = {
    "score": ("float", True, True, False),  # @sort @filter
    "tag": ("str", False, True, True),  # @filter, nullable
    "note": ("str", False, False, True),  # nullable, neither
    "x": ("int", False, False, False),
}


def test_an_operator_refusal_names_why_and_the_fields_it_applies_to():
    def problem(param: str, fields=FIELDS) -> str:
        return str(operator_problem(param, fields, "A"))

    assert problem("x__y__gt") == "unknown query parameter 'x__y__gt'; allowed: A"  # the last __ splits
    assert problem("x__null") == (
        "cannot use 'x__null': 'x' is not nullable; __null applies to nullable @filter or @sort fields (tag); allowed: A"
    )
    assert problem("note__null") == (
        "cannot use 'note__null': 'note' is neither @filter nor @sort; __null applies to nullable @filter or @sort "
        "fields (tag); allowed: A"
    )
    assert problem("x__gt", {"x": ("int", False, False, False)}) == (
        "cannot use 'x__gt': 'x' is not marked @sort, and range operators apply to sort fields (none); allowed: A"
    )
