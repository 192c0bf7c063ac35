"""Second-ask admission: whether a full cache keeps what it has just made.

A cache that keeps everything it makes pays, for each thing asked once, its insertion and
the eviction of something older (freeing that entry's cold objects). Reads spread over many
more targets than a cache holds (ids or pages at random at 1,000,000 records; pages at
5,000 cursors) ask most things once, so that bookkeeping buys nothing. `SecondAsk`
remembers the keys made once lately and says "keep" only for a key it already holds: a
target asked twice within `window` misses is kept from its second ask on, one asked once
costs a set's membership test and insertion, and nothing is evicted for it.

Used by the record caches of both layers (storage/shown.py's dicts, readcache.py's JSON)
and by the page caches over them (readcache.py `PresentPages`, the kept pages of
`EncodedRecords` and `ShownDicts`): one rule, written once (docs/decisions.md, "Pages at
many targets").

The window is a set emptied when it reaches `window` keys: memory is bounded by `window`
keys, and the cost is one hash of the key a miss. A key asked again after more than
`window` other misses would have left a FIFO cache of that size before its next ask in
any case, so a page cache whose window is its own capacity loses no hit it could have had.

Plain data; imports nothing from dbsvc.
"""

from __future__ import annotations

from collections.abc import Hashable


class SecondAsk:
    """The keys missed once among the last `window` misses; `admits` answers whether to keep."""

    __slots__ = ("_seen", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self._seen: set[Hashable] = set()

    def __len__(self) -> int:
        """Keys held now (at most `window`)."""
        return len(self._seen)

    def admits(self, key: Hashable) -> bool:
        """True when `key` was missed once already within the window (keep it now); else
        remember it (emptying the set first when it holds `window` keys) and say False."""
        seen = self._seen
        if key in seen:
            return True
        if len(seen) >= self.window:
            seen.clear()
        seen.add(key)
        return False
