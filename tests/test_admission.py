"""Second-ask admission (dbsvc/admission.py `SecondAsk`): the one rule the record caches
of storage and the app and the page caches over them share. Fixture-free."""

from __future__ import annotations

from dbsvc.admission import SecondAsk


def test_a_key_is_admitted_on_its_second_ask_and_on_every_ask_after():
    asked = SecondAsk(4)
    assert [asked.admits("a"), asked.admits("a"), asked.admits("a")] == [False, True, True]
    assert asked.admits("b") is False and len(asked) == 2


def test_the_window_is_emptied_when_it_holds_window_keys():
    asked = SecondAsk(3)
    assert [asked.admits(k) for k in (1, 2, 3)] == [False, False, False]
    assert len(asked) == 3 and asked.admits(3) is True  # a key held is admitted, nothing cleared
    assert asked.admits(4) is False and len(asked) == 1  # a new key at `window` empties it first
    assert asked.admits(1) is False and asked.admits(4) is True


def test_keys_are_compared_by_equality_so_tuples_of_pairs_work():
    asked = SecondAsk(8)
    assert asked.admits(("/api/post", (("cursor", "x"),))) is False
    assert asked.admits(("/api/post", (("cursor", "x"),))) is True
    assert asked.admits(("/api/post", (("cursor", "y"),))) is False
