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
5. Cost: one lookup per distinct referenced record per answer (`_Page`): twenty posts of
   one author read and encode that author once. At most one level: an embedded record is
   never expanded itself.

Imports runtime, rules and interfaces only (tests/test_layers.py, the `expand` row).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbsvc.interfaces import ServedStore
from dbsvc.rules import Claims
from dbsvc.runtime import CompiledModel, Query, Record, json_bytes

Encode = Callable[[CompiledModel, Record], bytes]  # a live record's JSON (the app's cache)


class _Page:
    """The referenced records one answer embeds, each read and encoded once (rule 5)."""

    __slots__ = ("claims", "encode", "found", "models", "moment", "store", "texts")

    def __init__(
        self,
        store: ServedStore,
        models: Mapping[str, CompiledModel],
        moment: Mapping[str, int] | None,
        claims: Claims,
        encode: Encode,
    ) -> None:
        self.store = store
        self.models = models
        self.moment = moment  # model -> the watermark to read it at; None: the present
        self.claims = claims
        self.encode = encode
        self.found: dict[tuple[str, Any], Record | None] = {}
        self.texts: dict[tuple[str, Any, str | None], bytes | None] = {}

    def entry(self, parent: str, key: Any, projection: str | None) -> bytes | None:
        """The JSON of the referenced record `key` of `parent` (projected), or None."""
        text_key = (parent, key, projection)
        if text_key in self.texts:
            return self.texts[text_key]
        record = self.record(parent, key)
        text: bytes | None = None
        if record is not None:
            model = self.models[parent]
            if projection is not None:
                text = json_bytes(model.project[projection](record))
            elif self.moment is None:
                text = self.encode(model, record)
            else:  # a past version: not one for the live records' cache
                text = json_bytes(record)
        self.texts[text_key] = text
        return text

    def record(self, parent: str, key: Any) -> Record | None:
        found_key = (parent, key)
        if found_key in self.found:
            return self.found[found_key]
        as_of = None if self.moment is None else self.moment[parent]
        record, _watermark = self.store.get(parent, key, as_of)
        rules = self.models[parent].rules
        if record is not None and rules is not None and not rules.get(record, self.claims):
            record = None  # rule 2: hidden, as if absent
        self.found[found_key] = record
        return record


class Expander:
    """Writes `_expand` into encoded records (module docstring). One per application."""

    def __init__(self, models: Sequence[CompiledModel], encode: Encode, capacity: int = 256) -> None:
        self.models = {m.name: m for m in models}
        self.encode = encode
        self.capacity = capacity
        # (epoch, model, as_of) -> every model's watermark then (rule 4), for past watermarks
        self._moments: dict[tuple[str, str, int], dict[str, int]] = {}
        self._names = {field: json_bytes(field) for m in models for field, _parent in m.refs}

    def records(
        self,
        store: ServedStore,
        model: CompiledModel,
        query: Query,
        records: Sequence[Record],
        encoded: Sequence[bytes],
        claims: Claims,
    ) -> list[bytes]:
        """Each of `encoded` (the JSON of `records`, projected or not) with its `_expand`."""
        page = _Page(store, self.models, self.moment(store, model, query.as_of), claims, self.encode)
        parents = dict(model.refs)
        names = self._names
        out = []
        for record, data in zip(records, encoded):
            entries = []
            for field, projection in query.expand:
                key = record[field]
                if key is None:
                    continue  # rule 2: a null reference has no entry
                text = page.entry(parents[field], key, projection)
                if text is not None:
                    entries.append(names[field] + b":" + text)
            joined = b'"_expand":{' + b",".join(entries) + b"}}"
            out.append(data[:-1] + (b"," + joined if len(data) > 2 else joined))
        return out

    def moment(self, store: ServedStore, model: CompiledModel, as_of: int | None) -> dict[str, int] | None:
        """Where `as_of` on `model` reads every model (rule 4); None: the present."""
        if as_of is None or as_of >= store.watermarks()[model.name]:
            return None
        key = (store.epoch, model.name, as_of)
        moment = self._moments.get(key)
        if moment is None:
            moment = store.watermarks_at(model.name, as_of)
            if len(self._moments) >= self.capacity:
                del self._moments[next(iter(self._moments))]
            self._moments[key] = moment
        return moment
