"""Parts of an ordered index put in another order than the index's, made once and kept.

An `OrderedIndex` (indexes.py) holds its (key, id) entries in parallel sublists, keys
ascending and ids ascending in a run of equal keys. Some plans read part of it in another
order, and the same part again at the next list while nothing changed:

- a part (lo, hi) of sublist i with its ids sorted by id (`OrderedIndex.sorted_ids`);
- a part of sublist i in descending order: keys descending, ids ascending in a run (a page's
  batch, `OrderedIndex.batches_descending`; made by `descending_ids`);
- a span [start, stop) across sublists in descending order (a deep `offset`'s page widened
  to whole runs over a sublist's end, `OrderedIndex.ids_descending`: ordering it was half
  of that plan at 1,000,000 records, bench/README.md wt-plan1m);
- the runs of two entries or more (equal keys) of such a descending span, as bounds in it
  (`OrderedIndex.ties_descending`): the only parts of a page on several keys the other keys
  order (orders.py `page_in_order`); they depend on the first key alone, so the same rules
  keep them;
- a span [start, stop) across sublists (positions (sublist, entry), as indexes.py gives
  them) with its ids sorted by id (`OrderedIndex.span_by_id`, merged from the id-sorted
  parts above): a range's or prefix's ids in id order, so its first page is one bisect and a
  slice (seek.py `_first_ids`), where bisecting each part, joining and sorting them was a
  third of a 1M prefix page's plan.

`KeptParts` keeps them for one index. The rules that keep them true, held by the index's
writes: a change inside sublist i drops i's parts and every span that reaches i
(`changed`); a change to the sublists themselves (a split, a sublist removed, entries put in
place by runs.py, a fill) drops everything (`clear`), since positions of later sublists move.
An entry added to or removed from sublist i moves no position of another sublist, so
nothing else is dropped.

Bounds: at most SUBLISTS_KEPT sublists' parts (all dropped past that), PARTS_KEPT parts
of one sublist (that sublist's dropped past that), SPANS_KEPT spans (all dropped past
that). A span is kept only for the plans that ask for it, whose spans are small (seek.py
takes a window's first ids by id only when s * s <= 2 * end * n: 6,500 ids at 1,000,000
records and a page of 20), and its list holds the index's own id objects: 8 bytes an id.

The reads that make and find these parts (`KeptOrders`, a base of `OrderedIndex`) are
here too, so indexes.py holds the index's own order and its writes.

A page's batch at short runs (`head_descending` at a cursor at random) is kept only from
its second ask among the last ASKED_KEPT batches not kept (dbsvc/admission.py): pages at
many cursors ask each batch once, and keeping each evicted the parts of every other list.

Plain data: no I/O; imports only sortedlist.py (the slices of a span) and dbsvc/admission.py,
and fenwick.py for the annotations.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from itertools import chain, islice
from operator import eq, itemgetter
from typing import TYPE_CHECKING, Any

from dbsvc.admission import SecondAsk
from dbsvc.storage.sortedlist import span_pieces

if TYPE_CHECKING:
    from dbsvc.storage.fenwick import Fenwick

SUBLISTS_KEPT = 256  # sublists whose parts an index keeps
PARTS_KEPT = 4  # parts kept a sublist (the whole, a window's end, a page's batch): ~4 MB at most at LOAD 512
SPANS_KEPT = 16  # spans kept by id (a window's ids in id order)
RUNS_TAKEN = 4  # `descending_ids`: runs taken from the top by a bisect each before the rest is sorted
RUN_SHORT = 8  # `descending_ids`: a run shorter than this, and the rest is sorted at once
ASKED_KEPT = 256  # `head_descending`'s batches at short runs asked once lately (`KeptParts.asked`)
WHOLE_SUBLISTS = SUBLISTS_KEPT // 2  # an index of at most so many sublists keeps each one's descending order
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
Position = tuple[int, int]
BY_ID, DESCENDING, TIES = 0, 1, 2  # what a kept span holds: its ids by id, descending, its tied runs


class KeptParts:
    """One index's kept parts and spans (module docstring). `held` says whether anything
    is kept, so an index's write tests one attribute, not a call, when nothing is."""

    __slots__ = ("_parts", "_spans", "asked", "held", "whole")

    def __init__(self) -> None:
        self._parts: dict[int, dict[tuple[int, int, bool], list[Any]]] = {}  # sublist -> part -> ids
        # (start, stop, kind) -> ids by id, in the index's descending order, or its tied runs
        self._spans: dict[tuple[Position, Position, int], list[Any]] = {}
        self.held = False
        # (sublist, lo, hi) of short runs' batches made once and not kept (`_short_runs_head`):
        # only whether to keep one; no answer is read from it, so no write need drop it
        self.asked = SecondAsk(ASKED_KEPT)
        # sublists whose whole descending order was asked once since their last change
        # (`_whole_descending`: made at the second ask); at most one int a sublist
        self.whole: set[int] = set()

    def part(self, i: int, part: tuple[int, int, bool]) -> list[Any] | None:
        """Sublist i's kept part (lo, hi, descending), or None."""
        parts = self._parts.get(i)
        return None if parts is None else parts.get(part)

    def keep_part(self, i: int, part: tuple[int, int, bool], ids: list[Any]) -> list[Any]:
        kept = self._parts
        parts = kept.get(i)
        if parts is None:
            if len(kept) >= SUBLISTS_KEPT:
                kept.clear()
            parts = kept[i] = {}
        elif len(parts) >= PARTS_KEPT:
            parts.clear()
        parts[part] = ids
        self.held = True
        return ids

    def span(self, start: Position, stop: Position, kind: int = BY_ID) -> list[Any] | None:
        """What is kept of [start, stop): its ids sorted by id (BY_ID), in the index's
        descending order (DESCENDING), or that order's tied runs (TIES); or None."""
        return self._spans.get((start, stop, kind))

    def keep_span(self, start: Position, stop: Position, ids: list[Any], kind: int = BY_ID) -> list[Any]:
        spans = self._spans
        if len(spans) >= SPANS_KEPT:
            spans.clear()
        spans[start, stop, kind] = ids
        self.held = True
        return ids

    def changed(self, i: int) -> None:
        """Sublist i gained or lost an entry (its length and its later positions moved)."""
        self._parts.pop(i, None)
        self.whole.discard(i)
        spans = self._spans
        if spans:
            for span in [s for s in spans if s[0][0] <= i <= s[1][0]]:
                del spans[span]
        self.held = bool(self._parts or spans)

    def clear(self) -> None:
        """The sublists themselves changed: no position holds any more."""
        self._parts.clear()
        self._spans.clear()
        self.whole.clear()
        self.held = False


