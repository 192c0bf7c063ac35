"""A sorted multiset kept as a list of sorted sublists: the primary key's order, null keys, words.

`SortedIndex` keeps its entries in ascending order as a list of sorted sublists (the
layout of the `sortedcontainers` package): each sublist holds at most 2 * LOAD entries and
its last entry is kept apart (`maxes`). Finding a sublist is a bisect over the maxes
(O(log n)), inserting or removing inside it a list shift of at most 2 * LOAD pointers, so an
update costs O(log n + LOAD) instead of the O(n) shift of one flat list; iterating from
either end costs O(1) to start and O(1) per entry.

An entry found by its position (`slice`: an unsorted list's page at an offset) is found
by a walk of the sublists' lengths from the first while it lies within the first FOUND_FROM
entries (a first page touches one sublist), and past them by a descent of a Fenwick tree of
those lengths (fenwick.py `find`, O(log m) for m sublists, where the walk was O(m): about
2,000 sublists at 1,000,000 ids, bench/README.md, wt-offs session 24). The tree is built by
the first such slice and kept up to date on every entry added or removed (the id of a new
record appended to the last sublist: one slot changed, or none), and dropped when the
sublists themselves change (a split, a sublist emptied, a fill): the next deep slice builds
it again, O(m), once in LOAD or so appends.

The sort fields' (key, id) index (indexes.py `OrderedIndex`) keeps the same layout in
parallel sublists and walks them with this module's `sublist_slice` (a deep one:
`counted_slice`, the same descent over its own tree), `backwards` and the spans between
two (sublist, entry) positions (`span_pieces`, `span_backwards`).
Plain data: no I/O, no model knowledge; of dbsvc it imports fenwick.py alone (plain data too).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from typing import Any

from dbsvc.storage.fenwick import Fenwick

LOAD = 512
FOUND_FROM = 2 * LOAD  # a slice starting at this position or past it: the Fenwick descent (module docstring)


class SortedIndex:
    """A sorted multiset of comparable entries (tuples or bare ids).

    `share()` hands out the sublists as they are, in O(number of sublists), for a reader
    that walks them later (online compaction's cut, which used to copy 1,000,000 ids on the
    loop): until `unshare()`, a sublist is copied before its first change, so what was handed
    out never changes.
    """

    __slots__ = ("_counts", "_len", "_lists", "_maxes", "_shared")

    def __init__(self, entries: Iterable[Any] = ()) -> None:
        self._fill(sorted(entries))

    @classmethod
    def from_sorted(cls, items: list[Any]) -> SortedIndex:
        """The index of `items`, which the caller knows to be in ascending order already
        (not checked): a snapshot's ids, or pairs a stable sort by key just ordered."""
        index = cls.__new__(cls)
        index._fill(items)
        return index

    def _fill(self, items: list[Any]) -> None:
        self._lists: list[list[Any]] = [items[i : i + LOAD] for i in range(0, len(items), LOAD)]
        self._maxes: list[Any] = [sub[-1] for sub in self._lists]
        self._len = len(items)
        self._counts: Fenwick | None = None  # the sublists' lengths, built by a deep `slice`
        self._shared: set[int] | None = None  # id() of the sublists handed out by `share`

    def share(self) -> list[list[Any]]:
        """The sublists as they stand; they stay as they are until `unshare` (class doc)."""
        self._shared = set(map(id, self._lists))
        return list(self._lists)

    def unshare(self) -> None:
        """The reader of `share` is done: sublists change in place again."""
        self._shared = None

    def _own(self, i: int) -> list[Any]:
        """Sublist `i`, ready to change: a copy of it if it was handed out by `share`. (A
        handed-out sublist is alive, held by its reader, so no new list can have its id.)"""
        sub = self._lists[i]
        if self._shared and id(sub) in self._shared:
            sub = self._lists[i] = list(sub)
        return sub

    @property
    def sublists(self) -> list[list[Any]]:
        """The sorted sublists (the layout in the module docstring): read them, never write them."""
        return self._lists

    def __len__(self) -> int:
        return self._len

    def add(self, entry: Any) -> None:
        maxes = self._maxes
        if not maxes:
            self._lists.append([entry])
            maxes.append(entry)
        else:
            i = bisect_right(maxes, entry)
            if i == len(maxes):
                i -= 1
                sub = self._own(i)
                sub.append(entry)
                maxes[i] = entry
            else:
                sub = self._own(i)
                insort(sub, entry)
            if len(sub) > 2 * LOAD:
                self._lists[i : i + 1] = [sub[:LOAD], sub[LOAD:]]
                maxes[i : i + 1] = [sub[LOAD - 1], sub[-1]]
                self._counts = None  # the sublists moved
            elif self._counts is not None:
                self._counts.add(i, 1)
        self._len += 1

    def extend_past(self, entries: list[Any]) -> None:
        """`add` of each of `entries`, ascending past the last entry held (one at least): runs.py."""
        last = len(self._maxes) - 1
        sub = self._own(last)
        sub.extend(entries)
        if len(sub) > 2 * LOAD:
            self._counts = None  # split below: the sublists move
        elif self._counts is not None:
            self._counts.add(last, len(entries))
        while len(sub) > 2 * LOAD:
            self._lists[-1:], self._maxes[-1:] = [sub[:LOAD], sub[LOAD:]], [sub[LOAD - 1], sub[-1]]
            sub = self._lists[-1]
        self._maxes[-1] = sub[-1]
        self._len += len(entries)

    def remove(self, entry: Any) -> None:
        """Remove one occurrence of `entry`; KeyError if it is absent."""
        maxes = self._maxes
        i = bisect_left(maxes, entry)
        if i == len(maxes):
            raise KeyError(entry)
        sub = self._lists[i]
        j = sorted_position(sub, entry)
        if j < 0:
            raise KeyError(entry)
        sub = self._own(i)
        del sub[j]
        self._len -= 1
        if not sub:
            del self._lists[i]
            del maxes[i]
            self._counts = None  # the sublists moved
        else:
            maxes[i] = sub[-1]
            if self._counts is not None:
                self._counts.add(i, -1)

    def __contains__(self, entry: Any) -> bool:
        i = bisect_left(self._maxes, entry)
        if i == len(self._maxes):
            return False
        sub = self._lists[i]
        return sorted_position(sub, entry) >= 0

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self._lists)

    def __reversed__(self) -> Iterator[Any]:
        return backwards(self._lists)

    def slice(self, start: int, stop: int) -> list[Any]:
        """Entries [start, stop) by position: walked to from the first sublist within the
        first FOUND_FROM entries, found by the Fenwick descent past them (module docstring),
        O(log m + stop - start)."""
        if start < FOUND_FROM or stop <= start:
            return sublist_slice(self._lists, start, stop)
        if start >= self._len:
            return []
        counts = self._counts
        if counts is None:
            counts = self._counts = Fenwick(map(len, self._lists))
        return counted_slice(self._lists, counts, start, stop)

    def head_after(self, entry: Any, skip: int, count: int) -> list[Any]:
        """The entries after `entry` (present or not), ascending, from the `skip`-th of them,
        at most `count`: `iter_after`'s seek with the page copied by a slice or two instead
        of stepped through a chain and an islice (a cursor's page in id order, seek.py)."""
        lists = self._lists
        i = bisect_right(self._maxes, entry)
        if i == len(lists) or count <= 0:
            return []
        j = bisect_right(lists[i], entry) + skip
        while j >= len(lists[i]):  # the skip runs past this sublist
            j -= len(lists[i])
            i += 1
            if i == len(lists):
                return []
        out = lists[i][j : j + count]
        while len(out) < count and i + 1 < len(lists):  # the page runs on into the next sublists
            i += 1
            out += lists[i][: count - len(out)]
        return out

    def iter_after(self, entry: Any) -> Iterator[Any]:
        """The entries after `entry` (present or not), ascending: a seek, O(log n) to start."""
        lists = self._lists
        i = bisect_right(self._maxes, entry)
        if i == len(lists):
            return iter(())
        sub = lists[i]
        return chain(islice(sub, bisect_right(sub, entry), None), chain.from_iterable(islice(lists, i + 1, None)))


