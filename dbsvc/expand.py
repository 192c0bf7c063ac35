"""Embedded references: the `_expand` member of a get or a list asked with `expand=`.

The generated parser has already checked the parameter (compiler/expand.py): `Query.expand`
holds `(field, projection or None)` pairs, each a `@ref` field of the model, each once, a
projection one the referenced model declares. This module reads the referenced records and
writes them into the answer (docs/guide/queries.md, "Embedded references"; the choices in
docs/decisions.md, "expand"):

1. Shape (PocketBase's): each record gets one more member, `_expand`, after all of its own
   (after the projected ones under `projection=`), holding one entry per asked field in the
   order asked: `{"id": 7, "author_id": 3, ..., "_expand": {"author_id": {"id": 3, ...}}}`.
   `_expand` is there on every record of an expanded answer, `{}` when no entry is.
2. An entry is absent, never null, when the reference is null, or when the referenced
   record is one the token may not read (the referenced model's `get` rule): the record
   itself, the page and its `total` are unchanged. A foreign key keeps references from
   dangling; a reference to a record that did not exist at an `as_of` moment (rule 4) is
   absent too.
3. The reference is read from the whole record, so a projection that leaves the `@ref`
   field out still expands it. An entry is the referenced record whole, or its `:projection`.
4. `as_of=N`: each referenced model is read at the moment `N` names for the model read
   (`ServedStore.watermarks_at`, storage/instants.py: the last moment its watermark was N).
   The answer for a past watermark never changes within an epoch, so it is cached.
5. Cost: one lookup per distinct referenced record per answer: twenty posts of one
   author read and encode that author once. At most one level: an embedded record is
   never expanded itself.
6. Kept across answers: the entries of the present (no `as_of`) of a referenced model
   without access rules are kept, by (field, projection) and id, while that model's
   change tick (`ServedStore.tick`, storage/table.py) is the one they were made at: any
   change of its live state drops them all at the next answer, so an entry is always the
   referenced record's JSON now, and a page whose parents were embedded lately reads and
   encodes none of them again. At most `kept_capacity` entries a field (then they start over).
7. A list's expanded page of the present, when no model it embeds has access rules, is kept
   whole (`page`) by the identities of its record objects, as the app's encoded pages are
   (readcache.py `encode_page`: the store hands out one object per record version), with
   the embedded models' ticks (rule 6): the same record objects under the same ticks are
   the same bytes. A page made afresh whose records were expanded lately is then a tuple of
   ids and a probe, where it embedded and joined each record (bench/README.md, "The
   cursor page, range sorted by it, expand"). At most `capacity` pages, none over 64 KiB.

Imports runtime, rules and interfaces only (tests/test_layers.py, the `expand` row).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbsvc.interfaces import ServedStore
from dbsvc.rules import Claims
from dbsvc.runtime import CompiledModel, Query, Record, json_bytes

Encode = Callable[[CompiledModel, Record], bytes]  # a live record's JSON (the app's cache)
_MISSING = b""  # not looked up yet (an entry's text is never empty)

# One asked field: (field, the referenced model, its projection or None, b'"field":')
Step = tuple[str, CompiledModel, "str | None", bytes]


class Expander:
    """Writes `_expand` into encoded records (module docstring). One per application."""

    def __init__(self, models: Sequence[CompiledModel], encode: Encode, capacity: int = 256) -> None:
        self.models = {m.name: m for m in models}
        self.encode = encode
        self.capacity = capacity
        # (epoch, model, as_of) -> every model's watermark then (rule 4), for past watermarks
        self._moments: OrderedDict[tuple[str, str, int], dict[str, int]] = OrderedDict()
        # (model, Query.expand) -> its steps: the parsed queries are few (parsedlists.py)
        self._plans: OrderedDict[tuple[str, tuple[tuple[str, str | None], ...]], list[Step]] = OrderedDict()
        # (referenced model, field, projection) -> (the model's tick, id -> the entry's text): rule 6
        self._kept: dict[tuple[str, str, str | None], tuple[int, dict[Any, bytes | None]]] = {}
        self.kept_capacity = 4096
        # (model, Query.expand, projection, the records' id()s) -> (the records, the embedded
        # models' ticks, the joined page): rule 7
        self._pages: OrderedDict[tuple[Any, ...], tuple[tuple[Record, ...], tuple[int, ...], bytes]] = OrderedDict()
        self.largest_page = 65536

    def page(
        self,
        store: ServedStore,
        model: CompiledModel,
        query: Query,
        records: Sequence[Record],
        encode: Callable[[], Sequence[bytes]],
        claims: Claims,
    ) -> bytes:
        """`records` (a list's page) each with its `_expand`, joined by commas: `records()`
        over `encode()` (their JSON, projected or not), kept by rule 7 when it may be."""
        steps = self._plan(model, query.expand)
        if query.as_of is not None or any(step[1].rules is not None for step in steps):
            return b",".join(self.records(store, model, query, records, encode(), claims))
        ticks = tuple([store.tick(step[1].name) for step in steps])
        key = (model.name, query.expand, query.projection, tuple(map(id, records)))
        kept = self._pages.get(key)
        if kept is not None and kept[1] == ticks:
            return kept[2]
        page = b",".join(self.records(store, model, query, records, encode(), claims))
        if len(page) <= self.largest_page:
            if kept is None and len(self._pages) >= self.capacity:
                self._pages.popitem(last=False)
            self._pages[key] = (tuple(records), ticks, page)
        return page

    def records(
        self,
        store: ServedStore,
        model: CompiledModel,
        query: Query,
        records: Sequence[Record],
        encoded: Sequence[bytes],
        claims: Claims,
    ) -> list[bytes]:
        """Each of `encoded` (the JSON of `records`, projected or not) with its `_expand`.
        Straight loops with the page's caches inline: the per-record work is a dict probe
        per asked field (rule 5; bench/README.md, "expand")."""
        moment = self.moment(store, model, query.as_of)
        steps = self._plan(model, query.expand)
        found: dict[tuple[str, Any], Record | None] = {}  # (model, id) -> record or None: one read each
        # per step, id -> `"field":{...}` or None (rule 2): the entries kept for its model's
        # tick (rule 6), or this answer's own (as_of, access rules)
        known = [
            self._kept_now(store, parent, field, projection) if moment is None and parent.rules is None else {}
            for field, parent, projection, _prefix in steps
        ]
        plan = [(*step, texts) for step, texts in zip(steps, known)]
        capacity = self.kept_capacity
        out = []
        for record, data in zip(records, encoded):
            entries = []
            for field, parent, projection, prefix, texts in plan:
                key = record[field]
                if key is None:
                    continue  # rule 2: a null reference has no entry
                text = texts.get(key, _MISSING)
                if text is _MISSING:
                    text = self._entry(store, parent, key, projection, prefix, moment, claims, found)
                    if len(texts) < capacity:
                        texts[key] = text
                if text is not None:
                    entries.append(text)
            joined = b'"_expand":{' + b",".join(entries) + b"}}"
            out.append(data[:-1] + (b"," + joined if len(data) > 2 else joined))
        return out

    def _entry(
        self,
        store: ServedStore,
        parent: CompiledModel,
        key: Any,
        projection: str | None,
        prefix: bytes,
        moment: Mapping[str, int] | None,
        claims: Claims,
        found: dict[tuple[str, Any], Record | None],
    ) -> bytes | None:
        """`"field":` and the JSON of the referenced record, or None (rule 2)."""
        if (parent.name, key) in found:
            record = found[(parent.name, key)]
        else:
            as_of = None if moment is None else moment[parent.name]
            record, _watermark = store.get(parent.name, key, as_of)
            rules = parent.rules
            if record is not None and rules is not None and not rules.get(record, claims):
                record = None  # hidden, as if absent
            found[(parent.name, key)] = record
        if record is None:
            return None
        if projection is not None:
            return prefix + json_bytes(parent.project[projection](record))
        if moment is None:
            return prefix + self.encode(parent, record)
        return prefix + json_bytes(record)  # a past version: not one for the live records' cache

    def _kept_now(
        self, store: ServedStore, parent: CompiledModel, field: str, projection: str | None
    ) -> dict[Any, bytes | None]:
        """The entries of `field` (under `projection`) kept at `parent`'s tick now (rule 6):
        those kept before, or none. A record absent now may be kept as None: its insert
        moves the tick."""
        tick = store.tick(parent.name)
        key = (parent.name, field, projection)
        kept = self._kept.get(key)
        if kept is None or kept[0] != tick or len(kept[1]) >= self.kept_capacity:
            kept = self._kept[key] = (tick, {})
        return kept[1]

    def _plan(self, model: CompiledModel, expand: tuple[tuple[str, str | None], ...]) -> list[Step]:
        steps = self._plans.get((model.name, expand))
        if steps is None:
            parents = dict(model.refs)
            steps = [(f, self.models[parents[f]], p, json_bytes(f) + b":") for f, p in expand]
            if len(self._plans) >= self.capacity:
                self._plans.popitem(last=False)
            self._plans[(model.name, expand)] = steps
        return steps

    def moment(self, store: ServedStore, model: CompiledModel, as_of: int | None) -> dict[str, int] | None:
        """Where `as_of` on `model` reads every model (rule 4); None: the present."""
        if as_of is None or as_of >= store.watermarks()[model.name]:
            return None
        key = (store.epoch, model.name, as_of)
        moment = self._moments.get(key)
        if moment is None:
            moment = store.watermarks_at(model.name, as_of)
            if len(self._moments) >= self.capacity:
                self._moments.popitem(last=False)
            self._moments[key] = moment
        return moment
