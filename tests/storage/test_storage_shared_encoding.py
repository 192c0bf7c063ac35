"""A write's JSON made once (issue 36 item 3, session 7): the same bytes as before, fewer encodings.

- rows.py `pack_parts` makes a record's stored form and its values' texts from one encoding,
  `record_text` its JSON object from them, `previous_parts` an update's previous record's
  texts from those of the values it left alone (composed as a write composes them in
  tests/support/packing.py): the stored form is `compact_json(record)` as UTF-8 (session 27: a
  stored record is its record's JSON), the texts `compact_json(record)` / `compact_json(previous)`, byte for
  byte, for control characters, `%`, NUL, non-ASCII, lone surrogates, nested `json` values,
  values equal across types (1, 1.0, True; 0.0 and -0.0) and dicts not in the record form.
- The store hands the application the JSON it logged (`Store.written_json`), so a PUT's or
  PATCH's response is not encoded again: the same bytes as `json_bytes(record)`, and only
  for the very record the last write stored.
- `WordIndex.swap` cuts only the changed `@search` fields into words (the unchanged ones only
  when the changed ones' words moved), with the postings of an index built from scratch.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbsvc.runtime import compact_json, json_bytes
from dbsvc.storage.rows import pack
from dbsvc.storage.words import WordIndex
from support.jsonvalues import SCALARS
from support.packing import pack_shown, pack_update

FIELDS = ("id", "title", "score", "meta", "flag")

RECORDS = [
    (1, "plain", 2.5, None, True),
    (2, "nul \x00 and \x1f, a comma, a \"quote\" and \\", -0.0, None, False),
    (3, "%s %d %% {} ", 1e300, "%(x)s", None),
    (4, "é ü 漢字 \U0001f600", 0.1, 7, True),
    (5, "lone \ud800 surrogate", 3.0, True, None),
    (6, "nested", 1.0, [1, [2, {"a": None}], "x\x00y"], False),
    (7, "object", 2.0, {"z": 1, "a": [True, 1.5]}, True),
    (2**63 - 1, "", -1.5, "", False),
]


@pytest.mark.parametrize("values", RECORDS, ids=lambda v: str(v[0]))
def test_pack_shown_is_pack_and_compact_json_byte_for_byte(values):
    record = dict(zip(FIELDS, values))
    assert pack_shown(FIELDS, record, values) == (stored_json(record), compact_json(record))
    assert pack(FIELDS, values) == stored_json(record)


def stored_json(record: dict) -> bytes:
    """What a stored record is: its record's compact JSON, lone surrogates kept."""
    return compact_json(record).encode("utf-8", "surrogatepass")


def test_pack_shown_of_a_dict_not_in_the_record_form_encodes_the_dict_as_it_is():
    values = RECORDS[0]
    reordered = dict(reversed(list(zip(FIELDS, values))))
    assert pack_shown(FIELDS, reordered, values) == (pack(FIELDS, values), compact_json(reordered))
    extra = {**dict(zip(FIELDS, values)), "more": 1}
    assert pack_shown(FIELDS, extra, values)[1] == compact_json(extra)


def test_pack_shown_refuses_what_pack_refuses():
    values = (1, "x", float("nan"), None, True)
    with pytest.raises(ValueError):
        pack_shown(FIELDS, dict(zip(FIELDS, values)), values)
    values = (1, "x", 1.0, object(), True)
    with pytest.raises(TypeError):
        pack_shown(FIELDS, dict(zip(FIELDS, values)), values)


UPDATES = [
    ((1, "same", 1.0, 1, True), (1, "same", 1.0, True, True)),  # json 1 -> true: equal, other text
    ((1, "same", 1.0, True, True), (1, "same", 1.0, 1.0, True)),
    ((1, "a", 0.0, None, True), (1, "a", -0.0, None, True)),  # 0.0 == -0.0, other text
    ((1, "a", 2.0, 2, True), (1, "b", 2.0, 2.0, False)),
    ((1, "a" * 300, 2.5, None, True), (1, "".join(["a"] * 300), 9.5, None, True)),  # equal str, other object
    ((1, "x", 1.5, [1, 2], None), (1, "x", 1.5, None, None)),  # the old value nested
    ((1, "x", 1.5, None, None), (1, "x", 1.5, {"a": [1]}, None)),  # the new one nested
    ((1, "é\ud800", 1.5, "%s", None), (1, "é\ud800", 2.5, "%s", False)),
]


