"""deploy/nginx/dbsvc-tls.conf with real nginx ending TLS in front of a real dbsvc server
(docs/guide/recipes.md#tls-and-wss-through-nginx): a REST round trip over https://, a wss://
change feed receiving an insert, and plain http:// redirected.

nginx runs unprivileged in its own prefix with a self-signed certificate for 127.0.0.1 made
here; the site file is the recipe itself, with only its ports and certificate paths replaced.
Skipped when nginx is not installed (`.ci/run` installs Debian's package)."""

from __future__ import annotations

import http.client
import json
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from support.ports import free_port
from support.server import ROOT, start_server
from support.tlskit import self_signed
from support.wskit import recv_json, run

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
pytestmark = [
    pytest.mark.nginx,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)"),
]
SITE = ROOT / "deploy" / "nginx" / "dbsvc-tls.conf"


def site_for(upstream: int, https: int, plain: int, chain: Path, private: Path) -> str:
    text = SITE.read_text()
    for old, new in (
        ("server 127.0.0.1:3000;", f"server 127.0.0.1:{upstream};"),
        ("listen 443 ssl;", f"listen 127.0.0.1:{https} ssl;"),
        ("listen 80;", f"listen 127.0.0.1:{plain};"),
        ("/etc/ssl/dbsvc/fullchain.pem", str(chain)),
        ("/etc/ssl/dbsvc/privkey.pem", str(private)),
    ):
        assert text.count(old) == 1, f"{SITE.name} no longer holds {old!r} exactly once"
        text = text.replace(old, new)
    return text


def unprivileged() -> dict:
    if os.geteuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory) -> Iterator[tuple[int, int, ssl.SSLContext]]:
    """(https port, plain port, a client context trusting the certificate)."""
    server = start_server(ROOT / "schemas" / "blog.dbs", tmp_path_factory.mktemp("tls") / "data")
    with tempfile.TemporaryDirectory(prefix="dbsvc-nginx-tls-") as directory:
        prefix = Path(directory)
        chain, private = self_signed(prefix, "fullchain.pem", "privkey.pem")
        drop = unprivileged()
        https, plain = free_port(), free_port()
        site = prefix / "dbsvc-tls.conf"
        site.write_text(site_for(server.port, https, plain, chain, private))
        conf = prefix / "nginx.conf"
        conf.write_text(
            f"daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log info;\n"
            "events { worker_connections 256; }\n"
            f"http {{\n access_log {prefix}/access.log;\n client_body_temp_path {prefix}/client_body;\n"
            f" proxy_temp_path {prefix}/proxy;\n fastcgi_temp_path {prefix}/fastcgi;\n"
            f" uwsgi_temp_path {prefix}/uwsgi;\n scgi_temp_path {prefix}/scgi;\n include {site};\n}}\n"
        )
        if drop:
            for path in (prefix, chain, private, site, conf):
                os.chown(path, drop["user"], drop["group"])
        command = [NGINX, "-p", f"{prefix}/", "-e", str(prefix / "error.log"), "-c", str(conf)]
        checked = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=60, **drop)
        assert checked.returncode == 0, checked.stderr
        nginx = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **drop)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", https), timeout=5).close()
                    break
                except OSError:
                    assert nginx.poll() is None and time.monotonic() < deadline, (prefix / "error.log").read_text()
                    time.sleep(0.05)
            context = ssl.create_default_context(cafile=str(chain))
            yield https, plain, context
        finally:
            nginx.terminate()
            nginx.wait(timeout=30)
            server.stop()


def https_request(port: int, context: ssl.SSLContext, method: str, path: str, body: dict | None = None):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


def test_rest_round_trip_over_https(proxied):
    port, _plain, context = proxied
    status, headers, body = https_request(port, context, "POST", "/api/user", {"email": "tls@example.com", "name": "T"})
    assert status == 201, body
    status, _headers, body = https_request(port, context, "GET", headers["Location"] + "?projection=card")
    assert (status, json.loads(body)) == (200, {"id": json.loads(body)["id"], "name": "T"})


def test_wss_feed_receives_an_insert_made_over_https(proxied):
    port, _plain, context = proxied

    async def scenario() -> dict:
        async with websockets.connect(f"wss://127.0.0.1:{port}/subscribe/user?name=W", ssl=context) as ws:
            status, _h, body = https_request(
                port, context, "POST", "/api/user", {"email": "w@example.com", "name": "W"}
            )
            assert status == 201, body
            return await recv_json(ws)

    event = run(scenario())
    assert (event["kind"], event["record"]["name"]) == ("insert", "W")


def test_plain_http_is_redirected_to_https(proxied):
    _https, plain, _context = proxied
    conn = http.client.HTTPConnection("127.0.0.1", plain, timeout=30)
    conn.request("GET", "/api/user", headers={"Host": "db.example.com"})
    reply = conn.getresponse()
    assert reply.status == 301 and reply.getheader("Location") == "https://db.example.com/api/user"
