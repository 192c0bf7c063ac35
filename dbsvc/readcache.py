"""The read path's caches: records' JSON, whole or under a projection, encoded once per
version (`EncodedRecords`), list answers at a past watermark kept whole (`PastPages`) and
list answers of the present kept while nothing they read has changed (`PresentPages`); the
application keeps one of each (dbsvc/app.py). The list queries parsed once per distinct
query are parsedlists.py's (`ParsedQueries`, split from here by job in session 25).

Each is bounded in entries and in the size of what it keeps; none ever answers stale
data (the rules are in each class's docstring). Imports runtime and http's Request type.

Each drops its oldest entry from an `OrderedDict` (`popitem(last=False)`, O(1)), never
from a plain dict by `next(iter(d))`: a dict leaves a deleted entry's slot empty in its
entries array until it resizes, so after k deletions from its front `next(iter(d))` walks
k empty slots. At 65,536 encoded records and a table larger than that (1,000,000 posts,
pages asked at random), every miss evicted, and an eviction cost ~160 us where an encoding
costs ~4 (bench/README.md, "Pages that miss the caches at 1,000,000 posts").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from operator import is_, itemgetter
from typing import Any

from dbsvc.admission import SecondAsk
from dbsvc.http.types import Request
from dbsvc.runtime import CompiledModel, Record, json_bytes

_first, _second = itemgetter(0), itemgetter(1)  # a kept entry's record, its JSON


class EncodedRecords:
    """The JSON bytes of stored records, encoded once per record version.

    The store replaces records and never mutates a stored one, so an entry is fresh exactly
    when it holds the very record object the store returned (`is`, not `==`). Encoding a page
    costs far more than joining cached bytes (float repr dominates; bench/README.md has the
    figures). Each model keeps at most `capacity` entries, the oldest evicted first, so the
    cache costs at most that many encoded records of memory per model; once full, a record
    read is kept only from its second read (`admits`), a write's at once. An encoding over
    `largest` bytes is not kept: the entry would hold that record's dict and its JSON
    beside its stored form, three copies of a large record, to spare an encoding that
    costs little next to sending it (storage/table.py keeps no dict of it either).
    Beside them, at most `pages` joined list pages (`encode_page`), each at most 64 KiB,
    each holding its records' dicts.
    """

    def __init__(
        self, models: list[CompiledModel], capacity: int = 65536, largest: int = 4096, pages: int = 256
    ) -> None:
        self.capacity = capacity
        self.largest = largest
        self._entries: dict[str, OrderedDict[Any, tuple[Record, bytes]]] = {m.name: OrderedDict() for m in models}
        self._seen = {m.name: SecondAsk(capacity) for m in models}  # ids missed once while full
        self.refused = 0  # encodings made and not kept (`admits`), ever
        # (model, projection) -> the same entries for that projection's JSON (`projected`)
        self._projected: dict[tuple[str, str], OrderedDict[Any, tuple[Record, bytes]]] = {}
        # the id()s of a page's record objects -> (those records, the page's joined JSON)
        self.pages, self.largest_page = pages, 65536
        self._pages: OrderedDict[tuple[int, ...], tuple[tuple[Record, ...], bytes]] = OrderedDict()
        self._asked_pages = SecondAsk(pages)  # pages joined once and not kept (`encode_page`)

    def encode(self, model: CompiledModel, record: Record, data: bytes | None = None) -> bytes:
        """`record`'s JSON, kept; `data`: that JSON when the caller has it (a write's record,
        encoded by the store with its log payload), kept without an encoding."""
        entries = self._entries[model.name]
        key = record[model.id_field]
        entry = entries.get(key)
        if entry is not None and entry[0] is record:
            return entry[1]
        written = data is not None  # a write's record: kept whether or not it was read
        if data is None:
            data = json_bytes(record)
        if len(data) > self.largest:
            if entry is not None:
                del entries[key]
            return data
        if entry is None and len(entries) >= self.capacity:
            if not written and not self.admits(model, key):
                self.refused += 1
                return data
            entries.popitem(last=False)
        entries[key] = (record, data)
        return data

    def kept_ids(self, model: CompiledModel) -> list[Any]:
        """The ids of `model` whose JSON is kept, oldest first: what a test or an operator's
        probe can ask of the cache without reading its entries."""
        return list(self._entries[model.name])

    def admits(self, model: CompiledModel, key: Any) -> bool:
        """Whether `model`'s full cache keeps the record of id `key` missed now: only on its
        second miss among the last `capacity` missed while full (a set of ids per model,
        emptied when it reaches that size), as storage/shown.py keeps its dicts. Reads
        spread over a table many times the cache's size would otherwise evict a kept JSON,
        freeing its cold objects, for each record they will not read again
        (docs/decisions.md, "kept from a second read")."""
        return self._seen[model.name].admits(key)

    def encode_page(self, model: CompiledModel, records: list[Any], texts: bool = False) -> bytes:
        """The records' JSON joined with commas: `encode` for each, with the cache hit inline.

        A page of the very record objects of a page joined lately is that page's bytes
        again, found by the tuple of the objects' `id()`s (C speed, where a lookup a record
        was most of a page's encoding): the entry holds the records, so no other object can
        have one of those ids while it is kept, and equal ids mean the same objects, hence
        the same versions. At most `pages` pages are kept, the oldest dropped first, none
        over `largest_page` bytes; `pages=0` keeps none. A page is kept from its second
        join among the last `pages` not kept (admission.py): pages at many targets are
        joined once each, and keeping each cost a tuple of its records and an eviction.

        `texts`: the page was asked of the store with texts (storage/shown.py
        `ShownDicts.page`): every record but the last is its JSON (bytes: its stored text,
        which is its record's JSON since session 27) and the last a `SentRecord` (a dict
        carrying its `text`): the page is those bytes joined, nothing looked up, encoded or
        kept here. A plain dict among them (a record whose text may hold a lone surrogate,
        which the store hands out as its dict, kept or not by its rule) goes by `_texts_page`,
        which encodes it and keeps its JSON at once, without this cache's own `admits`, as
        it kept every dict of such a page before; a page of plain dicts only (or an older
        store's: each a dict the store keeps) is joined as without texts, each dict's JSON
        kept at once, the page kept from its second join."""
        if texts and records and type(records[-1]) is not dict:  # the store's SentRecord last
            texts_of = records[:-1]
            texts_of.append(records[-1].text)
            try:
                return b",".join(texts_of)
            except TypeError:  # a plain dict among them
                return self._texts_page(model, records)
        key = tuple(map(id, records))
        kept = self._pages.get(key)
        if kept is not None:
            return kept[1]
        entries = self._entries[model.name]
        try:
            found: list[Any] = list(map(entries.get, map(itemgetter(model.id_field), records)))
        except TypeError:  # a record as its JSON (bytes) among them: a page with texts
            return self._texts_page(model, records)
        refused = self.refused
        parts: Iterable[bytes]
        if None not in found and all(map(is_, map(_first, found), records)):
            parts = map(_second, found)  # every record's JSON kept: looked up and tested in C
        elif texts:  # dicts the store keeps: their JSON kept at once (docstring)
            parts = [
                entry[1] if entry is not None and entry[0] is record else self.encode(model, record, json_bytes(record))
                for record, entry in zip(records, found)
            ]
        else:  # a found entry is that record's JSON even if a miss evicts it meanwhile
            parts = [
                entry[1] if entry is not None and entry[0] is record else self.encode(model, record)
                for record, entry in zip(records, found)
            ]
        page = b",".join(parts)
        # a page is kept when its records' JSON was (one not admitted leaves it out)
        if self.pages and len(page) <= self.largest_page and self.refused == refused and self._asked_pages.admits(key):
            if len(self._pages) >= self.pages:
                self._pages.popitem(last=False)
            self._pages[key] = (tuple(records), page)
        return page

    def _texts_page(self, model: CompiledModel, records: list[Any]) -> bytes:
        """`encode_page` of a page with texts holding a plain dict beside the store's JSON:
        a record's JSON (bytes) is joined as it is, the last record as a `SentRecord` (a
        dict, not plain) gives its `text`, both kept nowhere here; a plain dict (a record
        the store handed out as a dict) has its JSON kept without asking `admits` (`encode_page`'s
        `texts`: a rare record, its entry bounded as any). Such a page is never kept."""
        entries, id_field = self._entries[model.name], model.id_field
        parts = []
        for record in records:
            kind = type(record)
            if kind is bytes:
                parts.append(record)
                continue
            if kind is not dict:  # the page's last, its dict not kept: its JSON came with it
                parts.append(record.text)
                continue
            entry = entries.get(record[id_field])
            if entry is not None and entry[0] is record:
                parts.append(entry[1])
            else:  # kept by the store: kept here as a write's record is
                parts.append(self.encode(model, record, json_bytes(record)))
        return b",".join(parts)

    def projected(self, model: CompiledModel, projection: str, records: list[Record]) -> list[bytes]:
        """Each record's JSON under `projection` (declared by the model), kept as `encode`
        keeps the whole record's: fresh while the store hands out the same record object,
        at most `capacity` entries per model and projection, none over `largest`. A list
        page with `projection=` otherwise encodes its 20 records on every request (issue
        36's list matrix, bench/README.md)."""
        entries = self._projected.setdefault((model.name, projection), OrderedDict())
        project, id_field = model.project[projection], model.id_field
        out = []
        for record in records:
            key = record[id_field]
            entry = entries.get(key)
            if entry is not None and entry[0] is record:
                out.append(entry[1])
                continue
            data = json_bytes(project(record))
            if len(data) > self.largest:
                entries.pop(key, None)
            else:
                if entry is None and len(entries) >= self.capacity:
                    entries.popitem(last=False)
                entries[key] = (record, data)
            out.append(data)
        return out


class PastPages:
    """List answers at a past watermark (`as_of` below the model's current watermark), kept
    whole: body and headers.

    The state at watermark n never changes within an epoch (rows are only appended after
    it), so neither does a list of it, its `total`, its `Link` or, with `expand=`, what it
    embeds (every model read at that moment, expand.py rule 4); making one costs the live
    plan plus the rows written since (storage/query.py `page_as_of`: O(k) for k later rows,
    each request), where a kept one is a dict lookup (bench/README.md, "A page of 20
    records"). An entry is kept for one store in one epoch: a compaction starts an epoch
    whose watermarks name other states, and a replica bootstrapped again serves another
    store; either one makes the entry stale, and it is made again. The app never keeps the
    answer of a model with access rules (it depends on the token) nor one at the current
    watermark (the live state, which the next write changes).

    `store` is the app's `ServedStore` (its `epoch` is read; interfaces.py is not imported
    here). Keyed by the model and the request's decoded query pairs, as `ParsedQueries`; at
    most `capacity` entries, the oldest dropped first, none whose body is over `largest`
    bytes or whose target is over `longest` characters: at most capacity x largest bytes.
    """

    __slots__ = ("_entries", "capacity", "largest", "longest")

    def __init__(self, capacity: int = 256, largest: int = 65536, longest: int = 512) -> None:
        self.capacity = capacity
        self.largest = largest
        self.longest = longest
        self._entries: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, str, bytes, tuple]] = (
            OrderedDict()
        )

    def __len__(self) -> int:
        """Answers kept (at most `capacity`)."""
        return len(self._entries)

    def get(self, store: Any, model: CompiledModel, request: Request) -> tuple[bytes, list] | None:
        """(body, headers) kept for this list in `store`'s current epoch, or None."""
        entry = self._entries.get((model.name, tuple(request.query)))
        if entry is None or entry[0] is not store or entry[1] != store.epoch:
            return None
        return entry[2], list(entry[3])

    def keep(self, store: Any, model: CompiledModel, request: Request, body: bytes, headers: list) -> None:
        """Keep the answer of a list at a past watermark of `store` (the caller knows it is)."""
        if len(body) > self.largest or len(request.target) > self.longest:
            return
        entries, key = self._entries, (model.name, tuple(request.query))
        if key not in entries and len(entries) >= self.capacity:
            entries.popitem(last=False)
        entries[key] = (store, store.epoch, body, tuple(headers))


