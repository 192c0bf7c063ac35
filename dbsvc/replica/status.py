"""What a read replica says about its following: `ReplicaStatus`, shown by `/metrics` and `/snapshot`.

The application (app.py) names this type for every server, replica or not; keeping it
here, apart from follower.py, means `import dbsvc.app` loads neither the blocking
WebSocket client (`dbsvc.http.ws.client`) nor the consumer nor the follower
(tests/test_import_weight.py holds it to that).

Imports only the standard library; never the follower, the consumer, the WebSocket client
or anything of the server side. The follower (follower.py rules 4, 5 and 8) is the only
writer of a status; the application only reads it (`report`, `waiting_for`, `health`).

Readiness (follower.py rule 8): a replica is ready once its store holds a primary's epoch:
`synced` is set by its first bootstrap, by a connection that finds it already in the
primary's epoch, or at start by a store that holds rows (it followed before, so it serves a
consistent past state of the primary). Until then `/ready` answers 503 with `waiting_for`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReplicaStatus:
    """What `/metrics` and `/snapshot` say about the following (follower.py rule 5)."""

    primary: str
    state: str = "starting"  # bootstrapping | following | reconnecting | stopped | diverged
    primary_offset: int = 0
    caught_up_at: float | None = None  # monotonic time we last had the primary's head
    error: str | None = None
    bootstraps: int = 0
    compactions: int = 0  # compactions at the primary's cut (follower.py rule 9)
    reconnects: int = 0
    synced: bool = False  # the store holds a primary's epoch (rule 8 of follower.py)
    extra: dict[str, Any] = field(default_factory=dict)

    def report(self, head: int) -> dict[str, Any]:
        """The status as a JSON object, given our own head offset `head` (lag per rule 5)."""
        primary = max(self.primary_offset, head)
        caught_up = head >= primary
        seconds = 0.0 if caught_up or self.caught_up_at is None else time.monotonic() - self.caught_up_at
        return {
            "primary": self.primary,
            "state": self.state,
            "primary_offset": primary,
            "lag_offsets": primary - head,
            "lag_seconds": round(seconds, 3),
            "bootstraps": self.bootstraps,
            "compactions": self.compactions,
            "reconnects": self.reconnects,
            "error": self.error,
        }

    def waiting_for(self) -> str | None:
        """What keeps this replica from being ready, or None once it is (`/ready`, `/health`)."""
        if self.synced:
            return None
        why = f" ({self.state}: {self.error})" if self.error else f" ({self.state})"
        return f"the first bootstrap from its primary {self.primary}{why}"

    def health(self) -> dict[str, Any]:
        """What `/health` says of the following: which primary, the state, readiness."""
        return {
            "primary": self.primary,
            "state": self.state,
            "ready": self.synced,
            "waiting_for": self.waiting_for(),
            "detail": self.error,
        }
