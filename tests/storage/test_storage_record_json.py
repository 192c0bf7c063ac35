"""A stored record is its record's JSON, `compact_json(record)` (session 27, wt-objform), and
a list page's records are their stored texts (shown.py `ShownDicts.page` with texts); an
array row of an older snapshot (formats 1-3) is made that object by a cut (rows.py
`row_object`): every value kind, byte for byte. The page's body is byte for byte the body
the dicts gave: random pages of a real store (files in a temporary directory)
whose dict cache is full, over unicode, escapes, floats, nulls, `json` values, values
holding commas, quotes and brackets of their own (session 18), records reshaped by an
added field; the last record of a page stays a dict; what is kept is
what was kept without texts. In process, no mocks."""

from __future__ import annotations

import random

import pytest

from dbsvc.readcache import EncodedRecords
from dbsvc.runtime import Query, compact_json, json_bytes
from dbsvc.storage import Store
from dbsvc.storage.rows import layout, pack, row_object, sent, unpack
from support.storage import BLOG, ROOT, open_store, post, run, user

POST = BLOG.BY_NAME["BlogPost"]
POST_LAYOUT = layout(POST.fields).encode("utf-8")
STRINGS = ["plain", "ünïcödé ✓ 🙂", 'q"uote\\back', "tab\tnl\n\x00\x1f", "]", "[", "{}", "%s%%", "", "한국어"]
STRINGS += ["a, b", '",', "\\,", "[,]", "{,}"]  # commas of their own: cut too (session 18)
FLOATS = [0.0, -0.0, 2.5, 1e300, 5e-324, 1e16, -123.456, 0.1 + 0.2]
TAGS = [None, [], ["one"], ["a", "b"], {"k": "v"}, {"a": [1, {"b": None}]}, [[]], "s", 3]


def dict_json(values) -> bytes:  # noqa: ANN001 (a record's values)
    """What a page encoded before: the values' dict, its JSON."""
    return json_bytes(POST.decode(values))


def record_json(shape: bytes, count: int, values) -> bytes | None:  # noqa: ANN001 (a record's values)
    """The object an older snapshot's array row of `values` is made (rows.py `row_object`)."""
    return row_object(shape, count, compact_json(list(values)).encode("utf-8", "surrogatepass"))


def stored_of(values) -> bytes:  # noqa: ANN001 (a record's values)
    """The stored form of a post's values, held to be its record's JSON byte for byte."""
    stored = pack(POST.fields, values)
    assert stored == compact_json(POST.decode(values)).encode("utf-8", "surrogatepass")
    assert unpack(stored) == list(values)
    return stored


@pytest.mark.parametrize("tags", TAGS)
@pytest.mark.parametrize("text", STRINGS)
def test_record_json_is_the_dict_json_or_none(text, tags):
    for score in FLOATS:
        values = [7, 2, text, text[::-1], score < 1, score, tags]
        stored = stored_of(values)
        made = record_json(POST_LAYOUT, len(POST.fields), values)
        assert made is None or made == dict_json(unpack(stored)) == stored


@pytest.mark.parametrize(
    "values",
    [
        [1, 2, "a,b", "body", True, 1.5, None],  # a comma in a string
        [1, 2, ",", ",,", True, 1.5, None],  # strings of commas only
        [1, 2, "a,", ",b", True, 1.5, "x,y"],  # a comma at a string's end, then at its start
        [1, 2, 'say "hi", then', 'q\\",', True, 1.5, None],  # escaped quotes and backslashes by a comma
        [1, 2, 'x\\', 'y\\\\",z', True, 1.5, None],  # a string ending in backslashes, then a comma
        [1, 2, "a,[b],{c}", "]", True, 1.5, None],  # brackets inside strings
        [1, 2, "t", "b", True, 1.5, ["a", "b"]],  # a json array of two items
        [1, 2, "t,", "b", True, 1.5, {"a": 1, "b": [2, "3,4", {"c": "]"}]}],  # nested, commas in it
        [1, 2, "t", "b,", False, -0.0, [[], {}, [[","]], '"']],
        [1, 2, "ünï,cödé 🙂", "tab\t,nl\n", True, 1e300, {"k,": "v,", "": None}],
    ],
)
def test_record_json_cuts_a_value_holding_commas_as_the_dict_json(values):
    stored = stored_of(values)
    made = record_json(POST_LAYOUT, len(POST.fields), values)
    assert made is not None  # before: None, and the record decoded
    assert made == dict_json(unpack(stored))


