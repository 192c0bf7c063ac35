"""Sort keys by id: one `@sort` field's id -> key lookup, kept by its ordered index.

An ordered index (indexes.py) answers "which ids, in key order"; a list that orders a set
of ids it got elsewhere (a filter's bucket, a search's matches, a run of equal first keys
ordered by the next key) asks the other way round, "which key has this id". Reading it out
of the stored record means parsing the record's JSON (`rows.unpack`), the costliest step of
a list that sorts a bucket (issue 36: 14% of a list's CPU for `author_id=X&sort=-score`).
A `KeyColumn` answers it from memory: the same key objects the ordered index holds (the
key function's output: a float, an int, a datetime's microseconds, a str), by id.

Layout (the idea of idmap.py's `IdMap`): for int ids, a sequence indexed by id, `slots`:

    typecode "d" or "q" (a number field, indexes.py `OrderedIndex.typecode`): an `array`,
                        8 bytes an id, placeholder 0 where no key is
    otherwise           a list, 8 bytes an id (the key object is the index's own), None
                        where no key is

and ids the sequence would hold badly in a dict beside it (`far`): negative ids, ids far
past the end (past max(2 * the keys held, len(slots) + STEP), as IdMap decides), and every
id of a table whose ids are strings. An id stays where it was first put until it is
discarded. The ids whose key is null are also in `nulls` (a set: an array cannot hold
None, and a list's None would not tell a null from an empty slot).

Invariants: `set` is called only for an id the column does not hold, `discard` and
`change` only for one it holds (the ordered index calls them from its own `add`, `remove`
and `move`, which keep the same rule), so the column holds exactly the index's ids, each
with the index's key.
Costs: 8 bytes an int id in `slots` (an array of 1,000,000 floats is 8 MB; a list of str
keys adds 8 bytes a record beside the key objects the index already holds), a dict entry
an id in `far`; a set entry a null.

`order` sorts ids by key in one C sort (`list.sort(key=slots.__getitem__)`, no Python
code per id) after the nulls are set apart: nulls last ascending, first descending, the
order the ids came in kept among equal keys (a stable sort; `reverse=True` is stable too),
so sorting ids ascending first and then by each sort key from the last gives
query.py's order (ties on the id ascending).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import compress
from operator import not_
from sys import getsizeof
from typing import Any

STEP = 1024  # ids past the end that grow the slots whatever the count (idmap.py's)


class KeyColumn:
    """id -> sort key of one field's live records (module docstring)."""

    __slots__ = ("_count", "far", "nulls", "slots", "typecode")

    def __init__(self, typecode: str = "") -> None:
        self.typecode = typecode
        self.slots: Any = array(typecode) if typecode else []
        self.far: dict[Any, Any] = {}
        self.nulls: set[Any] = set()
        self._count = 0  # ids held in `slots`

    @classmethod
    def from_columns(cls, keys: Sequence[Any], ids: Sequence[Any], typecode: str = "") -> KeyColumn:
        """The column of records whose ids are `ids`, strictly ascending (a snapshot's),
        with keys `keys` (None for a null; an array when no key is null): one sequence
        built at once where the ids fit it, a scatter only when they leave gaps."""
        column = cls(typecode)
        if not len(ids):
            return column
        first, last = ids[0], ids[-1]
        if type(first) is not int or first < 0 or last >= max(2 * len(ids), STEP):  # held badly
            for id_, key in zip(ids, keys):
                column.set(id_, key)
            return column
        nulls = type(keys) is not array and None in keys
        if nulls:
            column.nulls = {i for i, k in zip(ids, keys) if k is None}
        slots: Any
        if typecode:
            filled = keys if not nulls else [0 if k is None else k for k in keys]
            if last - first + 1 == len(ids):  # no gaps: one copy
                slots = array(typecode, bytes(8 * first))
                slots.extend(filled if type(filled) is array else array(typecode, filled))
            else:
                slots = array(typecode, bytes(8 * (last + 1)))
                for id_, key in zip(ids, filled):
                    slots[id_] = key
        elif last - first + 1 == len(ids):
            slots = [None] * first
            slots.extend(keys)
        else:
            slots = [None] * (last + 1)
            for id_, key in zip(ids, keys):
                slots[id_] = key
        column.slots, column._count = slots, len(ids)
        return column

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, Any]], typecode: str = "") -> KeyColumn:
        column = cls(typecode)
        for key, id_ in pairs:
            column.set(id_, key)
        return column

    def __len__(self) -> int:
        return self._count + len(self.far)

    def set(self, id_: Any, key: Any) -> None:
        """`id_`, which the column does not hold, has `key` (None: null)."""
        if key is None:
            self.nulls.add(id_)
        slots = self.slots
        if type(id_) is int and id_ not in self.far:
            n = len(slots)
            if 0 <= id_ < max(2 * self._count, n + STEP):
                if key is None and self.typecode:
                    key = 0
                if id_ == n:  # the next id
                    slots.append(key)
                else:
                    if id_ > n:
                        gap = id_ + 1 - n
                        slots.extend(array(self.typecode, bytes(8 * gap)) if self.typecode else [None] * gap)
                    slots[id_] = key
                self._count += 1
                return
        self.far[id_] = key

    def set_many(self, ids: Sequence[Any], keys: Sequence[Any], ascending: bool = False) -> None:
        """`set` of each id (`ids[n]` has `keys[n]`), with the same result: a run of int
        ids from the end of `slots` on (new ids in order: a follower's group) extends it
        at once; any others are set one by one. `ascending`: the caller knows the ids are
        ints in strictly ascending order, so its first and last say whether they are that run."""
        slots = self.slots
        n = len(slots)
        count = len(ids)
        if (
            not count
            or self.far
            or not (ascending or set(map(type, ids)) == {int})
            or ids[0] != n
            or ids[-1] != n + count - 1
            # (ints, so == is int.__eq__; distinct ascending ints from n to n + count - 1 are that range)
            or not (ascending or ids == list(range(n, n + count)))
        ):
            for id_, key in zip(ids, keys):
                self.set(id_, key)
            return
        if None in keys:
            self.nulls.update(id_ for id_, key in zip(ids, keys) if key is None)
            if self.typecode:
                keys = [0 if key is None else key for key in keys]
        if type(slots) is array and type(keys) is list:
            slots.fromlist(keys)  # an array's `extend` of a list checks and puts each item twice
        else:
            slots.extend(keys)
        self._count += count

    def discard(self, id_: Any) -> None:
        """`id_`, which the column holds, has no key any more."""
        self.nulls.discard(id_)
        far = self.far
        if far and id_ in far:
            del far[id_]
            return
        self.slots[id_] = 0 if self.typecode else None
        self._count -= 1

    def change(self, id_: Any, key: Any) -> None:
        """`id_`, which the column holds, has `key` now (None: null): `discard` then `set`
        in one write, the id left where it is (in `slots` or `far`)."""
        nulls = self.nulls
        if key is None:
            nulls.add(id_)
        elif nulls:
            nulls.discard(id_)
        far = self.far
        if far and id_ in far:
            far[id_] = key
        else:
            self.slots[id_] = 0 if key is None and self.typecode else key

    def get(self, id_: Any) -> Any:
        """The key of `id_`, which the column holds (None: null)."""
        far = self.far
        if far and id_ in far:
            return far[id_]
        if self.nulls and id_ in self.nulls:
            return None
        return self.slots[id_]

    def order(self, ids: Iterable[Any], desc: bool) -> list[Any]:
        """`ids` (held) as a new list in key order, ascending with nulls last or descending
        with nulls first, equal keys left in the order they came (module docstring)."""
        out = list(ids)
        nulls = self.nulls
        ahead: list[Any] = []
        if nulls:
            flags = list(map(nulls.__contains__, out))
            if any(flags):
                ahead = list(compress(out, flags))
                out = list(compress(out, map(not_, flags)))
        out.sort(key=self.get if self.far else self.slots.__getitem__, reverse=desc)
        if not ahead:
            return out
        return ahead + out if desc else out + ahead

    def nbytes(self) -> int:
        """The bytes the column's own containers take (not the key objects, which the
        ordered index shares; for the memory figures)."""
        return getsizeof(self.slots) + getsizeof(self.far) + getsizeof(self.nulls)
