"""`import dbsvc.app` loads neither the blocking WebSocket client nor the replica's consumer or follower.

Every `dbsvc serve` imports the application, but only a read replica (`--follow`) and
`dbsvc replicate` need the client side of replication. The application names one replica
type, `ReplicaStatus`, and takes it from the light `dbsvc.replica.status`: a backwards
import of the follower or of its bootstrap (which bring the client and the consumer with
them) would load them into every server again without any test failing, so this one looks
at `sys.modules`. It runs in a fresh interpreter because the test process has long since
imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
import dbsvc.app
heavy = ("ws.client", "replica.consumer", "replica.follower", "replica.bootstrap")
print(json.dumps(sorted(m for m in sys.modules if any(part in m for part in heavy))))
"""


def loaded_by(probe: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_importing_the_app_loads_no_websocket_client_consumer_or_follower():
    assert loaded_by(PROBE) == []


def test_importing_the_websocket_server_does_not_load_the_client():
    probe = (
        "import json, sys\nimport dbsvc.http.ws.server\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dbsvc.http.ws.client'))))"
    )
    assert loaded_by(probe) == []