def test_record_json_leaves_a_lone_surrogate_to_the_decode():
    values = [1, 2, "\ud800", "b,c", True, 1.5, None]
    assert record_json(POST_LAYOUT, len(POST.fields), values) is None
    assert sent(stored_of(values)) is None  # sent as its dict, which the app encodes


def test_record_json_cuts_records_of_every_value_type_and_their_commas():
    """Random records over strings of the characters JSON treats apart (commas, quotes,
    backslashes, brackets, control characters, non-ASCII) and nested `json` values."""
    rng = random.Random(23)
    alphabet = [",", '"', "\\", "[", "]", "{", "}", ":", " ", "a", "é", "🙂", "\n", "\x00", "%"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))

    def nested(depth: int = 0):  # noqa: ANN202 (a json value)
        pick = rng.random()
        if depth > 2 or pick < 0.3:
            return rng.choice([None, True, False, 1, -2.5, text()])
        if pick < 0.65:
            return [nested(depth + 1) for _ in range(rng.randint(0, 3))]
        return {text(): nested(depth + 1) for _ in range(rng.randint(0, 3))}

    for i in range(3000):
        values = [i, rng.randint(-(2**63), 2**63 - 1), text(), text(), rng.random() < 0.5, rng.choice(FLOATS), nested()]
        assert record_json(POST_LAYOUT, len(POST.fields), values) == dict_json(values) == stored_of(values)


def test_record_json_cuts_records_of_every_value_type():
    rng = random.Random(17)
    strings = [t for t in STRINGS if b"\xed" not in t.encode()]  # U+D000-U+D7FF: decoded (above)
    made = 0
    for i in range(2000):
        values = [i, rng.randint(-(2**63), 2**63 - 1), rng.choice(strings), rng.choice(strings)]
        values += [rng.choice([True, False]), rng.choice(FLOATS + [rng.random() * 10 ** rng.randint(-30, 30)])]
        values.append(rng.choice([None, [], ["x"], {"k": None}, 0]))
        stored_of(values)
        out = record_json(POST_LAYOUT, len(POST.fields), values)
        assert out is not None  # no value holds a surrogate (commas: cut since session 18)
        assert out == dict_json(values)
        made += 1
    assert made == 2000


# -- pages of a real store ---------------------------------------------------------------

RECORDS = 300


@pytest.fixture
def posts(tenant):
    """A tenant of RECORDS posts of every value kind, closed (an open starts with no dict kept)."""
    rng = random.Random(36)
    s = open_store(tenant, sync="off")

    async def fill():
        for a in range(1, 6):
            await s.insert("User", user(a))
        for i in range(1, RECORDS + 1):
            text = rng.choice(STRINGS) + str(i)
            await s.insert(
                "BlogPost",
                post(i, author=rng.randint(1, 5), title=text, body=rng.choice(STRINGS), score=rng.choice(FLOATS))
                | {"published": rng.random() < 0.5, "tags": rng.choice(TAGS)},
            )

    run(fill())
    s.close()
    return tenant


@pytest.fixture
def store(posts):
    s = open_store(posts, readonly=True)
    yield s
    s.close()


def full_dicts(s: Store, capacity: int = 8) -> None:
    """Fill the table's dict cache (its public capacity made small) so a page's records
    are mostly refused: the pages at 1,000,000 posts."""
    table = s.table("BlogPost")
    table.dicts.capacity = capacity
    s.list_page("BlogPost", Query(limit=capacity))


