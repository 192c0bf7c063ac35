"""The write path's fast cuts hold the behaviour of the slow ones they replaced (issue 36 item 3).

- `word_set` of ASCII text (a `@search` field's words, cut on every write) takes a byte
  translation instead of the Unicode regex: the same distinct words for every ASCII
  character in every position, and for mixed ASCII and non-ASCII fields.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from dbsvc.textsearch import word_set, words

ASCII = "".join(map(chr, range(128)))


def _by_regex(texts: list[str | None]) -> set[str]:
    """The words as the Unicode regex cuts them (`words`, joined by a space)."""
    return set(words(" ".join(t for t in texts if t)))


def test_word_set_of_every_ascii_character_is_the_regex_s():
    assert word_set([ASCII]) == _by_regex([ASCII]) == {"0123456789", "abcdefghijklmnopqrstuvwxyz"}
    spaced = "x".join(ASCII)  # each character alone between two word characters
    assert word_set([spaced]) == _by_regex([spaced])
    assert word_set(["Don't STOP", None, "", "v2_beta\tCafe\x1fx"]) == {"don", "t", "stop", "v2", "beta", "cafe", "x"}


@given(st.lists(st.one_of(st.none(), st.text(alphabet=st.characters(max_codepoint=127)), st.text()), max_size=4))
def test_word_set_agrees_with_the_regex_on_any_fields(texts):
    assert word_set(texts) == _by_regex(texts)
    assert all(re.fullmatch(r"[^\W_]+", w) for w in word_set(texts))
