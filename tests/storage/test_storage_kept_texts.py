"""rows.py `stored_from_texts` (a replica's run keeps its frames' record texts, followrun.py
rule 6): the texts as stored exactly when each is `pack` of its record's values, None for any
other spelling, whatever the values' types: one type a field or several, null throughout,
lists and objects, `%` in a field's name, escapes, non-ASCII, -0.0 and floats of every size.
The replica's own tests (tests/replica/test_replica_apply_plain_runs.py) run it in a store."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from dbsvc.runtime import compact_json
from dbsvc.storage.rows import pack, stored_from_texts
from support.jsonvalues import SCALARS

FIELDS = ("id", "a", "b%s", "c", "d")
# A run's column a field: all one type (the common run) or any mix.
COLUMN_KINDS = st.sampled_from(
    [
        SCALARS,
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
        st.lists(SCALARS, max_size=3),
        st.dictionaries(st.text(max_size=3), SCALARS, max_size=2),
    ]
)


@st.composite
def runs(draw: st.DrawFn) -> list[tuple]:
    count = draw(st.integers(min_value=1, max_value=6))
    columns = [[draw(kind) for _ in range(count)] for kind in [draw(COLUMN_KINDS) for _ in FIELDS]]
    return list(zip(*columns))


def _kept(texts: list[str]) -> list[bytes] | None:
    # The values as the replica reads them: scanned from the very texts.
    values = [tuple(json.loads(text).values()) for text in texts]
    return stored_from_texts(FIELDS, list(zip(*values)), texts)


@given(runs())
def test_a_run_in_this_stores_spelling_is_kept_as_pack_makes_it(rows):
    texts = [compact_json(dict(zip(FIELDS, row))) for row in rows]
    assert _kept(texts) == [pack(FIELDS, row) for row in rows]


@given(runs(), st.sampled_from(["ascii", "spaced", "reordered", "escaped slash"]), st.data())
def test_a_run_spelled_otherwise_is_refused(rows, how, data):
    texts = [compact_json(dict(zip(FIELDS, row))) for row in rows]
    at = data.draw(st.integers(min_value=0, max_value=len(rows) - 1))
    record = dict(zip(FIELDS, rows[at]))
    other = {
        "ascii": lambda: json.dumps(record, separators=(",", ":")),  # \\u escapes for non-ASCII
        "spaced": lambda: json.dumps(record, ensure_ascii=False),
        "reordered": lambda: compact_json(dict(reversed(record.items()))),
        "escaped slash": lambda: texts[at].replace("/", "\\/"),
    }[how]()
    respelled = [*texts[:at], other, *texts[at + 1 :]]
    # (A reordered record's values come in another order; its text is refused all the same.)
    expected = None if other != texts[at] else [pack(FIELDS, row) for row in rows]
    assert _kept(respelled) == expected


def test_each_awkward_spelling_of_one_value_is_refused():
    # One record of each field kind; the text of one value spelled otherwise each time.
    row = (1, "café", 0.5, True, None)
    text = compact_json(dict(zip(FIELDS, row)))
    assert _kept([text]) == [pack(FIELDS, row)]
    for old, new in [
        ('"café"', '"caf\\u00e9"'),
        ("0.5", "5e-1"),
        ("0.5", "0.50"),
        ('"id":1', '"id":1e0'),  # a float 1.0, whose own text is 1.0
        ('"id":1', '"id": 1'),
        ("true", "true "),
        ('"d":null', '"d":null,"d":null'),
    ]:
        assert text.count(old) == 1
        assert _kept([text.replace(old, new)]) is None, new


def test_a_lone_surrogate_is_kept_as_pack_makes_it():
    # `pack` writes a lone surrogate (a file made by hand can hold one) as its UTF-8
    # ("surrogatepass"); a text holding one as it is, unescaped, is kept as those bytes.
    rows = [(1, "\ud800", 0.5, True, None), (2, "a\udfff\U0001f600", -1.5, False, "\udbff")]
    texts = [compact_json(dict(zip(FIELDS, row))) for row in rows]
    assert "\\" not in "".join(texts)  # as it is, not escaped
    assert _kept(texts) == [pack(FIELDS, row) for row in rows]
    assert _kept(texts)[0] == b'{"id":1,"a":"\xed\xa0\x80","b%s":0.5,"c":true,"d":null}'
