"""Text search's words: the one tokenizer of `@search` fields and of `search=` queries.

Storage's inverted index (storage/words.py), the generated matcher of /subscribe and
/live-query (compiler/search.py) and the `as_of` lists all call `words` here, so a record
is cut into words one way everywhere (docs/guide/queries.md#text-search, docs/decisions.md
"Text search").

`words(text)`, in order:

1. Unicode NFKD (compatibility decomposition: `ﬁ` -> `fi`, `²` -> `2`, `é` -> `e` + U+0301);
2. every combining mark dropped (general category M*: accents, so `é` -> `e`);
3. `str.casefold()` (full case folding: `Straße` -> `strasse`, `ΣΑΣ` -> `σασ`);
4. split on every character that is not a letter or a number (general categories L* and
   N* are word characters; punctuation, symbols, spaces and controls separate words).

So `"L'Été 2024!"` is the words `l`, `ete`, `2024`; an apostrophe splits (`don't` is `don`
and `t`); digits are words like letters (`v2` is one word); a run of CJK ideographs with no
space between them is one word (they are letters), so a search finds it by its start only.

Matching: a query word matches a record when it is a prefix of some word of the record's
`@search` fields; a record matches a query when every query word does (`matches`).

Query limits (`query_words`): at most MAX_QUERY_WORDS distinct words, each at most
MAX_WORD characters (after folding), else 400 `bad_query`; a query with no word at all
(empty, or only punctuation) is 400 too. So one request costs at most 16 prefix lookups.

Imports errors only: pure functions, no state.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from dbsvc.errors import BadQuery

MAX_QUERY_WORDS = 16
MAX_WORD = 64
_SHOW = 60  # characters of a query shown in a message

# A word: a run of characters of general category L* or N*. `[^\W_]` is exactly those in
# Python's `re` (str.isalnum; tests/compiler/test_search.py checks every code point).
_WORD = re.compile(r"[^\W_]+")
# The same for ASCII text, as bytes: every ASCII character that is not a letter or a digit
# becomes a space, so `split()` cuts the words. A write of a record with a 300-character
# `@search` body spent about a tenth of its CPU in the regex (bench/README.md, "The write
# path on the peers' blog post"); this is about three times faster and cuts the same words.
_ASCII_SEPARATORS = bytes(c for c in range(128) if not chr(c).isalnum())
_ASCII_SPACES = bytes.maketrans(_ASCII_SEPARATORS, b" " * len(_ASCII_SEPARATORS))
# The same but for "\n", kept: the line break between records of `ascii_word_sets`.
_ASCII_LINES = bytes.maketrans(_ASCII_SEPARATORS.replace(b"\n", b""), b" " * (len(_ASCII_SEPARATORS) - 1))


def fold(text: str) -> str:
    """Steps 1-3 of the module docstring: NFKD, combining marks dropped, case folded."""
    if text.isascii():
        return text.lower()  # ASCII: NFKD changes nothing, no marks, casefold is lower
    decomposed = unicodedata.normalize("NFKD", text)
    if not decomposed.isascii():
        category = unicodedata.category
        decomposed = "".join(c for c in decomposed if category(c)[0] != "M")
    return decomposed.casefold()


def words(text: str | None) -> list[str]:
    """The words of `text` in order, repeats kept (module docstring); None has none."""
    if not text:
        return []
    return _WORD.findall(fold(text))


def word_set(texts: Iterable[str | None]) -> set[str]:
    """The distinct words of several texts (a record's `@search` fields), cut as one text
    joined by spaces (a separator: no word spans two fields), one fold and one regex pass."""
    text = " ".join([text for text in texts if text])
    if text.isascii():  # fold is lower; the words are the runs of [a-z0-9]
        return set(text.lower().encode("ascii").translate(_ASCII_SPACES).decode("ascii").split())
    return set(_WORD.findall(fold(text)))


def ascii_word_sets(lines: bytes) -> list[set[str]] | None:
    """`word_set` of each line of ASCII text, in one pass for all of them: each line holds a
    record's texts joined by spaces, lines joined by "\n" (storage/words.py `build_stored`,
    a snapshot's open: 2,048 records a call). None unless the text is ASCII; a "\n" inside a
    record's text would cut it in two, so the caller passes none (there, a JSON string's
    text holding one escapes it)."""
    if not lines.isascii():
        return None
    return list(map(set, map(str.split, lines.lower().translate(_ASCII_LINES).decode("ascii").split("\n"))))


def matches(texts: Iterable[str | None], query: tuple[str, ...]) -> bool:
    """Whether every query word is a prefix of some word of `texts`."""
    if not query:
        return True
    found = word_set(texts)
    for q in query:
        if q not in found and not any(w.startswith(q) for w in found):
            return False
    return True


def query_words(text: str) -> tuple[str, ...]:
    """A `search=` value -> its distinct words in order, or BadQuery (module docstring)."""
    shown = repr(text if len(text) <= _SHOW else text[:_SHOW] + "...")
    found = list(dict.fromkeys(words(text)))
    if not found:
        raise BadQuery(
            f"search {shown} holds no word: expected one or more words of letters or digits "
            f"(at most {MAX_QUERY_WORDS}, each a prefix of a word of the record)"
        )
    if len(found) > MAX_QUERY_WORDS:
        raise BadQuery(f"search {shown} holds {len(found)} words: expected at most {MAX_QUERY_WORDS}")
    for word in found:
        if len(word) > MAX_WORD:
            raise BadQuery(
                f"search word {word[:_SHOW] + '...'!r} is {len(word)} characters long: "
                f"expected at most {MAX_WORD} characters a word"
            )
    return tuple(found)