class KeptOrders:
    """An `OrderedIndex`'s reads in orders other than its own, through its `KeptParts`:
    ids by id (`sorted_ids`, `span_by_id`) and descending (`ids_descending`,
    `batches_descending`). A base of `OrderedIndex` (indexes.py), which holds the sublists
    and positions these read; kept here beside the parts they keep, so indexes.py holds
    the index's own order and its writes."""

    __slots__ = ()
    _keys: list[Any]
    _ids: list[list[Any]]
    _lastkeys: list[Any]
    _lastids: list[Any]
    _len: int
    _parts: KeptParts

    if TYPE_CHECKING:  # OrderedIndex's own (indexes.py)

        def lower(self, key: Any, inclusive: bool) -> Position: ...
        def upper(self, key: Any, inclusive: bool) -> Position: ...
        def count_span(self, start: Position, stop: Position) -> int: ...
        def _counted(self) -> Fenwick: ...
        def ids_head(self, start: Position, stop: Position, count: int, skip: int = 0) -> list[Any]: ...

    def sorted_ids(self, i: int, lo: int = 0, hi: int | None = None) -> list[Any]:
        """The ids at positions [lo, hi) of sublist i (the whole sublist by default) in
        ascending order (not the index's): a kept part (`_kept`). What a window's first ids
        in id order are bisected in (seek.py `_first_ids`: a window's end sublists are such
        parts). The caller only reads it."""
        return self._kept(i, (lo, len(self._ids[i]) if hi is None else hi, False))

    def span_by_id(self, start: tuple[int, int], stop: tuple[int, int]) -> list[Any]:
        """The ids at positions [start, stop) sorted by id (not the index's order): a
        window's ids in id order, whose page after an id is one bisect and a slice (seek.py
        `_first_ids`). Merged from the id-sorted parts of the sublists the span covers
        (`sorted_ids`: one sort of presorted runs) and kept until a sublist it reaches
        changes (keptparts.py). The caller only reads it."""
        out = self._parts.span(start, stop)
        if out is None:
            (i, lo), (last, hi) = start, stop  # a span to the index's end stops at (len(sublists), 0)
            if stop <= start:
                parts: list[list[Any]] = []
            elif i == last:
                parts = [self.sorted_ids(i, lo, hi)]
            else:
                parts = [self.sorted_ids(i, lo), *map(self.sorted_ids, range(i + 1, last))]
                if hi:
                    parts.append(self.sorted_ids(last, 0, hi))
            out = self._parts.keep_span(start, stop, sorted(chain.from_iterable(parts)))
        return out

    def _kept(self, i: int, part: tuple[int, int, bool]) -> list[Any]:
        """Sublist i's part (lo, hi, descending): its ids by id (`sorted_ids`), or in the
        index's descending order (`_descending`). Made on first use and kept until that
        sublist changes (keptparts.py `KeptParts`)."""
        out = self._parts.part(i, part)
        if out is None:
            lo, hi, desc = part
            made = (
                descending_ids(self._keys, self._ids, (i, lo), (i, hi), self.lower)
                if desc
                else sorted(self._ids[i][lo:hi])
            )
            out = self._parts.keep_part(i, part, made)
        return out

    def ids_descending(self, start: int, stop: int) -> list[Any]:
        """Ids at positions [start, stop) of the non-null entries in descending order (keys
        descending, ids ascending in a run): a slice of `runs_descending`. O(log n + stop -
        start + the two end runs), where a walk from the top costs O(stop) (a deep `offset`
        of a descending sort)."""
        ids, lo, _span = self.runs_descending(start, stop)
        return ids[lo : lo + stop - start]

    def runs_descending(self, start: int, stop: int) -> tuple[list[Any], int, tuple[Position, Position]]:
        """(ids, lo, span): the descending order's positions [start, stop) widened to whole
        runs of equal keys at both ends, where `start` is in them (ids[lo : lo + stop -
        start] are the positions asked; the caller only reads the list), and the ascending
        positions (begin, end) they fill (`keys_descending` reads their keys). Those are
        found from the sublists' counts (one Fenwick descent, O(log n), and a step back),
        widened to their runs' bounds, then put in descending order and kept
        (`_descending`): a page sorted on several keys orders its tied runs from this, with
        no run looked up again (orders.py `page_in_order`)."""
        n = self._len
        lo, hi = max(n - stop, 0), n - start
        if hi <= lo:
            return [], 0, ((0, 0), (0, 0))
        last = self._counted().find(hi - 1)
        first = self._back((last[0], last[1] + 1), hi - lo)
        keys = self._keys
        begin = self.lower(keys[first[0]][first[1]], True)
        end = self.upper(keys[last[0]][last[1]], True)
        # the descending position of the entry just before `end` (the first `_descending` gives)
        top = n - (hi + self.count_span((last[0], last[1] + 1), end))
        return self._descending(begin, end, True), start - top, (begin, end)

    def keys_descending(self, begin: Position, end: Position) -> list[Any]:
        """The keys of positions [begin, end) in descending order: one key a run's id, as
        `runs_descending`'s ids of that span have them (a run's keys are equal, so the
        ascending keys reversed are theirs), copied by slices, no id's key looked up."""
        keys = list(chain.from_iterable(span_pieces(self._keys, begin, end)))
        keys.reverse()
        return keys

    def ties_descending(self, begin: Position, end: Position) -> list[tuple[int, int]]:
        """The runs of two entries or more of positions [begin, end) in descending order,
        as (lo, hi) bounds in `runs_descending`'s ids of that span (`tie_runs` of
        `keys_descending`): kept beside the span, by the same rules (they read its keys
        only), so a page on several keys finds the runs its other keys order with one
        probe, where comparing its first keys cost a third of its plan at 1,000,000 posts
        (bench/README.md, wt-tsk). The caller only reads it."""
        out = self._parts.span(begin, end, TIES)
        if out is None:
            out = self._parts.keep_span(begin, end, tie_runs(self.keys_descending(begin, end)), TIES)
        return out

    def batches_descending(self, start: tuple[int, int], stop: tuple[int, int], size: int = 32) -> Iterator[list[Any]]:
        """The ids of [start, stop) in descending order (keys descending, ids ascending in a
        run), from `stop` down, in lists of growing size (`size`, twice that, ...: a page of
        20 takes one): each the entries from `size` positions below the last list's first
        (widened down to the start of that key's run, so a list holds whole runs) up to it,
        put in order by `_descending` (the caller only reads them). O(log n + size + run) a
        list, entries copied only from the sublists it covers."""
        keys = self._keys
        while start < stop:  # compared, not max(): two calls a batch were half its cost
            cut = self._back(stop, size)
            if start < cut:
                cut = self.lower(keys[cut[0]][cut[1]], True)
                if cut < start:
                    cut = start
            else:
                cut = start
            yield self._descending(cut, stop)
            stop, size = cut, size * 2

    def head_descending(self, start: Position, stop: Position, count: int) -> list[Any]:
        """The first `count` ids of [start, stop) in descending order (keys descending, ids
        ascending in a run), for one page: the runs taken from the top as `descending_ids`
        takes them (a bisect each), each cut to what the page still needs and sliced out
        of its sublists (`ids_head`), nothing ordered and nothing kept; only after RUNS_TAKEN
        runs, or at a short run (many distinct keys), the rest is a batch
        (`batches_descending`, kept). A page at a cursor at random, below the cursor's run,
        made and kept a part of the sublist it reached at every list, a part that the next
        cursor did not ask again (walks.py `descending_page`)."""
        keys = self._keys
        out: list[Any] = []
        for _ in range(RUNS_TAKEN):
            if count <= 0 or not start < stop:
                return out
            i, j = stop
            if j == 0:
                i, j = i - 1, len(keys[i - 1])
            key = keys[i][j - 1]  # the top entry's key
            first = bisect_left(keys[i], key, 0, j)  # its run's start, in the top's sublist
            if first and j - first < RUN_SHORT:
                break
            lo = (i, first) if first else self.lower(key, True)  # or before that sublist
            if lo < start:
                lo = start
            piece = self.ids_head(lo, stop, count)  # the run's first ids: ascending in it
            out += piece
            count -= len(piece)
            stop = lo
        if count > 0 and start < stop:
            out += self._short_runs_head(start, stop, count)
        return out

    def _short_runs_head(self, start: Position, stop: Position, count: int) -> list[Any]:
        """`head_descending`'s rest at short runs: the first `count` ids of [start, stop) in
        descending order, as `batches_descending`'s first batch cut to `count` gives them.
        When that batch (the `count` entries below `stop`, widened down to their lowest
        key's run, not below `start`) lies inside `stop`'s sublist, its (key, id) pairs are
        sliced out and put in order by one stable sort, nothing kept: a page at a cursor at
        random asks a batch no later page asks, and making, keeping and evicting a kept
        part for it (`_kept`: the order made twice over, a bisect through `lower`'s dict of
        keys seen, the parts' dicts) cost more than the sort (bench/README.md, wt-rand5).
        A batch asked again within the last ASKED_KEPT not kept (a polled page) is kept as
        `_kept` keeps it, under the same part's key (admission.py), so it is found kept
        after its second ask. Else (the batch's run may begin in an earlier sublist, or `stop` is near a
        sublist's start) the batch itself."""
        i, j = stop
        if j == 0:
            i, j = i - 1, len(self._keys[i - 1])
        cut = j - count
        if cut > 0:
            keys = self._keys[i]
            cut = bisect_left(keys, keys[cut], 0, cut)  # the lowest key's run starts here
            if cut > 0 or start[0] == i:
                if start[0] == i and cut < start[1]:
                    cut = start[1]
                kept = self._parts
                n = len(keys)
                # whole runs at both ends (`cut` and `j` each begin a run, or end the
                # sublist): the batch is a slice of the sublist's descending order, if kept
                if (j == n or keys[j] != keys[j - 1]) and (cut == 0 or keys[cut] != keys[cut - 1]):
                    whole = self._whole_descending(i, n)
                    if whole is not None:
                        return whole[n - j : min(n - cut, n - j + count)]
                part = kept.part(i, (cut, j, True))
                if part is None:
                    pairs = sorted(zip(keys[cut:j], self._ids[i][cut:j]), key=_FIRST, reverse=True)
                    part = list(map(_SECOND, pairs))
                    if kept.asked.admits((i, cut, j)):  # a page asked again (polled): kept
                        kept.keep_part(i, (cut, j, True), part)
                return part[:count]
        return next(self.batches_descending(start, stop, count))[:count]

    def head_after_descending(self, key: Any, id_: Any, count: int) -> tuple[list[Any], Position] | None:
        """The first `count` ids after a cursor (`key` not None, `id_`) in descending order
        (keys descending, ids ascending in a run) that lie in the sublist holding the
        cursor's run (and, when that run goes on into the next sublists, the rest of the
        run: `_run_across`), and the position the page goes on below should fewer than
        `count` come back; or None when `key` is above every key.

        The cursor's run [lo, hi) of sublist i holds its ids ascending, as the page wants
        them, so the rest of the run is ids[at:hi] (at: the first id above `id_`): a page
        that ends in it (most pages at 1,000,000 posts, whose runs are ~100 long) is that
        slice; when the run is shorter and the run just below it begins in sublist i and
        holds the rest of the page (most of the other pages at 1,000,000 posts), the page
        is the two slices, one bisect more; else the page goes on below at (i, lo)
        (`head_descending`, the caller's). No order is made or kept for these. When the sublist's
        descending order is kept (`_whole_descending`, an index of <= WHOLE_SUBLISTS
        sublists: 20,000 posts, runs of ~2), the run is that order's slice [n - hi, n - lo)
        and the page is its slice from n - hi + (at - lo), down to the sublist's first run
        when that run began in sublist i - 1 (a run's ids ascend across the two, so the
        whole run is the caller's: `head_descending`). Three or four bisects and a slice,
        where `cursor_run`, `ids_head`, `head_descending` and `_short_runs_head` found the
        same page in four steps (walks.py `descending_page`, bench/README.md wt-score and
        wt-score2)."""
        lastkeys = self._lastkeys
        i = bisect_left(lastkeys, key)  # the first sublist holding the run (or a higher key)
        if i == len(lastkeys):  # above every key: the page starts at the top
            return None
        keys = self._keys[i]
        n = len(keys)
        lo = bisect_left(keys, key)
        hi = bisect_right(keys, key, lo)
        if hi == n and i + 1 < len(lastkeys) and self._keys[i + 1][0] == key:
            # the run goes on in sublist i + 1 (and on): its ids ascend across them, so its
            # rest is taken by position, and the runs below it follow from (i, lo) as above
            return self._run_across(key, id_, count, i, lo), (i, lo)
        ids = self._ids[i]
        at = bisect_right(ids, id_, lo, hi)
        if hi - at < count:  # the page goes on below the run: the sublist's kept order, if any
            whole = self._whole_descending(i, n)
            if whole is not None:
                below = 0  # the sublist's first run went on from sublist i - 1: left to the caller
                if i and lastkeys[i - 1] == keys[0]:
                    below = bisect_right(keys, keys[0])
                at += n - hi - lo
                return whole[at : min(at + count, n - below)], (i, below)
            if lo:  # the run below the cursor's, when it begins in this sublist and ends the page
                first = bisect_left(keys, keys[lo - 1], 0, lo)
                if first and lo - first >= count - (hi - at):
                    return ids[at:hi] + ids[first : first + count - (hi - at)], (i, first)
            return ids[at:hi], (i, lo)
        return ids[at : at + count], (i, lo)

    def _run_across(self, key: Any, id_: Any, count: int, i: int, lo: int) -> list[Any]:
        """`head_after_descending` where the cursor's run [lo, ...) of sublist i goes on into
        the next sublists: the first `count` of the run's ids above `id_` (they ascend across
        the sublists). Sublists i to r - 1 all end on `key` (r: the first whose last key is
        above it), so their last ids ascend, and the first of them whose last id is above
        `id_` holds the page's first id (one bisect over those last ids); the run ends in
        sublist r, at its first key above `key`. Three bisects in sublists the page reads,
        where `after` and `upper` looked the run's sublists up again from the top (seven
        bisects, a dict of positions: a fifth of the cursors at 1,000,000 posts, whose runs
        of ~100 cross a sublist's end one time in five, bench/README.md wt-score4)."""
        lastkeys, keys, ids = self._lastkeys, self._keys, self._ids
        r = bisect_right(lastkeys, key, i + 1)
        j = bisect_right(self._lastids, id_, i, r)
        out: list[Any] = []
        if j < r:  # the page starts in sublist j (wholly the run's past sublist i)
            sub = ids[j]
            out = self.ids_head((j, bisect_right(sub, id_, lo if j == i else 0, len(sub))), (r, 0), count)
        if len(out) < count and r < len(keys) and keys[r][0] == key:  # the run's end, in sublist r
            end = bisect_right(keys[r], key)
            start = 0 if j < r else bisect_right(ids[r], id_, 0, end)
            out += ids[r][start : min(end, start + count - len(out))]
        return out

    def _whole_descending(self, i: int, n: int) -> list[Any] | None:
        """Sublist i's ids (`n` of them) in descending order (keys descending, ids ascending
        in a run), kept (`_kept`), or None: made from the second ask since its last change
        (`KeptParts.whole`), only in an index of at most WHOLE_SUBLISTS sublists, so every
        sublist's fits among the parts kept. Any whole runs [cut, j) of the sublist are its
        slice [n - j, n - cut) in that order: the entries above j come first and those below
        cut last, and a stable sort keeps each run's ids as they are. A page at a cursor at
        random then slices its batch out, where sorting the batch's pairs was most of that
        plan at 20,000 posts (bench/README.md, wt-rand7); making the order costs a sort of
        the sublist's pairs (~60-120 us at LOAD 512), paid once while the sublist is unchanged."""
        kept = self._parts
        whole = kept.part(i, (0, n, True))
        if whole is None and len(self._keys) <= WHOLE_SUBLISTS:
            if i in kept.whole:
                return self._kept(i, (0, n, True))
            kept.whole.add(i)
        return whole

    def _descending(self, start: tuple[int, int], stop: tuple[int, int], kept: bool = False) -> list[Any]:
        """The ids of [start, stop) (not empty) keys descending, ids ascending in a run; the
        caller only reads them. Inside one sublist (a page's batch, mostly) a kept part
        (`_kept`): the same page asked again is a dict probe, where ordering a batch of short
        runs (a sort of its pairs) was most of a descending page's plan (bench/README.md)."""
        i, j = stop
        if j == 0:
            i, j = i - 1, len(self._ids[i - 1])
        if start[0] == i:
            return self._kept(i, (start[1], j, True))
        if not kept:
            return descending_ids(self._keys, self._ids, start, stop, self.lower)
        # Across sublists for `ids_descending` (a deep `offset`'s runs widened over a
        # sublist's end): kept as a span, dropped as the id-sorted ones are. Not for the
        # batches of a walk, which would crowd the spans kept out.
        out = self._parts.span(start, stop, DESCENDING)
        if out is None:
            out = self._parts.keep_span(
                start, stop, descending_ids(self._keys, self._ids, start, stop, self.lower), DESCENDING
            )
        return out

    def _back(self, position: tuple[int, int], count: int) -> tuple[int, int]:
        """The position `count` entries before `position` (the first, (0, 0), if fewer)."""
        i, j = position
        while j < count:
            if i == 0:
                return 0, 0
            count -= j
            i -= 1
            j = len(self._ids[i])
        return i, j - count


