"""A write's payload filled from its record's one encoding (issue 36 item 3, session 12, wt-wr8s).

events.py `payload_templates` gives each model's insert and update payload as a %-template,
filled with the offset, the watermark, the id's text (`id_text`) and the texts rows.py
`pack_parts` made of the record's values (and, for an update, `previous_parts` of the ones it
replaces). The bytes must be `event_payload`'s, which the log, the feeds and every replica
compare byte for byte: hard values (`%`, NUL, quotes, non-ASCII, -0.0, huge ints), str ids,
a model name and fields holding `%`, and any values hypothesis finds.
A table's write apply primes the record's dict and stamps its version in the same call.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.runtime import compact_json
from dbsvc.storage.events import EventKind, event_payload, id_text, payload_templates
from dbsvc.storage.rows import in_form, pack, pack_parts, previous_parts

FIELDS = ("id", "title", "score", "meta", "flag")

RECORDS = [
    (1, "plain", 2.5, None, True),
    (2, "nul \x00 and \x1f, a comma, a \"quote\" and \\", -0.0, None, False),
    (3, "%s %d %% {} %(x)s", 1e300, "%(x)s", None),
    (4, "é ü 漢字 \U0001f600", 0.1, 7, True),
    ("str id %s \"q\"", "", -1.5, "", False),
    (2**63 - 1, "x" * 300, 12.25, True, None),
]


def _fill(template: str, offset: int, watermark: int, id_, *parts: str) -> bytes:
    return (template % (offset, watermark, id_text(id_), *parts)).encode()


@pytest.mark.parametrize("values", RECORDS, ids=lambda v: str(v[0])[:8])
@pytest.mark.parametrize("model", ["Post", "Odd%sModel"])
def test_an_insert_s_template_filled_is_event_payload_byte_for_byte(values, model):
    record = dict(zip(FIELDS, values))
    stored, parts = pack_parts(FIELDS, record, values)
    assert stored == pack(FIELDS, values) == compact_json(record).encode("utf-8", "surrogatepass") and parts is not None
    insert, _update = payload_templates(model, FIELDS)
    expected = event_payload(EventKind.INSERT, model, 41, 12, values[0], record)
    assert _fill(insert, 41, 12, values[0], *parts) == expected


@pytest.mark.parametrize("old", RECORDS[:4], ids=lambda v: str(v[0]))
@pytest.mark.parametrize("new", RECORDS[:4], ids=lambda v: str(v[0]))
def test_an_update_s_template_filled_is_event_payload_byte_for_byte(old, new):
    new = (old[0], *new[1:])  # an update keeps its id
    previous, record = dict(zip(FIELDS, old)), dict(zip(FIELDS, new))
    _stored, parts = pack_parts(FIELDS, record, new)
    assert parts is not None
    _insert, update = payload_templates("Odd%sPost", FIELDS)
    expected = event_payload(EventKind.UPDATE, "Odd%sPost", 7, 3, old[0], record, previous)
    assert _fill(update, 7, 3, old[0], *parts, *previous_parts(parts, old, new)) == expected


def test_fields_holding_percent_are_written_as_they_are():
    fields = ("id", "a%sb", "%d")
    values = (5, "v", 1)
    _stored, parts = pack_parts(fields, dict(zip(fields, values)), values)
    insert, _update = payload_templates("M", fields)
    assert (
        _fill(insert, 1, 1, 5, *parts)
        == b'{"kind":"insert","model":"M","offset":1,"watermark":1,"id":5,"record":{"id":5,"a%sb":"v","%d":1}}'
    )


def test_pack_parts_gives_no_parts_where_the_record_is_not_in_its_form_or_nests():
    values = RECORDS[0]
    reordered = dict(reversed(list(zip(FIELDS, values))))
    assert pack_parts(FIELDS, reordered, values) == (pack(FIELDS, values), None)
    assert not in_form(FIELDS, reordered)
    assert not in_form(FIELDS, {**dict(zip(FIELDS, values)), "more": 1})
    nested = (1, "x", 1.0, [1, {"a": "\x00"}], None)
    assert pack_parts(FIELDS, dict(zip(FIELDS, nested)), nested) == (pack(FIELDS, nested), None)


def test_previous_parts_reuses_only_texts_that_are_the_same_text():
    old = (1, "same", 0.0, 1, "a")
    new = (1, "same", -0.0, True, "b")
    _stored, parts = pack_parts(FIELDS, dict(zip(FIELDS, new)), new)
    assert parts is not None
    assert previous_parts(parts, old, new) == ["1", '"same"', "0.0", "1", '"a"']


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text().filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
)
IDS = st.one_of(st.integers(min_value=0, max_value=2**63 - 1), st.text(min_size=1).filter(str.isprintable))
VALUES = st.tuples(SCALARS, SCALARS, SCALARS, SCALARS)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded host's draws
@given(IDS, VALUES, VALUES)
def test_templates_agree_with_event_payload_on_any_values(id_, old, new):
    old, new = (id_, *old), (id_, *new)
    previous, record = dict(zip(FIELDS, old)), dict(zip(FIELDS, new))
    _stored, parts = pack_parts(FIELDS, record, new)
    assert parts is not None
    insert, update = payload_templates("Post", FIELDS)
    assert _fill(insert, 1, 2, id_, *parts) == event_payload(EventKind.INSERT, "Post", 1, 2, id_, record)
    filled = _fill(update, 3, 4, id_, *parts, *previous_parts(parts, old, new))
    assert filled == event_payload(EventKind.UPDATE, "Post", 3, 4, id_, record, previous)


def test_previous_parts_takes_the_new_record_s_text_itself_for_a_value_left_alone():
    big = 2**40 + 7
    old = (1, "".join(["sa", "me"]), float("1.5"), int(str(big)), None)  # equal, not the same objects
    new = (1, "same", 1.5, big, None)
    _stored, parts = pack_parts(FIELDS, dict(zip(FIELDS, new)), new)
    assert parts is not None
    reused = previous_parts(parts, old, new)
    assert [reused[i] is parts[i] for i in range(5)] == [True, True, False, True, True]  # the float is encoded again


def test_pack_parts_refuses_what_pack_refuses():
    values = (1, "x", float("nan"), None, True)
    with pytest.raises(ValueError):
        pack_parts(FIELDS, dict(zip(FIELDS, values)), values)
