"""Storage engine: lock, log, snapshot, indexes, watermarks, group commit, change stream.

No HTTP here; imports only `dbsvc.errors`, `dbsvc.runtime`, `dbsvc.schema.describe` and the
standard library. See store.py for the API and each module's docstring for its file format
and crash rules.
"""

from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.store import Store

__all__ = ["ChangeEvent", "EventKind", "Store"]
