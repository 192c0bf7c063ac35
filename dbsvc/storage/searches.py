"""Text search's matches kept between lists, brought up to date from the table's rows.

A search of several words (or of a prefix held by many words) costs a pass over the
cheapest word's ids at every list: `search=a b` at 1,000,000 posts intersects postings of
6,720 and 25,779 ids (143 us) to find 168 matches, and `total` needs them all. `matches`
keeps a query's matches in its table's `WordIndex` (`kept` or `cheap`: query -> (matches,
the table's row count then, the last row object then, the ids its match read)) and, at the
next list, applies only the rows written since (`Table.rows`, one (id, stored record or None, previous) a write): a
record there whose `@search` fields now match is added, any other is taken out. Rows are
replayed only while they are few (each one cuts a record's text into words again, the
tokenizer the index uses, dbsvc/textsearch.py), else the query is matched again.

Invariant: a kept entry's matches are exactly the ids whose live record matched at its row
count. It is trusted only while the table's rows still hold its last row object at the same
place: an `undo_last` pops rows, so rows popped (and others appended in their place) make
it stale and it is matched again. A new epoch (compaction, a restore) is a new table with a
new index, and `WordIndex.build` (a snapshot's load) clears both pools.

Every query is kept but one word's postings as they are (one word holding one posting set:
`match` copies it, and its count is that set's size), in one of two pools of its table's
`WordIndex`, by the ids its match read first (words.py `match_costed`, which expands each
query word once): KEEP_AT ids or more in `kept`, at most KEPT_SEARCHES queries, the next one
dropping them all (each set no larger than its cheapest word's postings); fewer in `cheap`,
at most CHEAP_KEPT queries, the next one dropping the oldest (each set under KEEP_AT ids when
matched, and never more than its cheapest word's postings). Two pools, so that many cheap
queries never push the costly ones out: a cheap query is kept because a match made afresh
costs most of its list at 20,000 posts (the expansions, the sort, the narrowing: ~13 us of a
~50 us list), where its matches are a few ids (bench/README.md, session 10).

Rows are replayed while they cost no more than matching again: (rows since) * REPLAY_COST
<= the ids the match read (kept in the entry), or KEEP_AT when it read fewer (a match costs
~10 us at any size, its expansions and narrowing: about two rows cut into words), else the
query is matched again. A replayed row is first tested by its folded text (a query word is
a prefix of one of its words, so a substring of that text): a row without one of the query
words, most rows, costs a fold (~0.3 us for a 300-character post) and no cut into words.

A list in id order (no sort, no other condition: bucketplan.py `_search_plan`) asks
`in_id_order`: the kept matches sorted by id, made by the first such list and kept beside the
entry in `WordIndex.in_order` (a replayed row moves its id in it by a bisect), so its page is
a slice, where sorting the matches at every list read every match's id object: at 1,000,000
posts the matrix's query holds 168 matches scattered over the heap, and their sort was ~8% of
the served list's CPU, the plan's largest step (bench/README.md, session 11). Invariant: an
`in_order` entry exists only beside a `kept` or `cheap` entry of the same query and holds its
matches sorted; it is dropped with it.

The sets and lists handed out are the kept ones: callers read them during one synchronous
call and never change them (seek.py, conditions.py, bucketplan.py). Imports rows.py,
table.py and words.py (types), textsearch.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any

from dbsvc.storage.rows import unpack
from dbsvc.storage.table import Row, Table
from dbsvc.storage.words import WordIndex
from dbsvc.textsearch import fold
from dbsvc.textsearch import matches as text_matches

KEEP_AT = 1024  # ids a query's match reads first for it to be kept among the costly ones
KEPT_SEARCHES = 16  # costly queries kept a table: the next one drops them all
CHEAP_KEPT = 64  # cheaper queries kept a table: the next one drops the oldest
REPLAY_COST = 500  # a row replayed costs about this many ids matched (a record's text cut into words)


def matches(table: Table, query: tuple[str, ...]) -> set[Any]:
    """The live ids whose `@search` fields match every word of `query` (words.py `match`),
    kept and brought up to date when that is cheaper (module docstring). Read-only."""
    index = table.words
    if index is None:
        return set()
    rows = table.rows
    pool = index.kept
    entry = pool.get(query)
    if entry is None:
        pool = index.cheap
        entry = pool.get(query)
    if entry is not None:
        found, count, last, cost = entry
        if count <= len(rows) and (count == 0 or rows[count - 1] is last):
            if count == len(rows):
                return found
            if (len(rows) - count) * REPLAY_COST <= max(cost, KEEP_AT):
                _replay(index, query, found, rows[count:])
                pool[query] = (found, len(rows), rows[-1], cost)
                return found
        del pool[query]
        index.in_order.pop(query, None)
    found, cost, alone = index.match_costed(query)
    if not alone:
        entry = (found, len(rows), rows[-1] if rows else None, cost)
        if cost >= KEEP_AT:
            if len(index.kept) >= KEPT_SEARCHES:
                for dropped in index.kept:
                    index.in_order.pop(dropped, None)
                index.kept.clear()
            index.kept[query] = entry
        else:
            if len(index.cheap) >= CHEAP_KEPT:
                oldest, _ = index.cheap.popitem(last=False)
                index.in_order.pop(oldest, None)
            index.cheap[query] = entry
    return found


def in_id_order(table: Table, query: tuple[str, ...]) -> list[Any] | None:
    """`matches(table, query)` sorted by id, kept beside them (module docstring), or None
    for a query that is not kept (one word's postings as they are: the caller sorts)."""
    index = table.words
    if index is None:
        return None
    if query not in index.kept and query not in index.cheap and len(query) == 1 and len(index.expand(query[0])) == 1:
        return None  # one word's postings: never kept (`matches` would copy them, and seek.py again)
    found = matches(table, query)
    if query not in index.kept and query not in index.cheap:
        return None
    order = index.in_order.get(query)
    if order is None:
        order = index.in_order[query] = sorted(found)
    return order


def _replay(index: WordIndex, query: tuple[str, ...], found: set[Any], rows: list[Row]) -> None:
    """Bring a kept query's matches (and their id order, when kept) to the end of `rows`,
    the rows written since they were matched, in order: an id's last row wins."""
    positions = index.positions
    order = index.in_order.get(query)
    for id_, record, _previous in rows:
        values = unpack(record) if record is not None else None
        texts = [values[p] for p in positions] if values is not None else []
        # A query word is a prefix of a word of the folded text, so a substring of it:
        # a text without one of them is no match (most rows), found without cutting it.
        folded = fold(" ".join([text for text in texts if text]))
        if all(word in folded for word in query) and text_matches(texts, query):
            if id_ not in found:
                found.add(id_)
                if order is not None:
                    insort(order, id_)
        elif id_ in found:
            found.discard(id_)
            if order is not None:
                del order[bisect_left(order, id_)]
