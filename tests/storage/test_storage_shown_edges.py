"""storage/shown.py `ShownDicts` at the edges session 21's tests did not reach (its lazy
decode, the pages' keeping, the size rule), each written out by hand, no store, no fixture:

- a record that may hold a lone surrogate (never sent as its stored text) in a page with
  texts at a place other than the last is its dict, kept by `one`'s rule, and a page with
  texts asked again hands out that very dict;
- a kept page whose stored records changed is kept again at that very ask (no second ask):
  after its single dicts were forgotten, the next ask still gives that ask's answer;
- a stored record of exactly SHOWN_BYTES is kept, one byte more is not, and a longer version
  of a kept record drops the kept dict.

Each case failed under a mutant of shown.py that the older tests let live (docs/mutation.md,
session 22); bench/mutation_inprocess.py runs them per mutant."""

from __future__ import annotations

from dbsvc.storage.shown import SHOWN_BYTES, ShownDicts
from support.shownkit import FIELDS, decoded, json_of, stored


def test_a_record_that_may_hold_a_lone_surrogate_in_a_page_with_texts_is_its_kept_dict():
    dicts = ShownDicts(decoded, capacity=8, window=64, fields=FIELDS)
    odd = stored(1, "\ud800,b")  # may hold a lone surrogate: never sent as its text, always a dict
    page = [odd, stored(2)]
    first = dicts.page([1, 2], page, texts=True)
    assert first[0] == {"id": 1, "name": "\ud800,b"} and type(first[0]) is dict
    assert list(dicts.ids) == [1, 2] and dicts.refused == 0  # `one`'s rule, and the last's
    assert dicts.one(1, odd) is first[0]  # kept: the same dict for this stored version
    again = dicts.page([1, 2], page, texts=True)
    assert again[0] is first[0] and again[1].text == json_of(2)


def test_a_kept_page_whose_records_changed_is_kept_again_at_that_ask():
    """A stale kept page is made again and kept at that ask even when the ask is not a
    second one (64 other pages since emptied the window of first asks)."""
    dicts = ShownDicts(decoded, capacity=100, window=64)
    one, two = stored(1), stored(2)
    dicts.page([1, 2], [one, two])
    dicts.page([1, 2], [one, two])  # the second ask: kept
    for n in range(64):  # 64 other pages asked once: the pages' window of first asks is emptied
        dicts.page([n + 100], [stored(n + 100)])
    new = stored(2, "new")
    changed = dicts.page([1, 2], [one, new])  # the kept page is stale: made again and kept at once
    for id_ in (1, 2):
        dicts.forget(id_)
    again = dicts.page([1, 2], [one, new])  # no single dict left: only a kept page gives these
    assert again[0] is changed[0] and again[1] is changed[1]


def sized(id_: int, size: int) -> bytes:
    """A stored record of exactly `size` bytes."""
    base = len(stored(id_, "x"))
    out = stored(id_, "x" * (1 + size - base))
    assert len(out) == size
    return out


def test_a_stored_record_of_shown_bytes_is_kept_and_one_byte_longer_is_not():
    dicts = ShownDicts(decoded, capacity=8, window=64)
    at, over = sized(1, SHOWN_BYTES), sized(2, SHOWN_BYTES + 1)
    first = dicts.one(1, at)
    assert dicts.one(1, at) is first and 1 in dicts.ids
    assert dicts.one(2, over) is not dicts.one(2, over)  # never kept, never an error
    assert list(dicts.ids) == [1] and dicts.refused == 0


def test_a_longer_version_of_a_kept_record_drops_its_kept_dict():
    dicts = ShownDicts(decoded, capacity=8, window=64)
    small = stored(1)
    dicts.one(1, small)
    dicts.one(2, stored(2))
    big = sized(1, SHOWN_BYTES + 1)
    assert dicts.one(1, big)["name"].startswith("xx")
    assert list(dicts.ids) == [2]  # the small version's dict is not kept beside the big one