def queries(rng: random.Random) -> list[Query]:
    out = []
    for _ in range(60):
        sort = rng.choice([(), (("score", True),), (("title", False),)])
        filters = {"author_id": frozenset([rng.randint(1, 5)])} if rng.random() < 0.4 else {}
        out.append(Query(filters=filters, sort=sort, limit=rng.randint(1, 25), offset=rng.randint(0, RECORDS)))
    return out


def test_a_page_with_texts_is_the_dicts_page_byte_for_byte(store):
    full_dicts(store)
    encoded = EncodedRecords(BLOG.MODELS, capacity=8)
    texts = 0
    for query in queries(random.Random(5)):
        page, total, watermark, more = store.list_page("BlogPost", query, True)
        texts += sum(type(r) is bytes for r in page)
        body = encoded.encode_page(POST, page, texts=True)
        dicts, total2, watermark2, more2 = store.list_page("BlogPost", query)
        assert all(type(r) is dict for r in dicts)
        assert body == b",".join(map(json_bytes, dicts))
        assert (total, watermark, more) == (total2, watermark2, more2)
        if page:  # a dict (a SentRecord, its text beside it, when cut): its Link reads it
            last = page[-1]
            assert isinstance(last, dict)
            assert type(last) is dict or last.text == json_bytes(dicts[-1])
            # the SentRecord holds its id alone: id order's Link reads the id alone
            # (wt-rand10); a sorted one reads the keys the store took from its key columns
            # (`sort_keys`, session 32), each the model's key of the record's value
            whole = type(last) is dict
            assert last == (dicts[-1] if whole else {"id": dicts[-1]["id"]})
            if not whole:
                keys = tuple(POST.keys[field](dicts[-1][field]) for field, _desc in query.sort)
                assert last.sort_keys == (keys if query.sort else None)
    assert texts > 100  # records not kept came as texts (0xED in their text: decoded)


def test_pages_with_texts_keep_nothing_and_refuse_nothing(store):
    """A page with texts is its stored records as they are (shown.py, session 27): the
    cache holds what the dicts' pages kept before, but for records handed out as dicts
    (UTF-8 0xED in their text: Hangul here, a lone surrogate maybe) and a sorted page's
    last record (its `Link` reads its dict), kept by `one`'s rule."""
    full_dicts(store)
    table = store.table("BlogPost")
    dicts = table.dicts
    kept = set(dicts.ids)
    lasts = set()
    for query in queries(random.Random(9)):
        page = store.list_page("BlogPost", query, True)[0]
        if page and query.sort:
            lasts.add(page[-1]["id"])
    added = set(dicts.ids) - kept
    assert added and all(b"\xed" in table.live[i] or i in lasts for i in added)


def cut(live, ids) -> bool:  # noqa: ANN001 (a table's live map)
    return all(sent(live[i]) is not None for i in ids)


def test_every_stored_record_of_a_real_store_is_its_record_json(store):
    table = store.table("BlogPost")
    for id_, stored in table.live.items():
        record, _watermark = store.get("BlogPost", id_)
        assert stored == compact_json(record).encode("utf-8", "surrogatepass")


def test_a_texts_page_of_kept_records_is_their_kept_json_found_with_their_dicts(store):
    """The store keeps a record's JSON beside its dict (shown.py, wt-rand8): a page of kept
    records asked with texts is their kept JSON, the very bytes again on the next ask (no
    cut, no lookup by the app), the body byte for byte the dicts' JSON, and the app's
    encoded records neither asked nor filled by it."""
    full_dicts(store)
    encoded = EncodedRecords(BLOG.MODELS, capacity=8)
    live = store.table("BlogPost").live  # ids 1..RECORDS: offset k is id k + 1
    k = next(k for k in range(150, 280) if cut(live, range(k + 1, k + 7)))
    query = Query(limit=5, offset=k + 1)
    store.list_page("BlogPost", query, True)  # first ask: every record refused
    page = store.list_page("BlogPost", query, True)[0]  # second: the store keeps them, with their JSON
    kept = store.list_page("BlogPost", query)[0]  # the kept dicts, as a page without texts has them
    assert all(type(r) is bytes for r in page[:-1]) and type(page[-1]) is not dict
    assert page[-1] == {"id": kept[-1]["id"]} and type(kept[-1]) is dict  # id order: its id alone
    assert page[-1].text == json_bytes(kept[-1])
    body = b",".join(map(json_bytes, kept))
    assert encoded.encode_page(POST, page, texts=True) == body
    again = store.list_page("BlogPost", query, True)[0]
    assert all(a is b for a, b in zip(again[:-1], page[:-1])) and again[-1].text is page[-1].text
    assert encoded.encode_page(POST, again, texts=True) == body
    assert encoded.refused == 0 and not encoded.kept_ids(POST)  # nothing asked or kept there
    mixed = store.list_page("BlogPost", Query(limit=6, offset=k), True)[0]  # one refused, five kept
    assert all(type(r) is bytes for r in mixed[:-1]) and mixed[1:-1] == again[:-1]
    assert mixed[1] is again[0]  # the kept bytes, beside a record cut and dropped
    assert encoded.encode_page(POST, mixed, texts=True) == b",".join(
        map(json_bytes, store.list_page("BlogPost", Query(limit=6, offset=k))[0])
    )


