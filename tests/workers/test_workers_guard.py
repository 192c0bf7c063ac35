"""`serve --workers 2` behind the token guard: the reader follows its writer with the
supervisor's key, not a token, and a write it forwards is judged by the writer's guard
with the client's own token; the writer's private port refuses anyone without the key."""

from __future__ import annotations

import http.client
import re
import signal

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from support.authkit import TENANT, mint, public_pem
from support.server import ROOT
from support.workers_kit import Workers, start_workers


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> tuple[Workers, str]:
    root = tmp_path_factory.mktemp("guarded")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = root / "idp.pem"
    pem.write_bytes(public_pem(key))
    (root / "data" / TENANT).mkdir(parents=True)
    env = {"SERVICE_JWT_PUBKEY": str(pem), "SERVICE_TENANT": TENANT}
    workers = start_workers(ROOT / "schemas" / "blog.dbs", root / "data", 2, env)
    yield workers, mint(key, "RS256")
    if workers.proc.poll() is None:
        workers.stop(signal.SIGKILL)


def private_port(workers: Workers) -> int:
    """The writer's private port, from its `listening on` line that is not the public one."""
    ports = {int(m.group(1)) for line in workers.log for m in [re.search(r"listening on 127\.0\.0\.1:(\d+) worker=writer", line)] if m}
    (port,) = ports - {workers.port}
    return port


def test_a_reader_forwards_writes_under_the_clients_token(guarded):
    workers, token = guarded
    reader = workers.connection_to("reader-1")
    bearer = {"Authorization": f"Bearer {token}"}
    refused = reader.request("POST", "/api/user", {"email": "no@example.com", "name": "No"})
    assert refused.status == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    created = reader.request("POST", "/api/user", {"email": "yes@example.com", "name": "Yes"}, headers=bearer)
    assert created.status == 201, created
    read = reader.request("GET", f"/api/user/{created.json['id']}", headers=bearer)
    assert read.status == 200 and read.json["name"] == "Yes"
    assert reader.get("/metrics").json["replica"]["state"] == "following"


def test_the_private_port_needs_the_supervisors_key(guarded):
    workers, token = guarded
    port = private_port(workers)
    for headers in ({}, {"Authorization": f"Bearer {token}"}, {"Dbsvc-Worker-Key": "guess"}):
        for path in ("/replicate/snapshot", "/snapshot", "/api/user"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path, headers=headers)
            reply = conn.getresponse()
            assert reply.status == 403, (path, headers)
            assert b"Dbsvc-Worker-Key is missing or wrong" in reply.read()
            conn.close()
