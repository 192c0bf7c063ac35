"""The dicts a table handed out lately, so that one record version read twice is one dict.

The store's reads and writes speak dicts (table.py `shown`, `shown_all`, `prime`). Reading
one record version twice gives the same dict object for as long as it stays among the last
SHOWN handed out, so the application's encoded-JSON cache, which trusts a record by identity
(readcache.py `EncodedRecords`), keeps hitting: without it every page would be encoded again,
at many times the cost of joining cached bytes (bench/README.md). A record whose stored form
is over SHOWN_BYTES is not remembered: its dict would hold every value a second time beside
the stored bytes (a 200 KB record, 200 KB more), where decoding it again costs little next to
sending it (the application skips caching its encoding for the same reason). Once SHOWN are
kept, a record is kept only from its second read among the last SEEN read once (`admits`):
reads spread over a table many times SHOWN would otherwise evict a kept dict for each record
they never read again (docs/decisions.md, "kept from their second read").

A list page's ids are remembered too (the last SHOWN_PAGES pages of at most SHOWN_PAGE ids,
each from its second ask among the last SHOWN_PAGES not kept: pages at many targets are
asked once each, and keeping each cost a copy of its dicts and an eviction):
when each of them is still the very stored record it was, the page's dicts come back from
one identity test of the stored records at C speed, where a probe per id was most of the
cost of a page.

A page asked for to be sent whole (`page(..., texts=True)`: a list answer with no
projection, `expand=`, `as_of` or access rules, the app's `list`) is handed out as JSON,
not dicts: every record but the last as its JSON (bytes), the last as a `SentRecord`,
its dict (its `Link` reads its sort keys) carrying its JSON (`text`). A record's JSON is
cut from its stored text (rows.py `record_json`: no decode, no encode) and kept in the
record's entry beside its dict (id -> (stored record, dict, JSON or None)), so a kept
record's JSON is found by the one lookup that finds its dict: the application joins the
page's bytes and looks nothing up again (before, a kept record went through this cache
and then the application's encoded records, keyed by id again and tested by the dict's
identity, and a record admitted here was encoded there, ~4 us, where its cut costs ~1.4;
bench/README.md, wt-rand8). The admission is unchanged: a record not kept (`admits`
says no) is cut and dropped, as before; a kept one is kept as its JSON alone (id ->
(stored record, None, JSON)) and its dict decoded only when something first asks for
it (`one`, a page of dicts: a projection, `expand=`, rules, `as_of`; a page's last
record), then kept in the entry so that every later ask of that stored version is that
very dict (`_decoded`; wt-rand9: ~2 us a record a whole page admits, 1.5-3.7 a page at
1M, spared); a dict kept without its JSON (a write's, a GET's, a projection's page)
gets it on its first page with texts. A record whose text may hold a lone surrogate gives no cut
(`record_json` None) and is handed out as its dict, as before; the application encodes
it. Pages with texts are kept apart from pages of dicts, by the same rules.

A list in id order (`page(..., keyed=False)`: no `sort`) makes its `Link` from the last
record's id alone (operators.py `NextLinks`: no key to read), so its last record is a
`SentRecord` holding only its id beside its JSON: taken from its entry or cut as any other
record of the page, never decoded nor copied for it (wt-rand10: 0.31-0.99 decodes and one
copy of a 7-field dict a page at 1M). Such pages are kept apart from the sorted ones (a
sorted page's `Link` reads every sort key of its last record).

How many are kept: at least SHOWN, and past it as many as weigh less than SHOWN_SHARE
bytes a live record of the table (`sized`, the table's count, read again when the cache is
full: the table grows). An entry's weight is an estimate of what it holds beyond the stored
record the table holds anyway (`weight`: its own objects, its JSON, its dict), so a cache of
records kept as their JSON alone (the list pages') holds about twice as many as one of dicts.
Only a page's records are kept past SHOWN on their first read; a dict asked alone (a GET's,
a page of dicts') is, as before, kept past it from its second read only. At 20,000 records
the share is below SHOWN's weight and nothing changes; at 1,000,000 posts of the bench's
shape the share holds ~372,000 texts (37% of the table) where SHOWN held 6.5%, and the
id-order pages at 5,000 cursors or offsets at random, which missed ~6 of 20 records a page
(each miss sending the whole page through the Python path), miss ~0.1 once warm
(bench/README.md and docs/decisions.md, wt-pack: 98 MB of RSS more at 1M once every
record was read, +3 MB after 5,000 pages at random offsets).

Plain data: no I/O; imports rows.py and dbsvc/admission.py only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, KeysView
from operator import is_, itemgetter
from typing import Any

from dbsvc.admission import SecondAsk
from dbsvc.storage.rows import Stored, Values, layout, unpack
from dbsvc.storage.rows import sent as sent_json

SHOWN = 65536  # dicts a table remembers handing out (the application caches as many encodings)
SHOWN_BYTES = 4096  # a stored record longer than this is never remembered as a dict
SHOWN_PAGES, SHOWN_PAGE = 64, 100  # pages `page` remembers, of at most this many ids
SEEN = 65536  # ids read once lately, of which a full cache admits a second read (`admits`)
SHOWN_SHARE = 128  # bytes of kept entries' weight (`weight`) a live record of the table allows past SHOWN
ENTRY_WEIGHT = 160  # an entry's own objects: its key, its tuple, its slot in the OrderedDict
DICT_WEIGHT = 400  # a record's dict beyond its stored length (the dict, its keys' slots, its values' headers)
_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)  # an entry's stored record, dict, JSON
# a kept record: its stored record, its dict (None until first asked for when its JSON is
# kept: `ShownDicts._decoded`), its JSON (None until cut; never None with the dict)
Entry = tuple[Stored, "dict | None", "bytes | None"]


def weight(entry: Entry) -> int:
    """What a kept entry holds beyond its stored record (which the table holds anyway), in
    bytes, roughly: its own objects, its JSON's length, and a dict's when it has one (a dict
    of a record's values is ~DICT_WEIGHT plus about the values' stored length)."""
    stored, record, text = entry
    return (
        ENTRY_WEIGHT + (len(text) if text is not None else 0) + (DICT_WEIGHT + len(stored) if record is not None else 0)
    )


class SentRecord(dict):
    """A record's dict handed out with its JSON (`text`, bytes): a page's last record
    (`ShownDicts.page` with texts). It is the record as a dict for whoever reads its
    values (the page's `Link`), and its bytes for the page; a copy made for one page and
    kept nowhere (the kept dict stays a plain dict). A page in id order (`keyed=False`)
    gets it with its id alone: its `Link` reads nothing else."""

    __slots__ = ("text",)

    text: bytes


class ShownDicts:
    """id -> (stored record, its dict, its JSON or None) of the last SHOWN handed out, and
    the last pages."""

    __slots__ = (
        "_asked_pages",
        "_count",
        "_decode",
        "_id",
        "_id_pages",
        "_layout",
        "_pages",
        "_seen",
        "_sent_pages",
        "_shown",
        "_weight",
        "budget",
        "capacity",
        "refused",
        "sized",
        "window",
    )

    def __init__(
        self,
        decode: Callable[[Values], dict],
        capacity: int = 0,
        window: int = 0,
        fields: tuple[str, ...] = (),
        id_field: str = "",
        sized: Callable[[], int] | None = None,
    ) -> None:
        self._decode = decode  # a record's values -> its dict (CompiledModel.decode)
        # the table's count of live records: past `capacity`, entries are kept while their
        # `weight` is under SHOWN_SHARE a record (`budget`); none: `capacity` at most. The
        # live map's own `__len__` (table.py sets it again when it replaces the map): a
        # method of the table would make a cycle, and a store closed and dropped would
        # wait for the collector (tests/storage/test_storage_reopen_frozen.py)
        self.sized = sized
        self._weight = 0  # the kept entries' `weight`, summed
        self.budget = 0  # SHOWN_SHARE times the table's records when last asked (`_within`)
        # the id's field: a page in id order hands its last record out by id (`_sent_id`);
        # none: every page's last record is its whole dict
        self._id = id_field
        # the record object's layout as bytes and its count of fields (`page`'s texts);
        # no fields: no texts, every record a dict
        self._layout, self._count = layout(fields).encode("utf-8") if fields else b"", len(fields)
        self.capacity = capacity or SHOWN  # entries kept at most while over `budget`
        self.window = window or SEEN  # ids read once that `admits` remembers at most
        # id -> (stored record, its dict, its JSON cut from the stored record or None)
        self._shown: OrderedDict[Any, Entry] = OrderedDict()
        # a page's ids -> (their stored records, their dicts) of the last SHOWN_PAGES pages
        self._pages: OrderedDict[tuple[Any, ...], tuple[list[Stored], list[dict]]] = OrderedDict()
        self._sent_pages: OrderedDict[tuple[Any, ...], tuple[list[Stored], list[Any]]] = OrderedDict()  # with texts
        self._id_pages: OrderedDict[tuple[Any, ...], tuple[list[Stored], list[Any]]] = OrderedDict()  # in id order
        self._seen = SecondAsk(self.window)  # ids missed once while the dicts were full (`admits`)
        self._asked_pages = SecondAsk(SHOWN_PAGES)  # pages made once and not kept (`page`)
        self.refused = 0  # records handed out and not kept (`admits`), ever: dicts or texts

    @property
    def ids(self) -> KeysView[Any]:
        """The ids whose dicts are kept (a view, never written)."""
        return self._shown.keys()

    @property
    def weighs(self) -> int:
        """The kept entries' `weight`, summed (what `budget` bounds past `capacity`)."""
        return self._weight

    def one(self, id_: Any, stored: Stored) -> dict:
        """The dict of `stored`, the live record of `id_`: the one handed out before for this
        very stored record while it is among the last SHOWN, else a new one."""
        entry = self._shown.get(id_)
        if entry is not None and entry[0] is stored:
            record = entry[1]
            return record if record is not None else self._decoded(id_, entry)
        return self._missed(id_, stored, entry)

    def _decoded(self, id_: Any, entry: Entry) -> dict:
        """The dict of a record kept with its JSON alone (`entry`, its dict None): decoded
        now, the first time something asks for it, and kept in its entry while `entry` is
        still `id_`'s (a miss of the same page may have evicted it), so that every later
        ask of this stored version gets this very dict."""
        stored, _, text = entry
        record = self._decode(unpack(stored))
        if self._shown.get(id_) is entry:
            self._shown[id_] = (stored, record, text)
            self._weight += DICT_WEIGHT + len(stored)
        return record

    def _missed(self, id_: Any, stored: Stored, entry: Entry | None) -> dict:
        """A new dict of `stored`, kept if `entry` (a dict kept for an older version of
        `id_`, or this version's JSON kept without its dict) or `admits` says so;
        `refused` counts the ones not kept."""
        if entry is not None and entry[0] is stored:
            return self._decoded(id_, entry)
        record = self._decode(unpack(stored))
        if entry is not None or self.admits(id_, grow=False):
            self.remember(id_, stored, record)
        else:
            self.refused += 1
        return record

    def _json(self, id_: Any, stored: Stored, entry: Entry | None) -> Any:
        """A record of a page with texts but the last: its JSON (bytes), from its entry
        when `entry` is `stored`'s (cut now and kept beside its dict if it was not yet),
        else cut from `stored`, the record kept with its JSON alone if `entry` (an older
        version kept) or `admits` says so (its dict decoded when first asked for:
        `_decoded`); its dict where no cut is made (`record_json` None: a lone surrogate
        may be held), decoded and kept as before."""
        if entry is not None and entry[0] is stored:
            text = entry[2]
            if text is None:
                text = sent_json(stored)
                if text is None:  # an entry without its JSON holds its dict
                    return entry[1]
                if self._shown.get(id_) is entry:  # not evicted meanwhile by a miss of this page
                    self._shown[id_] = (stored, entry[1], text)
                    self._weight += len(text)
            return text
        text = sent_json(stored)
        if entry is not None or self.admits(id_):
            if text is not None:  # kept as its JSON alone: no decode until a dict is asked for
                self.remember(id_, stored, None, text)
                return text
            record = self._decode(unpack(stored))
            self.remember(id_, stored, record)
            return record
        self.refused += 1
        return text if text is not None else self._decode(unpack(stored))

    def _jsons(self, ids: list[Any], page: list[Stored], found: list[Entry | None]) -> list[Any]:
        """`_json` of each id, stored record and entry (`zip` stops at the shortest), in
        this one frame: a kept JSON read, a record with no entry cut and admitted or
        refused here, any other entry (an older version kept, or this one without its
        JSON) by `_json`. The admission is `admits`' own, its first part (the cache below
        its floor or its share: `_within`, which reads the table's count) read once and
        again only after something was kept, the one thing that changes it; so a page
        whose misses are refused (an author at random at 1,000,000 posts: ~18 of 20)
        pays one `SecondAsk` test a miss, not `admits`, `_within` and the count's
        `__len__` too, three Python calls (bench/README.md, wt-filt2)."""
        shown, capacity, seen = self._shown, self.capacity, self._seen
        growing = len(shown) < capacity or self._within()
        refused = 0
        out: list[Any] = []
        append = out.append
        for id_, stored, entry in zip(ids, page, found):
            if entry is not None:
                if entry[0] is stored and entry[2] is not None:
                    append(entry[2])
                else:
                    append(self._json(id_, stored, entry))
                    growing = len(shown) < capacity or self._within()
                continue
            text = sent_json(stored)
            if growing or seen.admits(id_):
                if text is not None:  # kept as its JSON alone: no decode until a dict is asked for
                    self.remember(id_, stored, None, text)
                    append(text)
                else:
                    record = self._decode(unpack(stored))
                    self.remember(id_, stored, record)
                    append(record)
                growing = len(shown) < capacity or self._within()
            else:
                refused += 1
                append(text if text is not None else self._decode(unpack(stored)))
        self.refused += refused
        return out

    def _sent(self, id_: Any, stored: Stored, entry: Entry | None) -> dict:
        """A page's last record with texts: a `SentRecord`, its dict carrying its JSON (a
        copy of the kept dict, or of the one made now: kept by `_json`'s rules), or its
        plain dict where no cut is made."""
        if entry is not None and entry[0] is stored:
            record, text = entry[1], entry[2]
            if record is None:  # kept with its JSON alone: its Link reads its dict
                record = self._decoded(id_, entry)
            if text is None:  # (never None without its dict)
                text = sent_json(stored)
                if text is None:
                    return record
                if self._shown.get(id_) is entry:  # not evicted meanwhile by a miss of this page
                    self._shown[id_] = (stored, record, text)
                    self._weight += len(text)
        else:
            record = self._decode(unpack(stored))
            text = sent_json(stored)
            if entry is not None or self.admits(id_):
                self.remember(id_, stored, record, text)
            else:
                self.refused += 1
            if text is None:
                return record
        sent = SentRecord(record)
        sent.text = text
        return sent

    def _sent_id(self, id_: Any, text: Any) -> Any:
        """A page's last record in id order: `text` (`_json`'s answer for it, the JSON kept
        or cut) as a `SentRecord` holding only `id_`, the one value its `Link` reads; a
        plain dict (no cut made) as it is."""
        if type(text) is not bytes:
            return text
        sent = SentRecord()
        sent[self._id] = id_
        sent.text = text
        return sent

    def admits(self, id_: Any, grow: bool = True) -> bool:
        """Whether a missed read of `id_` is kept: always while fewer than `capacity`
        (SHOWN) dicts are kept; once full (every new one evicts another), only a second read
        among the last `window` (SEEN) ids missed (a set of ids, emptied when it reaches
        `window`). Reads spread over a
        table many times the cache's size (pages and ids at random at 1,000,000 records)
        would otherwise evict a kept record, freeing its cold objects, for each record they
        will not read again; a record read twice is kept from its second read on. Past
        `capacity`, a cache whose entries weigh less than the table's share (`_within`)
        is not full yet for a record of a page (`grow`); a dict asked alone (a GET's, a
        page of dicts': `_missed`) is kept past `capacity` only from its second read: GETs
        at random at 1,000,000 posts filled the share with dicts (~100 MB) and hit no
        more (bench/README.md, wt-pack)."""
        return len(self._shown) < self.capacity or (grow and self._within()) or self._seen.admits(id_)

    def _within(self) -> bool:
        """Whether the kept entries weigh less than SHOWN_SHARE a live record of the table,
        the table's count read now (`budget`, which `remember` evicts down to)."""
        sized = self.sized
        if sized is None:
            return False
        self.budget = SHOWN_SHARE * sized()
        return self._weight < self.budget

    def page(self, ids: list[Any], page: list[Stored], texts: bool = False, keyed: bool = True) -> list[Any]:
        """`one` of each id of a list page and its stored record (`page`, in the same
        order); a page of the last SHOWN_PAGES whose stored records are all still the same
        gives its dicts again (module docstring). The kept dicts are looked up and tested
        in C, all at once; a page with a miss takes them one by one. `texts`: the page as
        JSON, every record but the last as its bytes, the last a `SentRecord`
        (`_texts_page`; module docstring); `keyed` False (a list in id order, whose `Link`
        reads the last record's id alone): that `SentRecord` holds its id alone."""
        if texts and self._count and ids:
            return self._texts_page(ids, page, keyed or not self._id)
        key = tuple(ids)
        kept = self._pages.get(key)
        if kept is not None and all(map(is_, page, kept[0])):
            return list(kept[1])
        found: list[Any] = list(map(self._shown.get, ids))
        refused = self.refused
        out: list[Any] | None = None
        if None not in found and all(map(is_, map(_first, found), page)):
            out = list(map(_second, found))
            if None in out:  # a record kept with its JSON alone: decoded one by one below
                out = None
        if out is None:  # a found entry is that stored record's dict even if a miss evicts it meanwhile
            missed = self._missed
            out = [
                entry[1]
                if entry is not None and entry[0] is stored and entry[1] is not None
                else missed(id_, stored, entry)
                for id_, stored, entry in zip(ids, page, found)
            ]
        self._keep_page(self._pages, key, page, out, kept is not None, refused)
        return out

    def _texts_page(self, ids: list[Any], page: list[Stored], keyed: bool) -> list[Any]:
        """`page` with texts (a page of at least one record): a page of the last
        SHOWN_PAGES with texts whose stored records are all still the same is its JSON and
        `SentRecord` again; else every record's kept JSON looked up, tested and read in C
        when all are kept with theirs, else one by one (`_json`, `_sent`: cut, kept or
        refused as `_missed` keeps). Not `keyed` (id order): the last record is its JSON
        by `_json` too, handed out by id (`_sent_id`), and the page kept apart."""
        pages = self._sent_pages if keyed else self._id_pages
        key = tuple(ids)
        kept = pages.get(key)
        if kept is not None and all(map(is_, page, kept[0])):
            return list(kept[1])
        found: list[Any] = list(map(self._shown.get, ids))
        refused = self.refused
        out = None
        if None not in found and all(map(is_, map(_first, found), page)):
            out = list(map(_third, found))
            if None in out:
                out = None
            elif not keyed:
                out[-1] = self._sent_id(ids[-1], out[-1])
            else:
                last = found[-1]
                sent = SentRecord(last[1] if last[1] is not None else self._decoded(ids[-1], last))
                sent.text = last[2]
                out[-1] = sent
        if out is None:  # a found entry is that stored record's even if a miss evicts it meanwhile
            if keyed:
                out = self._jsons(ids[:-1], page, found)
                out.append(self._sent(ids[-1], page[-1], found[-1]))
            else:
                out = self._jsons(ids, page, found)
                out[-1] = self._sent_id(ids[-1], out[-1])
        self._keep_page(pages, key, page, out, kept is not None, refused)
        return out

    def _keep_page(
        self,
        pages: OrderedDict[tuple[Any, ...], Any],
        key: tuple[Any, ...],
        page: list[Stored],
        out: list[Any],
        stale: bool,
        refused: int,
    ) -> None:
        """Keep a page's answer (`page`'s or `_texts_page`'s own `pages`) when every record of
        it was kept (no refusal since `refused` was read: a page with a dict not admitted is
        not), from its second ask (admission.py), or again when its kept entry was `stale`;
        pages asked again and again, such as a few sorted pages, are then one lookup."""
        if len(key) <= SHOWN_PAGE and self.refused == refused and (stale or self._asked_pages.admits(key)):
            if not stale and len(pages) >= SHOWN_PAGES:
                pages.popitem(last=False)
            pages[key] = (page, out[:])

    def forget(self, id_: Any) -> None:
        """`id_`'s record is gone: drop its dict (a kept page fails its identity test anyway)."""
        entry = self._shown.pop(id_, None)
        if entry is not None:
            self._weight -= weight(entry)

    def remember(self, id_: Any, stored: Stored, record: dict | None, text: bytes | None = None) -> None:
        """`record` is the dict of `stored`, `id_`'s live record (`text` its JSON, when
        known; `record` None: not decoded yet, `text` then given): keep it (or, for a
        stored record over SHOWN_BYTES, forget any dict kept for `id_`). A new id evicts
        the oldest entries while at least `capacity` are kept and they weigh `budget` or
        more (one, or more when a heavier entry replaced lighter ones)."""
        shown = self._shown
        if len(stored) > SHOWN_BYTES:
            self.forget(id_)
            return
        old = shown.get(id_)
        if old is not None:
            self._weight -= weight(old)
            shown.move_to_end(id_)
        elif len(shown) >= self.capacity and not self._within():
            self._weight -= weight(shown.popitem(last=False)[1])
            while len(shown) >= self.capacity and self._weight >= self.budget:
                self._weight -= weight(shown.popitem(last=False)[1])
        entry = (stored, record, text)
        shown[id_] = entry
        self._weight += weight(entry)
