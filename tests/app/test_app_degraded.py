"""A real server whose store stops taking writes (storage/commit.py rule 4): `/ready` answers
503 `unavailable` while writes are refused, `/health` stays 200 and names the state, reads go
on; after lack of space `/ready` probes for room and the server takes writes again by itself;
after an fsync error it stays read-only until a restart, which serves every acknowledged write.

Faults are `DBSVC_FAULT` plans (dbsvc/storage/files.py); a range `write:N-M:ENOSPC` is a
disk that is full for a while (the probe for room counts as a write call).
"""

from __future__ import annotations

import time

USER = {"email": "a@example.com", "name": "Ann", "role": "reader"}


def _user(n: int) -> dict:
    return dict(USER, email=f"u{n}@example.com", name=f"user {n}")


def _ready_again(server, timeout: float = 60) -> None:
    """Poll /ready (each poll may probe for room, at most once a second) until it is 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = server.get("/ready")
        if reply.status == 200:
            assert reply.json == {"status": "ready"}
            return
        assert reply.status == 503 and reply.json["code"] == "unavailable", reply
        time.sleep(0.2)
    raise AssertionError(f"/ready still {server.get('/ready')} after {timeout} s")


def test_ready_is_503_while_the_disk_is_full_and_200_once_there_is_room(serve):
    # Log write 1 is the first create; writes 2-4 find no space (the create, then two
    # probes); the probe that is write 5 finds room.
    server = serve(env={"DBSVC_FAULT": "write:2-4:ENOSPC"})
    first = server.post("/api/user", _user(1))
    assert first.status == 201
    refused = server.post("/api/user", _user(2))
    assert refused.status == 503 and refused.json["code"] == "unavailable"
    assert "no space" in refused.json["detail"]

    ready = server.get("/ready")
    assert ready.status == 503 and ready.json["code"] == "unavailable"
    assert "no space" in ready.json["detail"]
    health = server.get("/health")
    assert health.status == 200
    assert health.json["status"] == "ok" and health.json["storage"] == "refusing_writes"
    assert "once there is some" in health.json["detail"]
    assert server.get(first.headers["location"]).json["name"] == "user 1"  # reads go on

    _ready_again(server)
    assert list(server.get("/health").json) == ["status", "version", "schema"]  # no storage state
    again = server.post("/api/user", _user(2))
    assert again.status == 201
    assert server.get(again.headers["location"]).json["name"] == "user 2"

    server.stop()
    restarted = serve()
    assert restarted.get(first.headers["location"]).json["name"] == "user 1"
    assert restarted.get(again.headers["location"]).json["name"] == "user 2"
    assert restarted.get("/ready").status == 200


def test_an_fsync_error_is_fail_stop_until_a_restart(serve):
    server = serve(env={"DBSVC_FAULT": "fsync:2:EIO"})
    first = server.post("/api/user", _user(1))
    assert first.status == 201
    refused = server.post("/api/user", _user(2))
    assert refused.status == 503 and refused.json["code"] == "unavailable"

    for _ in range(3):  # polling /ready never brings it back
        ready = server.get("/ready")
        assert ready.status == 503 and "restart the server" in ready.json["detail"]
    health = server.get("/health")
    assert health.status == 200 and health.json["storage"] == "read_only"
    assert server.post("/api/user", _user(3)).status == 503
    assert server.get(first.headers["location"]).status == 200

    server.stop()
    restarted = serve()
    assert restarted.get("/ready").status == 200
    assert list(restarted.get("/health").json) == ["status", "version", "schema"]
    assert restarted.get(first.headers["location"]).json["name"] == "user 1"
    names = [r["name"] for r in restarted.get("/api/user").json["data"]]
    assert names == ["user 1"]  # the refused write is not there
    assert restarted.post("/api/user", _user(2)).status == 201
