"""The id -> stored record map of a table whose ids are ints: a list indexed by id.

A dict of 1,000,000 entries costs 42 bytes an entry (its index table and its entries
array, sized for two thirds full); a list slot costs 8. Ids of an int-id table are mostly
1..n, handed out in order (`max_id + 1`), so a list whose slot `id` holds the stored record
(None where no record is) is the dict's map in a fifth of the memory: 467 -> 434 bytes
of RSS a record at 1,000,000 posts (bench/README.md, "Records as bytes").

Ids the list would hold badly go to a dict beside it (`_far`): negative ids, and ids far
past the list's end, where growing the list to them would cost more than the dict (an id
past max(2 * the records held, the list's length + `STEP`)). So a table of sparse ids, say
explicit ids in the billions, costs what it did with a dict, plus one comparison a lookup.
An id stays where it was first put until it is deleted (the list may later grow past an id
the dict holds: a lookup that finds an empty slot asks the dict).

Lookups are Python calls instead of a dict's C lookup: a little more each, and a request
makes only a few (bench/README.md). Iteration is in ascending id order for the list, then the dict's ids (a dict
iterated in insertion order; nothing reads `live` in an order but tests comparing maps).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

from dbsvc.storage.rows import Stored

STEP = 1024  # ids past the list's end that grow it whatever the count


class IdMap(MutableMapping[Any, Stored]):
    __slots__ = ("_count", "_far", "_slots")

    def __init__(self, pairs: Iterable[tuple[Any, Stored]] = ()) -> None:
        self._slots: list[Stored | None] = []
        self._far: dict[Any, Stored] = {}
        self._count = 0  # records in the list
        self.update(pairs)

    @property
    def slots(self) -> list[Stored | None]:
        """The list part, by id (None where no record): read it, never write it."""
        return self._slots

    @property
    def far(self) -> dict[Any, Stored]:
        """The dict part: ids the list does not reach. Read it, never write it."""
        return self._far

    @classmethod
    def from_ascending(cls, ids: list[Any], stored: list[Stored]) -> IdMap:
        """The map of `stored` records whose ids are `ids`, ascending ints (a snapshot's):
        one list built at once, ids it would hold badly in the dict."""
        out = cls()
        if not ids or ids[0] < 0 or ids[-1] >= max(2 * len(ids), STEP):  # held badly
            out.update(zip(ids, stored))
        elif ids[-1] - ids[0] + 1 == len(ids):  # no gaps: one copy
            out._slots, out._count = [None] * ids[0] + stored, len(ids)
        else:
            slots: list[Stored | None] = [None] * (ids[-1] + 1)
            for id_, record in zip(ids, stored):
                slots[id_] = record
            out._slots, out._count = slots, len(ids)
        return out

    def _near(self, id_: Any) -> bool:
        """Whether `id_` belongs in the list (growing it if need be)."""
        return type(id_) is int and 0 <= id_ < max(2 * self._count, len(self._slots) + STEP)

    def __getitem__(self, id_: Any) -> Stored:
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots):
            record = slots[id_]
            if record is not None:
                return record
        return self._far[id_]

    def get(self, id_: Any, default: Any = None) -> Any:
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots):
            record = slots[id_]
            if record is not None:
                return record
        return self._far.get(id_, default)

    def __contains__(self, id_: object) -> bool:
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots) and slots[id_] is not None:
            return True
        return id_ in self._far

    def __setitem__(self, id_: Any, record: Stored) -> None:
        slots = self._slots
        if type(id_) is int and id_ == len(slots) and id_ not in self._far:  # the next id
            slots.append(record)
            self._count += 1
            return
        if type(id_) is int and 0 <= id_ < len(slots) and slots[id_] is not None:
            slots[id_] = record
        elif id_ in self._far:
            self._far[id_] = record
        elif self._near(id_):
            if id_ >= len(slots):
                slots.extend([None] * (id_ + 1 - len(slots)))
            slots[id_] = record
            self._count += 1
        else:
            self._far[id_] = record

    def extend_run(self, ids: list[Any], records: list[Stored], ascending: bool = False) -> None:
        """`self[ids[n]] = records[n]` of each, with the same result: the next ids in order
        from the list's end (a follower's run of new records) extend it at once.
        `ascending`: the caller knows the ids are ints in strictly ascending order
        (tableruns.py finds it once a run), so the first and last say whether they are the
        next ones (distinct ascending ints from n to n + count - 1 are that range) and
        the type set and the list compare, two more passes over the run, are not made."""
        slots = self._slots
        n = len(slots)
        if ascending:
            nexts = bool(ids) and ids[0] == n and ids[-1] == n + len(ids) - 1
        else:
            nexts = bool(ids) and set(map(type, ids)) == {int} and ids == list(range(n, n + len(ids)))
        if self._far or not nexts:
            self.update(zip(ids, records))
            return
        slots.extend(records)
        self._count += len(ids)

    def __delitem__(self, id_: Any) -> None:
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots) and slots[id_] is not None:
            slots[id_] = None
            self._count -= 1
        else:
            del self._far[id_]

    def __len__(self) -> int:
        return self._count + len(self._far)

    def __iter__(self) -> Iterator[Any]:
        slots = self._slots
        yield from (i for i in range(len(slots)) if slots[i] is not None)
        yield from self._far

    def pick(self, ids: list[Any]) -> list[Stored]:
        """The records of `ids`, all held (a list page): the list's own item lookup mapped
        over them in C, no method call (nor comprehension frame) an id."""
        slots, far = self._slots, self._far
        if not far:  # every live id is a slot of the list
            return list(map(slots.__getitem__, ids))  # type: ignore[arg-type]  # all held: no None
        n = len(slots)
        return [r if (r := slots[i] if type(i) is int and 0 <= i < n else None) is not None else far[i] for i in ids]

    def get_many(self, ids: list[Any]) -> list[Stored | None]:
        """`get` of each of `ids`, None for one not held (`pick` where some may be gone: a
        snapshot's chunk, deleted since the cut): the list's own item lookup mapped over
        them in C when every id is an int inside the list, the dict asked for the ids the
        list holds no record for; `get` an id otherwise."""
        slots, far = self._slots, self._far
        if not ids or set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) >= len(slots):
            return list(map(self.get, ids))
        out = list(map(slots.__getitem__, ids))
        if far and None in out:
            out = [r if r is not None else far.get(i) for i, r in zip(ids, out)]
        return out

    def copy(self) -> dict[Any, Stored]:
        """A plain dict of the same entries (an `as_of` state is built on one)."""
        out = {i: r for i, r in enumerate(self._slots) if r is not None}
        out.update(self._far)
        return out


LiveMap = IdMap | dict[Any, Stored]  # a table's `live`: id -> stored record


def records_of(int_ids: bool, ids: list[Any] | None = None, stored: list[Stored] | None = None) -> LiveMap:
    """A table's id -> stored record map: an IdMap for int ids, a dict for any other, of
    `stored` records under `ids` (ascending, a snapshot's) or empty. The one place that
    chooses between the two."""
    ids, stored = ids or [], stored or []
    return IdMap.from_ascending(ids, stored) if int_ids else dict(zip(ids, stored))


def pick(records: LiveMap, ids: list[Any]) -> list[Stored]:
    """The records of `ids`, all held (a list page), from either map."""
    return records.pick(ids) if type(records) is IdMap else list(map(records.__getitem__, ids))


def records_at(records: LiveMap, ids: list[Any]) -> list[Stored | None]:
    """The records of `ids` from either map, None for one not held (`pick` where some may be
    gone: the snapshot thread's chunk of ids at the cut, online.py)."""
    return records.get_many(ids) if type(records) is IdMap else list(map(records.get, ids))