def descending_ids(
    keys: list[Any], ids: list[list[Any]], start: Position, stop: Position, lower: Callable[[Any, bool], Position]
) -> list[Any]:
    """The ids of an index's positions [start, stop) (not empty), keys descending and ids
    ascending in a run; `keys` and `ids` are its sublists, `lower` its `lower`.

    A run's ids ascend in the index already, so the runs are taken from the top as they
    are, a bisect each (in the top's sublist; `lower` when the run goes on before it): one
    run (a page inside a run of equal keys, the common case of a sort field with repeated
    values) is one slice, no entry compared. After RUNS_TAKEN runs, or at a run shorter
    than RUN_SHORT (many distinct keys: a bisect a run would cost more than the sort), the
    rest is ordered as a whole by one stable sort of its (key, id) pairs by key
    descending."""
    out: list[Any] = []
    for _ in range(RUNS_TAKEN):
        i, j = stop
        if j == 0:
            i -= 1
            j = len(keys[i])
        key = keys[i][j - 1]  # the top entry's key
        if keys[start[0]][start[1]] == key:  # one run left: in order already
            out.extend(chain.from_iterable(span_pieces(ids, start, stop)))
            return out
        first = bisect_left(keys[i], key, 0, j)  # the run's start, in the top's sublist
        if first and j - first < RUN_SHORT:  # short runs (many distinct keys): sorted below
            break
        lo = (i, first) if first else lower(key, True)  # or before that sublist
        out.extend(chain.from_iterable(span_pieces(ids, lo, stop)))
        stop = lo
    pairs = list(
        zip(chain.from_iterable(span_pieces(keys, start, stop)), chain.from_iterable(span_pieces(ids, start, stop)))
    )
    pairs.sort(key=_FIRST, reverse=True)  # stable: a run's ids stay ascending
    out.extend(map(_SECOND, pairs))
    return out


def tie_runs(keys: list[Any]) -> list[tuple[int, int]]:
    """(lo, hi) of each run of two equal neighbours or more in `keys`: keys[lo:hi] are
    equal, and differ from the keys beside them. The neighbours are compared in C and each
    run found by `list.index`, so the loop here goes once a run (none: one pass)."""
    tied = list(map(eq, keys, islice(keys, 1, None)))  # tied[i]: keys i and i + 1 are equal
    runs: list[tuple[int, int]] = []
    if True not in tied:
        return runs
    lo, last = tied.index(True), len(tied)
    while True:
        hi = lo + 1
        while hi < last and tied[hi]:
            hi += 1
        runs.append((lo, hi + 1))
        if True not in tied[hi:]:
            return runs
        lo = tied.index(True, hi)
