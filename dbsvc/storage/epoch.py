"""The current epoch of a tenant, as one value: which log, from which offset, what it keeps.

An epoch is the span between two compactions (docs/guide/queries.md#epochs): one log file
whose first frame follows `log_base`, the snapshot that stands at `log_base`, and the
retained segment of older frames (retain.py) that `frames_after` serves before the log::

    Epoch(id, log_path, log_base, checkpoints, retained, snapshot_bytes)
          |    |         |         |            |         +- snapshot file size (0: none yet)
          |    |         |         |            +- retain.Segment before log_base, or None
          |    |         |         +- [(offset, byte position)] every CHECKPOINT_EVERY frames
          |    |         +- offset before the log's first frame (the snapshot's head)
          |    +- the log file's path (the same name in every epoch)
          +- 32 hex digits, written in the log header and the snapshot

Invariants:

1. `recovery.load` builds the first `Epoch`; an online compaction's switch builds the next
   and the store replaces the old one in ONE assignment, so a reader that took the value
   (replay.py) sees either epoch whole, never a mix of two.
2. The value is frozen: a changed part is a new value (`without_retained`). The one part
   that grows in place is `checkpoints`, which the current epoch's writes extend (and a
   rollback trims) while the log grows; a reader bisects it without copying.
3. Pure data: imports only `retain` (for the segment type) and the standard library;
   never store.py, replay.py or the other parts that read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dbsvc.storage.retain import Segment


@dataclass(frozen=True, slots=True)
class Epoch:
    """What describes the current epoch (module docstring)."""

    id: str
    log_path: str
    log_base: int
    checkpoints: list[tuple[int, int]]
    retained: Segment | None = None
    snapshot_bytes: int = 0

    @property
    def oldest_offset(self) -> int:
        """The oldest `after` that `frames_after` serves: the retained segment's base, else the log's."""
        return self.retained.base if self.retained is not None else self.log_base

    def without_retained(self) -> Epoch:
        """This epoch with its retained segment dropped (found damaged: replay.py rule 5)."""
        return dataclasses.replace(self, retained=None)