def own_ints(ids: list[Any]) -> list[Any]:
    """`ids` with each int past CPython's small ints (-5..256, shared) a new object made
    here, in list order, equal to the old; `ids` itself when they are not all machine ints
    (strings, uuids, ints past 64 bits), which stay the objects they were.

    Why: a bulk-built index holds the table's id objects, which a snapshot's open made in
    id order between its other objects (two neighbours ~680 bytes apart at 1,000,000
    posts). Walked in another order (a sort field's), each id of a page is then a read of
    its own cache line somewhere in the heap; ids made afresh in the index's order lie
    side by side, a page's 21 of them in a few lines. A number-keyed sort field's
    `OrderedIndex.from_columns` uses it; hash buckets do not: 32 bytes a record each,
    and both together sat at the 5% RSS limit (docs/decisions.md and bench/README.md,
    "Own ints"). `array.tolist` makes each a new object at C speed (`i + 0` does too,
    ~1.5x slower; `int(i)` returns `i` itself)."""
    try:
        return array("q", ids).tolist()
    except (TypeError, OverflowError):
        return ids


def sorted_position(items: list[Any], entry: Any) -> int:
    """Where `entry` is in the ascending list `items`, or -1."""
    i = bisect_left(items, entry)
    return i if i < len(items) and items[i] == entry else -1


