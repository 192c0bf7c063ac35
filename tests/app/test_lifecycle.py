"""The server process as an operator sees it: start-up errors, the writer lock, restarts,
graceful shutdown with a request in flight, and request logs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from support.cli import run_dbsvc
from support.server import LISTENING, ROOT, wait_for_port
from support.tree import dir_image

BLOG = ROOT / "schemas" / "blog.dbs"


def run_cli(args, env, timeout=30):
    return run_dbsvc(*args, env=env, timeout=timeout)


def test_default_tenant_is_created_and_writes_survive_restart(serve, tmp_path):
    data = tmp_path / "data"
    server = serve(data_dir=data)
    assert server.post("/api/user", {"email": "a@b.c", "name": "Al"}).status == 201
    assert server.stop() == 0
    assert (data / "default").is_dir()
    again = serve(data_dir=data)
    page = again.get("/api/user").json
    assert [r["email"] for r in page["data"]] == ["a@b.c"]


def test_second_server_on_same_tenant_exits_2_and_touches_nothing(serve, tmp_path):
    data = tmp_path / "data"
    first = serve(data_dir=data)
    assert first.post("/api/user", {"email": "x@y.z", "name": "X"}).status == 201
    before = dir_image(data)
    second = run_cli(["serve", str(BLOG)], {"SERVICE_DATA": str(data), "SERVICE_PORT": "0"})
    assert second.returncode == 2, second.stderr
    assert str(first.proc.pid) in second.stderr
    assert dir_image(data) == before
    assert first.get("/health").status == 200


def test_named_tenant_must_exist(tmp_path):
    result = run_cli(
        ["serve", str(BLOG)], {"SERVICE_DATA": str(tmp_path), "SERVICE_TENANT": "acme", "SERVICE_PORT": "0"}
    )
    assert result.returncode == 2
    assert "dbsvc tenant create acme" in result.stderr


def test_bad_environment_value_exits_2_naming_the_variable(tmp_path):
    result = run_cli(["serve", str(BLOG)], {"SERVICE_DATA": str(tmp_path), "SERVICE_PORT": "http"})
    assert result.returncode == 2
    assert "SERVICE_PORT" in result.stderr
    result = run_cli(["serve", str(BLOG)], {"SERVICE_DATA": str(tmp_path), "SERVICE_SYNC": "sometimes"})
    assert result.returncode == 2 and "SERVICE_SYNC" in result.stderr


def test_named_tenant_created_by_the_companion_tool_is_served(serve, tmp_path):
    data = tmp_path / "data"
    created = run_cli(["tenant", "create", "acme"], {"SERVICE_DATA": str(data)})
    assert created.returncode == 0, created.stderr
    server = serve(data_dir=data, env={"SERVICE_TENANT": "acme"})
    assert server.post("/api/user", {"email": "t@a.co", "name": "T"}).status == 201
    listed = run_cli(["tenant", "list"], {"SERVICE_DATA": str(data)})
    assert "acme" in listed.stdout


def test_sigterm_lets_an_in_flight_request_finish(serve, tmp_path):
    data = tmp_path / "data"
    server = serve(data_dir=data)
    body = json.dumps({"email": "late@x.io", "name": "Late"}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    head = (
        f"POST /api/user HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[:5])
    time.sleep(0.3)  # the request is now in flight (head parsed, body incomplete)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    sock.sendall(body[5:])
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    sock.close()
    assert reply.startswith(b"HTTP/1.1 201"), reply
    assert server.proc.wait(timeout=30) == 0
    again = serve(data_dir=data)
    assert [r["email"] for r in again.get("/api/user").json["data"]] == ["late@x.io"]


def test_sigio_leaves_a_serving_process_answering(serve, tmp_path):
    """A compaction's release holds a write lease for microseconds (storage/freeing.py); a
    process opening the file then makes the kernel send the server SIGIO, whose default
    action ends it. The server ignores it, and keeps its writes."""
    server = serve(data_dir=tmp_path / "data")
    assert server.post("/api/user", {"email": "a@b.c", "name": "Al"}).status == 201
    server.proc.send_signal(signal.SIGIO)
    server.proc.send_signal(signal.SIGIO)
    assert server.post("/api/user", {"email": "d@e.f", "name": "Di"}).status == 201
    assert [r["email"] for r in server.get("/api/user").json["data"]] == ["a@b.c", "d@e.f"]
    assert server.proc.poll() is None
    assert server.stop() == 0


def test_json_logs_carry_one_span_per_request(serve):
    server = serve(env={"SERVICE_LOG_FORMAT": "json"})
    server.get("/api/user?limit=1", headers={"X-Request-Id": "span-check-1", "Authorization": "Bearer secret-token"})
    server.stop()
    lines = [json.loads(line) for line in server.log if line.strip().startswith("{")]
    spans = [line for line in lines if "span-check-1" in json.dumps(line)]
    assert spans, server.log
    text = json.dumps(spans[0])
    assert "GET" in text and "/api/user" in text and "200" in text
    assert "secret-token" not in "".join(server.log)


def test_generated_file_serves_itself(tmp_path):
    import threading

    target = tmp_path / "blog_service.py"
    generated = run_cli(["generate", str(BLOG), "-o", str(target)], {})
    assert generated.returncode == 0, generated.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(
        {"SERVICE_PORT": "0", "SERVICE_DATA": str(tmp_path / "data"), "RUST_LOG": "info", "PYTHONPATH": str(ROOT)}
    )
    proc = subprocess.Popen(
        [sys.executable, str(target)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = wait_for_port(proc, proc.stderr, LISTENING, [])
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(
            "POST",
            "/api/user",
            body=json.dumps({"email": "g@x.io", "name": "Gen"}),
            headers={"Content-Type": "application/json"},
        )
        created = conn.getresponse()
        assert created.status == 201, created.read()
        created.read()
        conn.request("GET", "/api/user/1")
        reply = conn.getresponse()
        assert reply.status == 200 and json.loads(reply.read())["name"] == "Gen"
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