class PresentPages:
    """List answers of the present (no `as_of`) kept whole: the body, the model's watermark
    and the `Link`, fresh while nothing the answer reads has changed.

    Freshness: an entry holds the store, its epoch, and the change tick (storage/table.py
    `Table.tick`, `ServedStore.tick`) of every model the answer reads: the listed model,
    and with `expand=` each model it embeds. A tick moves on every change of a table's live
    state (a write, the undo of a refused write, a batch, a replica's applied frames, a
    load) and never takes a value it had, so an entry whose ticks are all the store's
    ticks now was made from the very state the store holds: its body, `total` and `Link`
    are what the list would answer again. A compaction starts an epoch (the watermark is
    renumbered) and a replica bootstrapped again is another store: either makes the entry
    stale. The `Dbsvc-Offset` header (the store's head, moved by any model's write) is
    never kept: the app writes it afresh on each answer.

    What is never kept (the app decides, app.py `list`): an answer that depends on the
    token (a model with access rules, or `expand=` in a schema with rules), one with
    `as_of` (`PastPages` keeps those). A read is a dict lookup and a comparison of ticks,
    about a GET's cost, where a page of 20 whole records costs a plan, the records' dicts
    and their JSON (bench/README.md, "Lists of the present, kept").

    Keyed by the request's path and decoded query pairs, from which the generated parser's
    answer follows; at most `capacity` entries and `budget` bytes of bodies and links, the
    oldest dropped first; none whose body is over `largest` bytes or whose target is over
    `longest` characters. A stale entry is dropped when it is found.
    """

    __slots__ = ("_asked", "_entries", "budget", "capacity", "kept_bytes", "largest", "longest")

    def __init__(self, capacity: int = 512, largest: int = 65536, budget: int = 8 << 20, longest: int = 512) -> None:
        self.capacity = capacity
        self.largest = largest
        self.budget = budget
        self.longest = longest
        self.kept_bytes = 0  # bodies and links held: at most `budget`
        self._entries: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, ...]] = OrderedDict()
        self._asked = SecondAsk(capacity)  # pages at a cursor or an offset asked once (`admits_page`)

    def __len__(self) -> int:
        return len(self._entries)

    def size(self) -> tuple[int, int]:
        """(answers kept, bytes of their bodies and links): /metrics' list cache gauges."""
        return len(self._entries), self.kept_bytes

    def get(self, store: Any, request: Request) -> tuple[bytes, int, str | None] | None:
        """(body, watermark, Link value or None) kept for this list and still fresh, or None."""
        key = (request.path, tuple(request.query))
        entry = self._entries.get(key)
        if entry is None:
            return None
        kept, epoch, names, ticks, body, watermark, link = entry
        if kept is store and epoch == store.epoch:
            tick = store.tick
            for name, was in zip(names, ticks):
                if tick(name) != was:
                    break
            else:
                return body, watermark, link
        self._drop(key)
        return None

    def admits_page(self, request: Request) -> bool:
        """Whether the answer of a page at a cursor or an offset (`ParsedList.base`) is
        worth keeping: only when this target was asked once already among the last
        `capacity` such pages not kept (admission.py). A client asking pages at many
        cursors or offsets asks most of them once, and keeping each cost its insertion and
        an older answer's eviction for no hit; one target asked again and again (a polled
        page) is kept from its second ask. Lists without a cursor or an offset are kept at
        once, as before.

        Counted by the raw target (`request.target`, at hand and its hash kept by the str),
        where a tuple of the path and the decoded pairs was made and hashed on every ask:
        two spellings of one query (`%20` and `+`, `%2C` and `,`) are two targets here, each
        admitted from its own second ask, though the answer kept is found by either
        (`get` keys by the path and the decoded pairs)."""
        return self._asked.admits(request.target)

    def keep(
        self, store: Any, request: Request, names: tuple[str, ...], body: bytes, watermark: int, link: str | None
    ) -> None:
        """Keep a present list's answer, made from the store's state now (the caller has not
        awaited since): `names` are the models it read."""
        size = len(body) + (len(link) if link is not None else 0)
        if len(body) > self.largest or len(request.target) > self.longest or size > self.budget:
            return
        key = (request.path, tuple(request.query))
        self._drop(key)
        entries = self._entries
        while entries and (len(entries) >= self.capacity or self.kept_bytes + size > self.budget):
            self._drop(next(iter(entries)))
        ticks = tuple(map(store.tick, names))
        entries[key] = (store, store.epoch, names, ticks, body, watermark, link)
        self.kept_bytes += size

    def _drop(self, key: tuple[str, tuple[tuple[str, str], ...]]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            link = entry[6]
            self.kept_bytes -= len(entry[4]) + (len(link) if link is not None else 0)
