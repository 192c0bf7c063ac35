"""Text search's inverted index: word -> ids, and the words in order for prefix lookups.

A model with `@search` fields has one `WordIndex` in its `Table` (table.py), kept like the
other indexes: built when a snapshot is loaded (`build`), changed by every insert, replace,
delete and undo (`add` / `remove` / `swap`), so it is right after open, compaction,
a restore and a restart as the live records are. Words are dbsvc/textsearch.py's: a
record's entry is the set of distinct words of its `@search` fields' values.

State::

    postings   word -> the ids of the live records holding it: a tuple while they are at
               most SMALL, a set past that (back to a tuple at SMALL // 2 or fewer)
    ordered    SortedIndex of the distinct words (sortedlist.py): a prefix is a range of it,
               a bisect then a walk while the words start with the prefix, never a scan
               of every word
    sets       word -> its ids, for the words whose ids are a set (the common words): the
               same set objects as in `postings`, so a write adds a record's common words
               by one probe each (most of a 300-character body's ~50 words)

Invariants: a word is in `ordered` exactly when `postings` holds it with at least one id;
`sets` holds exactly the words whose `postings` entry is a set, and the same set.

`match(query)`: the ids of the records every query word matches (a prefix of some word
of theirs). Each query word's cost is estimated first (the summed sizes of the id sets of
the words it is a prefix of); the cheapest word's ids are the candidates (a union at C speed
when it covers several words), then each next query word, cheapest first, narrows it: a query word that is a prefix of one word
of the index by intersecting with its ids (C speed, over the smaller side), one of several
words by intersecting with each of their id sets and joining the shares, or, when those
would cost more than UNION_FACTOR times testing each candidate against each of its words'
ids, by those tests. The cheapest word's ids are never copied when it covers one indexed
word: the first narrowing makes the new set (only a one-word query copies them, for the
caller to own). An empty set ends it at once. Cost O(the postings of the words the cheapest query word
covers + the narrowing), never a walk of every record; the dear case is a query of only
one-letter words, each the prefix of a large share of all words (bench/README.md).

Memory (bench/README.md, "Text search"): most distinct words of real text are rare (Zipf's
law), and an empty set alone is 216 bytes, so a word held by few records keeps them in a
tuple (48 bytes for one id, 8 more per id), changed by making a new one (at most SMALL
ids); a common word's ids are a set (an entry 16 bytes in a table at most 60 % full, so
about 27 to 53 bytes an id), where adding and removing one is O(1). Both answer `len`,
`in` and iteration, which is all `match` asks. A distinct word also costs its str, a dict
entry and an entry of `ordered`; the id objects are the records' own.

`kept` and `cheap` are storage/searches.py's: the matches of the queries lists asked (the
costly ones and the others), with the table's row count they were matched at, and
`in_order` the matches of those a list in id order asked, sorted (cleared by `build`;
searches.py keeps them current).

Imports sortedlist.py, keycut.py and rows.py (a stored record's texts) and the tokenizer only; no I/O.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from itertools import takewhile
from typing import Any

from dbsvc.storage.keycut import cutter
from dbsvc.storage.rows import scan
from dbsvc.storage.sortedlist import SortedIndex
from dbsvc.textsearch import ascii_word_sets, fold, word_set

SMALL = 8  # ids a word keeps in a tuple before they become a set
BLOCK = 2048  # stored records whose words `stored_words` finds in one pass
# A union of a prefix's id sets runs at C speed, several times faster an id than a Python
# test of each candidate against each set: the union is taken while it is at most this
# many times the tests' count (bench/README.md, "Text search").
UNION_FACTOR = 8
Ids = tuple[Any, ...] | set[Any]


class WordIndex:
    """The inverted index of one model's `@search` fields (module docstring)."""

    __slots__ = ("cheap", "in_order", "kept", "ordered", "positions", "postings", "sets")

    def __init__(self, positions: Sequence[int]) -> None:
        self.positions = tuple(positions)  # where the @search fields are in a record's values
        self.postings: dict[str, Ids] = {}
        self.sets: dict[str, set[Any]] = {}  # the set entries of `postings` (invariants)
        self.ordered = SortedIndex()
        # query -> (its matches, the table's row count then, its last row, the ids its match
        # read): searches.py, the costly queries in `kept` and the cheaper ones in `cheap`
        self.kept: dict[tuple[str, ...], tuple[set[Any], int, Any, int]] = {}
        self.cheap: OrderedDict[tuple[str, ...], tuple[set[Any], int, Any, int]] = OrderedDict()
        # query of `kept` or `cheap` -> its matches in id order (searches.py `in_id_order`)
        self.in_order: dict[tuple[str, ...], list[Any]] = {}

    def record_words(self, values: Sequence[Any]) -> set[str]:
        """The distinct words of a record's `@search` fields (its values in field order)."""
        return word_set(values[p] for p in self.positions)

    def build(self, records: Iterable[tuple[Any, Sequence[Any]]]) -> None:
        """Fill an empty index from (id, values) pairs: one sort of the words at the end."""
        record_words = self.record_words
        self._fill((id_, record_words(values)) for id_, values in records)

    def build_stored(self, ids: Sequence[Any], stored: Sequence[bytes], fields: Sequence[str]) -> None:
        """`build` from a snapshot's stored records (rows.py) of the model of `fields`, `ids`
        theirs in the same order: the same index, its words read from the records' texts
        (`stored_words`) with no record parsed where they are plain ASCII."""
        self._fill(zip(ids, self.stored_words(stored, fields)))

    def stored_words(self, stored: Sequence[bytes], fields: Sequence[str]) -> Iterator[set[str]]:
        """`record_words` of each stored record's values, a block of BLOCK records at a
        time: the `@search` values' texts cut out of each record (keycut.py) and, where
        every one of the block's is a JSON string of plain ASCII with no escape, their
        words found for the whole block in one pass (textsearch.py `ascii_word_sets`: such
        a string's text is its value between two quotes, which the pass reads as
        separators); any other block has each record's values parsed (`_values`: ValueError
        for a text that is not a record of `fields`).
        A snapshot's open spent ~6 us a blog post on `unpack` and `word_set`, ~4 this way
        (bench/README.md, "The snapshot step's keys cut out of the stored records", session 28)."""
        positions = sorted(set(self.positions))
        pattern = cutter(fields, positions)
        quotes = 2 * len(positions)  # a string without an escape holds two, a null none
        record_words = self.record_words
        for i in range(0, len(stored), BLOCK):
            block = stored[i : i + BLOCK]
            found = list(map(pattern.match, block))
            sets = None
            if None not in found:
                lines = b"\n".join(map(b" ".join, map(re.Match.groups, found)))  # type: ignore[arg-type]
                if b"\\" not in lines and lines.count(b'"') == quotes * len(block):
                    sets = ascii_word_sets(lines)
            yield from [record_words(_values(text, fields)) for text in block] if sets is None else sets

    def _fill(self, records: Iterable[tuple[Any, set[str]]]) -> None:
        """Fill an empty index from (id, its record's words) pairs: each word's ids
        gathered in a list, then made a tuple, or a set past SMALL; one sort of the words."""
        lists: dict[str, list[Any]] = {}
        get = lists.get
        for id_, found in records:
            for word in found:
                ids = get(word)
                if ids is None:
                    lists[word] = [id_]
                else:
                    ids.append(id_)
        self.postings = {w: tuple(ids) if len(ids) <= SMALL else set(ids) for w, ids in lists.items()}
        self.sets = {w: ids for w, ids in self.postings.items() if type(ids) is set}
        self.kept.clear()
        self.cheap.clear()
        self.in_order.clear()
        self.ordered = SortedIndex.from_sorted(sorted(self.postings))

    def add(self, id_: Any, values: Sequence[Any]) -> None:
        self._add_words(id_, self.record_words(values))

    def remove(self, id_: Any, values: Sequence[Any]) -> None:
        self._remove_words(id_, self.record_words(values))

    def swap(self, id_: Any, old: Sequence[Any], new: Sequence[Any]) -> None:
        """Move record `id_` from the words of `old` to those of `new`: only the changed ones.
        Only the changed fields are cut into words, and the unchanged ones only when a
        word that moved is found in their folded text: a PUT that rewrites a title beside
        an unchanged 300-character body cuts the body only when it may hold that word (a
        record's words are those of all its fields, so a word leaving the title stays
        while the body holds it)."""
        positions = self.positions
        changed = [p for p in positions if old[p] != new[p]]
        if not changed:
            return
        was = word_set(old[p] for p in changed)
        now = word_set(new[p] for p in changed)
        gone, came = was - now, now - was
        if not gone and not came:
            return
        if len(changed) < len(positions):
            # A moved word the unchanged fields hold stays. Only a moved word found in their
            # folded text can be one of their words (each word is a run of that text), so the
            # unchanged fields are cut into words only then: a PUT that renames a title beside
            # a 300-character body rarely cuts the body (bench/README.md, session 9).
            rest = [new[p] for p in positions if p not in changed]
            folded = fold(" ".join([text for text in rest if text]))
            if any(word in folded for word in gone) or any(word in folded for word in came):
                kept = word_set(rest)
                gone -= kept
                came -= kept
        self._remove_words(id_, gone)
        self._add_words(id_, came)

    def _add_words(self, id_: Any, found: Iterable[str]) -> None:
        # A common word (its ids a set) by one probe of `sets`; the rest, rare or new, after.
        get = self.sets.get
        rare = None
        for word in found:
            ids = get(word)
            if ids is not None:
                ids.add(id_)
            elif rare is None:
                rare = [word]
            else:
                rare.append(word)
        if rare is None:
            return
        postings = self.postings
        for word in rare:
            held = postings.get(word)
            if held is None:
                postings[word] = (id_,)
                self.ordered.add(word)
            elif len(held) < SMALL:
                postings[word] = (*held, id_)
            else:
                postings[word] = self.sets[word] = {*held, id_}

    def _remove_words(self, id_: Any, found: Iterable[str]) -> None:
        postings = self.postings
        for word in found:
            ids = postings[word]
            if type(ids) is set:
                ids.discard(id_)
                if len(ids) <= SMALL // 2:
                    postings[word] = tuple(ids)
                    del self.sets[word]
                continue
            left = tuple(i for i in ids if i != id_)
            if left:
                postings[word] = left
            else:
                del postings[word]
                self.ordered.remove(word)

    def __len__(self) -> int:
        """The number of distinct words."""
        return len(self.postings)

    def postings_count(self) -> int:
        """(word, id) pairs held: the figure the memory per posting is divided by."""
        return sum(map(len, self.postings.values()))

    def expand(self, prefix: str) -> list[Ids]:
        """The id sets of every word that starts with `prefix` (the word itself included)."""
        postings = self.postings
        out = []
        exact = postings.get(prefix)
        if exact is not None:
            out.append(exact)
        longer: Iterator[str] = takewhile(lambda w: w.startswith(prefix), self.ordered.iter_after(prefix))
        out.extend(map(postings.__getitem__, longer))
        return out

    def cost(self, query: Sequence[str]) -> int:
        """The ids `match` reads first: the cheapest query word's (the summed sizes of the
        id sets of the words it is a prefix of)."""
        return min((sum(map(len, self.expand(word))) for word in query), default=0)

    def match(self, query: Sequence[str]) -> set[Any]:
        """The ids every word of `query` matches (module docstring). A new set: the caller
        may keep or change it."""
        return self.match_costed(query)[0]

    def match_costed(self, query: Sequence[str]) -> tuple[set[Any], int, bool]:
        """(`match(query)`, `cost(query)`, whether the ids read first were one indexed word's
        postings, kept as they are), each query word expanded once: what storage/searches.py
        decides to keep a query by, where a `cost` then a `match` expanded every word twice
        (~40% of a search's plan at 20,000 posts, bench/README.md)."""
        expanded = sorted(((sum(map(len, sets)), i, sets) for i, sets in enumerate(map(self.expand, query))))
        if not expanded or expanded[0][0] == 0:
            return set(), 0, False
        cost, _i, first = expanded[0]
        alone = len(expanded) == 1 and len(first) == 1
        # The cheapest word's ids, not copied while they are one word's postings: the first
        # narrowing makes the new set, over the smaller side (at 1,000,000 posts two common
        # words' union copy was most of a search, bench/README.md "Lists of the present").
        found: Ids = first[0] if len(first) == 1 else set().union(*first)
        for size, _i, sets in expanded[1:]:
            if size == 0:
                return set(), cost, alone
            if len(sets) == 1:  # one word: C speed, over the smaller side when both are sets
                found = _intersection(found, sets[0])
            elif size <= UNION_FACTOR * len(found) * len(sets):  # each word's share, joined
                found = set().union(*[_intersection(found, ids) for ids in sets])
            else:  # a short prefix held by many words, against few candidates
                found = {id_ for id_ in found if any(id_ in ids for ids in sets)}
            if not found:
                return set(), cost, alone
        # a narrowing or the union made a new set; one word's postings alone are copied
        if alone or type(found) is not set:
            return set(found), cost, alone
        return found, cost, alone


def _values(text: bytes, fields: Sequence[str]) -> list[Any]:
    """`rows.unpack` of a snapshot's stored record, ValueError for a text that is not an
    object of `fields` (only a file made by hand holds one: snapshotload.py refuses it)."""
    record = scan(text)
    if type(record) is not dict or len(record) != len(fields):
        raise ValueError(f"a row is not an object of its {len(fields)} fields: {text[:60]!r}")
    return list(record.values())


def _intersection(a: Ids, b: Ids) -> set[Any]:
    """A new set of the ids in both: `set.intersection` walks the smaller of two sets, and
    the other argument whole when it is a tuple (at most SMALL ids)."""
    if type(a) is set:
        return a.intersection(b)
    if type(b) is set:
        return b.intersection(a)
    return set(a).intersection(b)