@pytest.mark.parametrize("old, new", UPDATES)
def test_pack_update_gives_the_previous_record_s_json_byte_for_byte(old, new):
    previous, record = dict(zip(FIELDS, old)), dict(zip(FIELDS, new))
    assert pack_update(FIELDS, record, new, previous, old) == (
        stored_json(record),
        compact_json(record),
        compact_json(previous),
    )


VALUES = st.tuples(SCALARS, SCALARS, SCALARS, st.one_of(SCALARS, st.lists(SCALARS, max_size=3)), SCALARS)


@given(VALUES, VALUES)
def test_pack_update_agrees_with_two_encodings_on_any_values(old, new):
    previous, record = dict(zip(FIELDS, old)), dict(zip(FIELDS, new))
    assert pack_update(FIELDS, record, new, previous, old) == (
        stored_json(record),
        compact_json(record),
        compact_json(previous),
    )
    assert pack_shown(FIELDS, record, new) == (stored_json(record), compact_json(record))


# -- the store hands its JSON to the response -------------------------------------------------

BLOG = """\
model Post {
  id     int    @id
  title  str    @sort @search
  body   str    @search
  score  float  @sort
  meta   json?
}
"""


@pytest.fixture
def written(tmp_path):
    """Run `writes(store, model)` on a fresh store inside a loop (a write's commit needs one)."""
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import parse_schema
    from dbsvc.storage import Store

    module = compile_schema(parse_schema(BLOG, "blog.dbs"))

    def run(writes):
        async def body():
            store = Store.open(str(tmp_path), module.MODELS, module.DESCRIPTION, sync="off")
            try:
                return writes(store, module.BY_NAME["Post"])
            finally:
                await store.aclose()

        return asyncio.run(body())

    return run


def test_the_store_hands_back_the_json_it_logged_for_the_record_it_stored(written):
    def writes(store, post):
        record, _done = store.apply_insert("Post", post.validate_create({"title": "A b", "body": "c", "score": 1}))
        assert store.written_json(record) == json_bytes(record)
        assert json_bytes(record) == b'{"id":1,"title":"A b","body":"c","score":1.0,"meta":null}'
        current = store.get("Post", 1)[0]
        _previous, patched, _done = store.apply_replace("Post", 1, post.validate_patch({"meta": {"k": [1]}}, current))
        assert store.written_json(patched) == json_bytes(patched)
        assert store.written_json(record) is None  # not the last record stored
        assert store.written_json(dict(patched)) is None  # an equal dict is not that record

    written(writes)


def test_the_log_holds_an_insert_and_an_update_in_the_promised_bytes(written):
    def writes(store, post):
        store.apply_insert("Post", post.validate_create({"title": "x %s", "body": "y", "score": 0.0, "meta": [1]}))
        store.apply_replace("Post", 1, post.validate_replace({"title": "x %s", "body": "z", "score": -0.0}, 1))
        return [frame[16:] for frame in store.frames_after(0)]

    assert written(writes) == [
        b'{"kind":"insert","model":"Post","offset":1,"watermark":1,"id":1,'
        b'"record":{"id":1,"title":"x %s","body":"y","score":0.0,"meta":[1]}}',
        b'{"kind":"update","model":"Post","offset":2,"watermark":2,"id":1,'
        b'"record":{"id":1,"title":"x %s","body":"z","score":-0.0,"meta":null},'
        b'"previous":{"id":1,"title":"x %s","body":"y","score":0.0,"meta":[1]}}',
    ]


# -- the word index moves only the changed fields' words --------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "Alpha", "BETA", "é", "x1"]


def _text(rng: random.Random) -> str | None:
    if rng.random() < 0.1:
        return None
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))


def _postings(index: WordIndex) -> dict[str, set]:
    return {word: set(ids) for word, ids in index.postings.items()}


def test_word_swap_of_changed_fields_leaves_the_postings_a_fresh_build_has():
    rng = random.Random(36)
    index = WordIndex([1, 2, 3])
    live = {i: [i, _text(rng), _text(rng), _text(rng)] for i in range(1, 40)}
    index.build(live.items())
    for _ in range(600):
        id_ = rng.randint(1, 39)
        old = live[id_]
        new = list(old)
        for p in rng.sample([1, 2, 3], rng.randint(1, 3)):  # some fields change, the rest stay
            new[p] = _text(rng)
        index.swap(id_, old, new)
        live[id_] = new
        fresh = WordIndex([1, 2, 3])
        fresh.build(live.items())
        assert _postings(index) == _postings(fresh)
        assert list(index.ordered) == list(fresh.ordered)
