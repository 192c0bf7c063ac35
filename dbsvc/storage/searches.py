"""Text search's matches kept between lists, brought up to date from the table's rows.

A search of several words (or of a prefix held by many words) costs a pass over the
cheapest word's ids at every list: `search=a b` at 1,000,000 posts intersects postings of
6,720 and 25,779 ids (143 us) to find 168 matches, and `total` needs them all. `matches`
keeps such a query's matches in its table's `WordIndex` (`kept`: query -> (matches, the
table's row count then, the last row object then)) and, at the next list, applies only the
rows written since (`Table.rows`, one (id, stored record or None, previous) a write): a
record there whose `@search` fields now match is added, any other is taken out. Rows are
replayed only while they are few (each one cuts a record's text into words again, the
tokenizer the index uses, dbsvc/textsearch.py), else the query is matched again.

Invariant: a kept entry's matches are exactly the ids whose live record matched at its row
count. It is trusted only while the table's rows still hold its last row object at the same
place: an `undo_last` pops rows, so rows popped (and others appended in their place) make
it stale and it is matched again. A new epoch (compaction, a restore) is a new table with a
new index, and `WordIndex.build` (a snapshot's load) clears `kept`.

Kept only for queries whose match reads KEEP_AT ids or more and is not one word's postings
as they are (one word holding one posting set: `match` copies it, and its count is that
set's size): at most KEPT_SEARCHES queries a table, the next one dropping them all, so the
memory is bounded by KEPT_SEARCHES sets, each no larger than its cheapest word's postings.

The sets handed out are the kept ones: callers read them during one synchronous call and
never change them (seek.py, conditions.py). Imports rows.py, table.py (types), textsearch.
"""

from __future__ import annotations

from typing import Any

from dbsvc.storage.rows import unpack
from dbsvc.storage.table import Table
from dbsvc.textsearch import matches as text_matches

KEEP_AT = 1024  # ids a query's match reads first before its matches are kept
KEPT_SEARCHES = 16  # queries kept a table
REPLAY_COST = 500  # a row replayed costs about this many ids matched (a record's text cut into words)


def matches(table: Table, query: tuple[str, ...]) -> set[Any]:
    """The live ids whose `@search` fields match every word of `query` (words.py `match`),
    kept and brought up to date when that is cheaper (module docstring). Read-only."""
    index = table.words
    if index is None:
        return set()
    rows = table.rows
    kept = index.kept.get(query)
    if kept is not None:
        found, count, last = kept
        if count <= len(rows) and (count == 0 or rows[count - 1] is last):
            if count == len(rows):
                return found
            if (len(rows) - count) * REPLAY_COST <= max(len(found), KEEP_AT):
                positions = index.positions
                for id_, record, _previous in rows[count:]:  # in order: an id's last row wins
                    values = unpack(record) if record is not None else None
                    if values is not None and text_matches([values[p] for p in positions], query):
                        found.add(id_)
                    else:
                        found.discard(id_)
                index.kept[query] = (found, len(rows), rows[-1])
                return found
        del index.kept[query]
    found, cost, alone = index.match_costed(query)  # each query word expanded once
    if cost >= KEEP_AT and not alone:
        if len(index.kept) >= KEPT_SEARCHES:
            index.kept.clear()
        index.kept[query] = (found, len(rows), rows[-1] if rows else None)
    return found
