"""Record versions: the log offset of each live record's last write (its ETag, app.py).

Job: `Versions` maps a live record's id to the global offset of the row that last wrote
it (an insert or an update; a delete removes the id), the way CouchDB's `_rev` names a
document's revision. Offsets are global, gap-free, never reused and survive restarts and
compaction (docs/decisions.md, "ETags are log offsets"), so a version names one stored
record for the tenant's whole life: it changes exactly when the record does.

Where a version comes from:

- a write: `Table.stamp(offset)` after the row is applied (writes.py, logreplay.py's
  replay, batch.py), undone by `Table.undo_last`; a follower's run of inserts sets its
  versions together (`set_run`, storage/follow.py);
- a snapshot: format 3 carries each record's version in a versions line per block
  (snapshot.py); a record of an older snapshot (formats 1 and 2 kept no versions) gets
  the snapshot's head offset, an upper bound of its last write, and keeps it from then on:
  the next compaction writes it into the new snapshot, so it never changes again until
  the record does.

Memory (bench/etag_bench.py, bench/README.md "ETags"): for an int-id table an
`array('q')` indexed by id, 8 bytes a slot (0: no live record there; offsets start at 1),
beside the live map's own list (idmap.py); ids the array would hold badly (negative, or
far past its end, the same rule as idmap.py) and the ids of str / uuid tables go to a
dict (about 70 bytes an entry with its int). The history keeps the version of each row's
previous record in a parallel array (table.py `prior`, 8 bytes a row), so an `as_of` read
knows the version of the record it finds.

Imports nothing from dbsvc.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

STEP = 1024  # ids past the array's end that grow it whatever the count (idmap.py's rule)


class Versions:
    """id -> offset of the live record's last write (module docstring)."""

    __slots__ = ("_count", "_far", "_slots")

    def __init__(self) -> None:
        self._slots = array("q")
        self._far: dict[Any, int] = {}
        self._count = 0  # versions held in the array

    @classmethod
    def from_ascending(cls, ids: Sequence[Any], versions: Sequence[int]) -> Versions:
        """The versions of a snapshot's records: `ids` ascending, `versions[i]` of `ids[i]`."""
        out = cls()
        if ids and type(ids[0]) is int and 0 <= ids[0] and ids[-1] < max(2 * len(ids), STEP):
            slots = array("q", bytes(8 * (ids[-1] + 1)))
            if ids[-1] - ids[0] + 1 == len(ids):  # no gaps: one slice
                slots[ids[0] :] = array("q", versions)
            else:
                for id_, version in zip(ids, versions):
                    slots[id_] = version
            out._slots, out._count = slots, len(ids)
        else:
            for id_, version in zip(ids, versions):
                out.set(id_, version)
        return out

    def get(self, id_: Any) -> int:
        """The version of live record `id_`, 0 when it has none (no such record)."""
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots):
            version = slots[id_]
            if version:
                return version
        return self._far.get(id_, 0)

    def get_many(self, ids: Sequence[Any]) -> list[int]:
        """`get` of each of `ids`, in order: for int ids inside the array, its item lookup
        mapped over them in C (a snapshot's 2,048 ids at a time, online.py), so no
        Python frame runs an id; a 0 found there (an id the dict holds) asks the dict."""
        slots = self._slots
        if not ids or set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) >= len(slots):
            return list(map(self.get, ids))
        out = list(map(slots.__getitem__, ids))
        if self._far and 0 in out:
            far = self._far
            out = [v if v else far.get(i, 0) for i, v in zip(ids, out)]
        return out

    def set(self, id_: Any, version: int) -> None:
        assert version > 0, "offsets start at 1"
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots):
            if slots[id_]:
                slots[id_] = version
                return
            if id_ not in self._far:
                slots[id_] = version
                self._count += 1
                return
        elif id_ not in self._far and type(id_) is int and 0 <= id_ < max(2 * self._count, len(slots) + STEP):
            if id_ == len(slots):  # the next id (an insert's usual case): no gap to fill
                slots.append(version)
                self._count += 1
                return
            slots.frombytes(bytes(8 * (id_ + 1 - len(slots))))
            slots[id_] = version
            self._count += 1
            return
        self._far[id_] = version

    def set_run(self, ids: Sequence[Any], versions: Sequence[int]) -> None:
        """`set` of each id in turn, with the same result: new int ids in order from the
        array's end on, none of them far (a follower's run of inserts), extend it at once."""
        slots = self._slots
        start = len(slots)
        if (
            not ids
            or ids[0] != start
            or set(map(type, ids)) != {int}
            or list(ids) != list(range(start, start + len(ids)))
            or not self._far.keys().isdisjoint(ids)
            or min(versions) <= 0
        ):
            for id_, version in zip(ids, versions):
                self.set(id_, version)
            return
        # `fromlist` stores each once; an array's `extend` of a list checks each with the
        # type's setitem and stores it again (about twice the work: bench/README.md, wt-rep21).
        slots.fromlist(versions if type(versions) is list else list(versions))
        self._count += len(ids)

    def pop(self, id_: Any) -> int:
        """Forget `id_` (its record was deleted); its version, 0 if it had none."""
        slots = self._slots
        if type(id_) is int and 0 <= id_ < len(slots):
            version = slots[id_]
            if version:
                slots[id_] = 0
                self._count -= 1
                return version
        return self._far.pop(id_, 0)

    def __len__(self) -> int:
        return self._count + len(self._far)

    def nbytes(self) -> int:
        """The array's bytes (the dict's are the caller's to measure)."""
        return self._slots.buffer_info()[1] * self._slots.itemsize