def sublist_slice(lists: list[list[Any]], start: int, stop: int) -> list[Any]:
    """Entries [start, stop) by position of the concatenation of `lists`."""
    out: list[Any] = []
    pos = 0
    for sub in lists:
        n = len(sub)
        if pos + n > start and pos < stop:
            out.extend(sub[max(0, start - pos) : stop - pos])
        pos += n
        if pos >= stop:
            break
    return out


def counted_slice(lists: list[list[Any]], counts: Fenwick, start: int, stop: int) -> list[Any]:
    """Entries [start, stop) by position of the concatenation of `lists`, `start` under
    their total, found by a descent of `counts` (the lists' lengths, up to date) instead of
    a walk from the first: `SortedIndex.slice` and a sort field's `OrderedIndex.ids_slice`
    past FOUND_FROM."""
    i, j = counts.find(start)
    out = lists[i][j : j + stop - start]
    left = stop - start - len(out)
    while left > 0 and i + 1 < len(lists):  # the page runs on into the next sublists
        i += 1
        piece = lists[i][:left]
        out += piece
        left -= len(piece)
    return out


def backwards(lists: list[list[Any]]) -> Iterator[Any]:
    """The entries of the concatenation of `lists`, last first."""
    return chain.from_iterable(map(reversed, reversed(lists)))


def span_backwards(lists: list[Any], start: tuple[int, int], stop: tuple[int, int]) -> Iterator[Any]:
    """The entries of `lists` (sublists) at positions [start, stop), last first, lazily: the
    two ends' parts copied and reversed, the sublists between them reversed in place of a
    list of them (`span_pieces` copies that list: O(n / LOAD) for a span over a whole index)."""
    (i1, j1), (i2, j2) = start, stop
    if (i2, j2) <= (i1, j1):
        return iter(())
    if i1 == i2:
        return reversed(lists[i1][j1:j2])
    n = len(lists)
    pieces: list[Iterable[Any]] = []
    if i2 < n and j2:
        pieces.append(reversed(lists[i2][:j2]))
    pieces.append(chain.from_iterable(map(reversed, islice(reversed(lists), n - i2, n - i1 - 1))))
    pieces.append(reversed(lists[i1][j1:]))
    return chain.from_iterable(pieces)


def span_pieces(lists: list[Any], start: tuple[int, int], stop: tuple[int, int]) -> list[Any]:
    """The slices of `lists` (sublists) that cover positions [start, stop), in order: the
    two ends copied, the sublists between them as they are (one list slice, no Python loop)."""
    (i1, j1), (i2, j2) = start, stop
    if (i2, j2) <= (i1, j1):
        return []
    if i1 == i2:
        return [lists[i1][j1:j2]]
    out = [lists[i1][j1:]]
    out += lists[i1 + 1 : i2]
    if i2 < len(lists) and j2:
        out.append(lists[i2][:j2])
    return out