def sent_json(record) -> bytes:  # noqa: ANN001 (a page's record as the store hands it with texts)
    """A record of a page with texts as the page sends it: its bytes, a SentRecord's text
    (in id order it holds its id alone), or a plain dict's encoding."""
    if type(record) is bytes:
        return record
    return record.text if type(record) is not dict else json_bytes(record)


def test_a_record_reshaped_by_an_added_field_is_cut_with_its_default(posts):
    text = (ROOT / "schemas" / "blog.dbs").read_text()
    evolved = text.replace("  tags      json?\n", "  tags      json?\n  rank      int      @default(5)\n", 1)
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import parse_schema

    mod = compile_schema(parse_schema(evolved, "evolved.dbs"))
    s = Store.open(posts, mod.MODELS, mod.DESCRIPTION)
    try:
        full_dicts(s)
        model = mod.BY_NAME["BlogPost"]
        encoded = EncodedRecords(mod.MODELS, capacity=8)
        for query in queries(random.Random(3)):
            page = s.list_page("BlogPost", query, True)[0]
            body = encoded.encode_page(model, page, texts=True)  # as the app asks a page with texts
            assert body == b",".join(json_bytes(r) for r in s.list_page("BlogPost", query)[0])
            assert all(b'"rank":5}' in sent_json(r) for r in page)
    finally:
        s.close()


def test_a_texts_page_joins_the_texts_and_keeps_the_kept_dicts_json_without_asking():
    """EncodedRecords (readcache.py) on a page as the store hands it with texts, fixture-free:
    texts joined as they are, every plain dict kept at once, the last too (a plain dict last
    is one the store keeps; one it does not comes as a SentRecord: session 20, wt-rand6)."""
    encoded = EncodedRecords(BLOG.MODELS, capacity=2)
    for i in (901, 902):  # full
        encoded.encode(POST, post(i))
    text = json_bytes(post(1))
    middle, last = post(2, title="ünï"), post(3)
    page = [text, middle, last]
    assert encoded.encode_page(POST, page, texts=True) == b",".join([text, json_bytes(middle), json_bytes(last)])
    assert encoded.refused == 0  # none asked: the store's admission said yes
    assert encoded.encode(POST, middle) is encoded.encode(POST, middle)  # kept: the same bytes
    assert encoded.encode(POST, last) is encoded.encode(POST, last) and encoded.refused == 0


def test_a_texts_page_joins_a_kept_json_and_never_a_stale_one():
    encoded = EncodedRecords(BLOG.MODELS, capacity=4)
    kept, old = post(1), post(2)
    first = encoded.encode(POST, kept)
    encoded.encode(POST, old)
    new = post(2, title="new version")  # another record object of id 2: the kept JSON is stale
    text, last = json_bytes(post(3)), post(4)
    page = encoded.encode_page(POST, [text, kept, new, last])
    assert page == b",".join([text, first, json_bytes(new), json_bytes(last)])
    assert encoded.encode(POST, new) is encoded.encode(POST, new)  # the new version's JSON kept
