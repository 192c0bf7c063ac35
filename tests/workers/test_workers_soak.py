"""A soak of `serve --workers 3` (slow: `pytest -m slow tests/workers`): eight clients write at
once over connections the kernel spread over the writer and two readers, each reading its
own writes back on its connection; afterwards every worker comes to hold the same history
(another connection's last write reaches a reader a moment after it was answered)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from support.server import ROOT
from support.workers_kit import Connection, start_workers

CLIENTS = 8
WRITES = 60  # per client


@pytest.mark.slow
def test_concurrent_writes_through_every_worker_are_read_back_and_every_worker_converges(tmp_path):
    tree = start_workers(ROOT / "schemas" / "blog.dbs", tmp_path / "data", 3)
    failures: list[str] = []
    try:

        def client(k: int) -> None:
            conn = Connection(tree.port)
            try:
                for n in range(WRITES):
                    created = conn.request("POST", "/api/user", {"email": f"c{k}-{n}@x.io", "name": f"c{k}"})
                    if created.status != 201:
                        failures.append(f"client {k} write {n} on {conn.label}: {created}")
                        return
                    read = conn.get(f"/api/user/{created.json['id']}")
                    if read.status != 200:
                        failures.append(f"client {k} read {n} on {conn.label}: {read}")
                        return
            finally:
                conn.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not failures, failures
        head = tree.connection_to("writer").get("/snapshot").json
        assert head["offset"] == CLIENTS * WRITES
        for label in tree.labels:
            conn = tree.connection_to(label)
            end = time.monotonic() + 30  # another connection's last write may still be on its way
            while (snapshot := conn.get("/snapshot").json)["offset"] < head["offset"] and time.monotonic() < end:
                time.sleep(0.02)
            assert (snapshot["epoch"], snapshot["offset"], snapshot["watermarks"]) == (
                head["epoch"],
                head["offset"],
                head["watermarks"],
            ), label
            assert conn.get("/api/user?limit=1").json["total"] == CLIENTS * WRITES
    finally:
        assert tree.stop(signal.SIGTERM) == 0
