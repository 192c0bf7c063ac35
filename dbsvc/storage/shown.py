"""The dicts a table handed out lately, so that one record version read twice is one dict.

The store's reads and writes speak dicts (table.py `shown`, `shown_all`, `prime`). Reading
one record version twice gives the same dict object for as long as it stays among the last
SHOWN handed out, so the application's encoded-JSON cache, which trusts a record by identity
(readcache.py `EncodedRecords`), keeps hitting: without it every page of dicts would be
encoded again. A record whose stored form is over SHOWN_BYTES is not remembered: its dict
would hold every value a second time beside the stored bytes (a 200 KB record, 200 KB
more), where decoding it again costs little next to sending it (the application skips
caching its encoding for the same reason). Once SHOWN are kept, a record is kept only from
its second read among the last SEEN read once (`admits`): reads spread over a table many
times SHOWN would otherwise evict a kept dict for each record they never read again
(docs/decisions.md, "kept from their second read").

A list page of dicts' ids are remembered too (the last SHOWN_PAGES pages of at most
SHOWN_PAGE ids, each from its second ask among the last SHOWN_PAGES not kept): when each of
them is still the very stored record it was, the page's dicts come back from one identity
test of the stored records at C speed, where a probe per id was most of the cost of a page.

A page asked for to be sent whole (`page(..., texts=True)`: a list answer with no
projection, `expand=`, `as_of` or access rules, the app's `list`) is its stored records as
they are: a stored record is its record's JSON (rows.py, session 27), so every record but
the last is its stored bytes, picked from the live map and joined by the application, with
no cache lookup, no cut, no decode and no admission; the last is a `SentRecord`, its dict
(its `Link` reads its sort keys: a copy of the dict `one` gives, kept or made and kept by its rule)
carrying its JSON (`text`), or, for a list in id order (`keyed=False`: its `Link` reads
the last record's id alone, cursors.py `NextLinks`), holding only its id. Nothing of such
a page is kept: before session 27 a page's records were cut out of their stored arrays and
kept as their JSON beside their dicts, with their pages, which the object form made moot
(bench/README.md and docs/decisions.md, "A page's records held in their object form").
A stored text that may hold a lone surrogate (UTF-8 0xED: `json_bytes` refuses to encode
one; Hangul U+D000-U+D7FF also starts so and is merely decoded) is handed out as its dict
(`one`), as any record of a page of dicts; the application encodes it.

How many are kept: at least SHOWN, and past it as many as weigh less than SHOWN_SHARE
bytes a live record of the table (`sized`, the table's count, read again when the cache is
full: the table grows). An entry's weight is an estimate of what it holds beyond the stored
record the table holds anyway (`weight`: its own objects and its dict). A dict asked alone
(a GET's with a projection, `expand=` or rules, a page of dicts') is kept past SHOWN from its
second read only; a GET sent whole asks for none (its stored text is its answer, store.py
`get_versioned`, session 28). At 20,000 records the share is below SHOWN's weight and
nothing changes.

Plain data: no I/O; imports rows.py and dbsvc/admission.py only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, KeysView
from operator import is_, itemgetter
from typing import Any

from dbsvc.admission import SecondAsk
from dbsvc.storage.rows import Stored, Values, unpack

SHOWN = 65536  # dicts a table remembers handing out (the application caches as many encodings)
SHOWN_BYTES = 4096  # a stored record longer than this is never remembered as a dict
SHOWN_PAGES, SHOWN_PAGE = 64, 100  # pages of dicts `page` remembers, of at most this many ids
SEEN = 65536  # ids read once lately, of which a full cache admits a second read (`admits`)
SHOWN_SHARE = 128  # bytes of kept entries' weight (`weight`) a live record of the table allows past SHOWN
ENTRY_WEIGHT = 160  # an entry's own objects: its key, its tuple, its slot in the OrderedDict
DICT_WEIGHT = 400  # a record's dict beyond its stored length (the dict, its keys' slots, its values' headers)
SURROGATE = b"\xed"  # the first byte of a lone surrogate's UTF-8 (module docstring)
_first, _second = itemgetter(0), itemgetter(1)  # an entry's stored record, its dict
Entry = tuple[Stored, dict]  # a kept record: its stored record, its dict


def weight(entry: Entry) -> int:
    """What a kept entry holds beyond its stored record (which the table holds anyway), in
    bytes, roughly: its own objects and its dict (~DICT_WEIGHT plus about the values'
    stored length)."""
    return ENTRY_WEIGHT + DICT_WEIGHT + len(entry[0])


class SentRecord(dict):
    """A record's dict handed out with its JSON (`text`, bytes): a page's last record
    (`ShownDicts.page` with texts). It is the record as a dict for whoever reads its
    values (the page's `Link`), and its bytes for the page; a copy made for one page and
    kept nowhere (the kept dict stays a plain dict). A page in id order (`keyed=False`)
    gets it with its id alone: its `Link` reads nothing else. A sorted page whose sort
    fields' key columns were handed in (`ShownDicts.page` `columns`) gets its id alone
    too, and `sort_keys`, the record's index keys of those fields read from the columns:
    its `Link` needs no more, and no dict of the record is made or kept for it (the -score
    pages at cursors at random decoded their last record's JSON for one key;
    bench/README.md, session 32). `sort_keys` is None otherwise."""

    __slots__ = ("sort_keys", "text")

    sort_keys: tuple[Any, ...] | None
    text: bytes


class ShownDicts:
    """id -> (stored record, its dict) of the last SHOWN handed out, and the last pages of dicts."""

    __slots__ = (
        "_asked_pages",
        "_decode",
        "_id",
        "_pages",
        "_seen",
        "_shown",
        "_texts",
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
        # the id's field: a page in id order hands its last record out by id; none: every
        # page's last record is its whole dict
        self._id = id_field
        # whether pages are handed out as texts when asked (the model's fields known: its
        # stored records are its records' JSON); no fields: every record a dict
        self._texts = bool(fields)
        self.capacity = capacity or SHOWN  # entries kept at most while over `budget`
        self.window = window or SEEN  # ids read once that `admits` remembers at most
        self._shown: OrderedDict[Any, Entry] = OrderedDict()  # id -> (stored record, its dict)
        # a page's ids -> (their stored records, their dicts) of the last SHOWN_PAGES pages
        self._pages: OrderedDict[tuple[Any, ...], tuple[list[Stored], list[dict]]] = OrderedDict()
        self._seen = SecondAsk(self.window)  # ids missed once while the dicts were full (`admits`)
        self._asked_pages = SecondAsk(SHOWN_PAGES)  # pages made once and not kept (`page`)
        self.refused = 0  # dicts handed out and not kept (`admits`), ever

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
            return entry[1]
        return self._missed(id_, stored, entry)

    def _missed(self, id_: Any, stored: Stored, entry: Entry | None) -> dict:
        """A new dict of `stored`, kept if `entry` (a dict kept for an older version of
        `id_`) or `admits` says so; `refused` counts the ones not kept."""
        record = self._decode(unpack(stored))
        if entry is not None or self.admits(id_):
            self.remember(id_, stored, record)
        else:
            self.refused += 1
        return record

    def admits(self, id_: Any) -> bool:
        """Whether a missed read of `id_` is kept: always while fewer than `capacity`
        (SHOWN) dicts are kept; once full (every new one evicts another), only a second read
        among the last `window` (SEEN) ids missed (a set of ids, emptied when it reaches
        `window`). Reads spread over a table many times the cache's size (pages and ids at
        random at 1,000,000 records) would otherwise evict a kept record, freeing its cold
        objects, for each record they will not read again; a record read twice is kept
        from its second read on. GETs at random at 1,000,000 posts filled the share with
        dicts (~100 MB) and hit no more (bench/README.md, wt-pack)."""
        return len(self._shown) < self.capacity or self._seen.admits(id_)

    def _within(self) -> bool:
        """Whether the kept entries weigh less than SHOWN_SHARE a live record of the table,
        the table's count read now (`budget`, which `remember` evicts down to)."""
        sized = self.sized
        if sized is None:
            return False
        self.budget = SHOWN_SHARE * sized()
        return self._weight < self.budget

    def page(
        self, ids: list[Any], page: list[Stored], texts: bool = False, keyed: bool = True, columns: tuple = ()
    ) -> list[Any]:
        """`one` of each id of a list page and its stored record (`page`, in the same
        order); a page of the last SHOWN_PAGES whose stored records are all still the same
        gives its dicts again (module docstring). The kept dicts are looked up and tested
        in C, all at once; a page with a miss takes them one by one. `texts`: the page as
        JSON, every record but the last its stored bytes, the last a `SentRecord`
        (`_texts_page`; module docstring); `keyed` False (a list in id order, whose `Link`
        reads the last record's id alone): that `SentRecord` holds its id alone; `columns`
        (the sort fields' key columns, keycolumns.py `KeyColumn`, in the sort's order): that
        `SentRecord` holds its id and its `sort_keys` read from them, no dict of it made."""
        if texts and self._texts and ids:
            return self._texts_page(ids, page, keyed or not self._id, columns)
        key = tuple(ids)
        kept = self._pages.get(key)
        if kept is not None and all(map(is_, page, kept[0])):
            return list(kept[1])
        found: list[Any] = list(map(self._shown.get, ids))
        refused = self.refused
        if None not in found and all(map(is_, map(_first, found), page)):
            out = list(map(_second, found))
        else:  # a found entry is that stored record's dict even if a miss evicts it meanwhile
            missed = self._missed
            out = [
                entry[1] if entry is not None and entry[0] is stored else missed(id_, stored, entry)
                for id_, stored, entry in zip(ids, page, found)
            ]
        self._keep_page(key, page, out, kept is not None, refused)
        return out

    def _texts_page(self, ids: list[Any], page: list[Stored], keyed: bool, columns: tuple = ()) -> list[Any]:
        """`page` with texts (a page of at least one record): its stored records as they
        are, the last a `SentRecord` (by id alone when not `keyed`), a record that may hold
        a lone surrogate its dict (module docstring). No lookup but the last record's when
        `keyed`: a copy of `one`'s dict (the kept one if it is this stored version's, else
        one made and kept by its rule: the -score pages at cursors at random at 1,000,000
        posts end on ~95,000 records, read again and again). Made as every dict here is,
        `decode(unpack)`, not `scan`: a scanned dict holds its own key strings, 1,165 bytes
        against 784 a kept post, for 0.6 us less a miss (docs/decisions.md, session 28)."""
        out: list[Any] = list(page)
        # one test of the page's texts joined, not one a text: at 1,000,000 posts a page of
        # 20 at random paid ~10 us for the twenty tests and ~0.5 us for a join and one find
        # (bench/README.md, session 28); `find`, not `in`: `in` tries the byte as an int first
        if b"".join(page).find(SURROGATE) >= 0:
            out = [stored if SURROGATE not in stored else self.one(id_, stored) for id_, stored in zip(ids, page)]
        last = out[-1]
        if type(last) is not bytes:  # a dict already (its Link reads it as it is)
            return out
        sent = SentRecord()
        sent.sort_keys = None
        if columns and self._id:  # the Link's keys from the columns: no dict made (class doc)
            id_ = ids[-1]
            sent[self._id] = id_
            sent.sort_keys = tuple([column.get(id_) for column in columns])
        elif keyed:
            sent.update(self.one(ids[-1], last))
        else:
            sent[self._id] = ids[-1]
        sent.text = last
        out[-1] = sent
        return out

    def _keep_page(self, key: tuple[Any, ...], page: list[Stored], out: list[Any], stale: bool, refused: int) -> None:
        """Keep a page of dicts when every record of it was kept (no refusal since `refused`
        was read: a page with a dict not admitted is not), from its second ask
        (admission.py), or again when its kept entry was `stale`; pages asked again and
        again, such as a few sorted pages, are then one lookup."""
        pages = self._pages
        if len(key) <= SHOWN_PAGE and self.refused == refused and (stale or self._asked_pages.admits(key)):
            if not stale and len(pages) >= SHOWN_PAGES:
                pages.popitem(last=False)
            pages[key] = (page, out[:])

    def forget(self, id_: Any) -> None:
        """`id_`'s record is gone: drop its dict (a kept page fails its identity test anyway)."""
        entry = self._shown.pop(id_, None)
        if entry is not None:
            self._weight -= weight(entry)

    def remember(self, id_: Any, stored: Stored, record: dict) -> None:
        """`record` is the dict of `stored`, `id_`'s live record: keep it (or, for a stored
        record over SHOWN_BYTES, forget any dict kept for `id_`). A new id evicts the oldest
        entries while at least `capacity` are kept and they weigh `budget` or more (one, or
        more when a heavier entry replaced lighter ones)."""
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
        entry = (stored, record)
        shown[id_] = entry
        self._weight += weight(entry)
