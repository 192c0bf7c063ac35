"""A read replica whose first bootstrap snapshot arrives damaged (dbsvc/replica/follower.py
rule 2): a real primary, a relay between it and a real replica (tests/support/relay.py) that
damages every `/replicate/snapshot` until healed. The replica used to die at start with a
traceback (prepare() let the StreamError, the CorruptLog or a bare ValueError escape); it now
starts and serves, says why it is not ready (`/ready` 503, `/health`, the log), keeps its
store empty rather than install what came, and converges once the bytes pass cleanly.
Every wait is a poll with a deadline."""

from __future__ import annotations

import time

import pytest

from support.relay import Relay
from support.server import ROOT, Server, server_pool

BLOG = ROOT / "schemas" / "blog.dbs"
DEADLINE = 30.0

pytestmark = pytest.mark.timeout(180)

WHY = {
    "crc": "replication frame at offset 0: the snapshot arrived damaged (size or crc32)",
    "end": "replication frame at offset 0: the snapshot stream's end message is not JSON: ",
    "rows": "/replicate/snapshot: corrupt at byte 0: snapshot line checksum mismatch",
}


def wait_until(what: str, done, server: Server) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, f"never {what}: {server.get('/health').body!r}"
        time.sleep(0.05)


def users(server: Server) -> list:
    return server.get("/api/user?limit=1000").json["data"]


@pytest.mark.parametrize("mode", ["crc", "end", "rows"])
def test_a_replica_whose_bootstrap_snapshot_arrives_damaged_starts_reports_it_and_converges(tmp_path, mode):
    with server_pool(tmp_path) as pool:
        primary = pool(BLOG, None, tmp_path / "primary")
        for i in range(3):
            body = {"email": f"u{i}@x.io", "name": f"n{i}"}
            assert primary.post("/api/user", body).status == 201
        before = (primary.get("/snapshot").json, users(primary))
        relay = Relay(primary.port, mode)
        try:
            replica = pool(BLOG, None, tmp_path / "replica", ("--follow", relay.base))  # it used to die here
            assert relay.damaged >= 1 and replica.proc.poll() is None
            health = replica.get("/health")
            assert health.status == 200
            state = health.json["replica"]
            assert state["ready"] is False and state["state"] in ("reconnecting", "bootstrapping"), state
            assert state["detail"].startswith("bootstrap failed: ") and WHY[mode] in state["detail"], state
            ready = replica.get("/ready")
            assert ready.status == 503 and WHY[mode] in ready.json["detail"], ready
            assert "retrying while serving" in "".join(replica.log)
            snap = replica.get("/snapshot").json
            assert (snap["offset"], snap["replica"]["bootstraps"]) == (0, 0)  # nothing of it installed
            assert users(replica) == []
            relay.heal()
            wait_until(
                "converged",
                lambda: (
                    replica.get("/snapshot").json["offset"] == before[0]["offset"]
                    and replica.get("/ready").status == 200
                ),
                replica,
            )
            assert users(replica) == before[1]
            snap = replica.get("/snapshot").json
            assert (snap["epoch"], snap["watermarks"]) == (before[0]["epoch"], before[0]["watermarks"])
            state = replica.get("/health").json["replica"]
            assert (state["state"], state["ready"], state["detail"]) == ("following", True, None)
        finally:
            relay.close()  # (the replica's stream goes through it: it reconnects from here on)
        assert (primary.get("/snapshot").json, users(primary)) == before  # the primary as it was
