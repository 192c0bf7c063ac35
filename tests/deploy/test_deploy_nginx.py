"""deploy/nginx/dbsvc-tenants.conf with real nginx in front of two real, guarded dbsvc servers
(tenants acme and globex): CRUD on both prefixes, the guard's answers, and a `/subscribe`
WebSocket that receives the event of a POST made through nginx.

nginx runs unprivileged in its own prefix (a temporary directory: config, logs, pid, temp
files) on a loopback port the test picks; the site file is the recipe itself, with only its
upstream ports and `listen` replaced. Marked `nginx`; skipped when nginx is not installed
(`.ci/run` installs Debian's package)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.deploykit import NGINX_SITE
from support.idp import TestIdp
from support.ports import free_port
from support.server import ROOT, Server, start_server
from support.wskit import open_ws, recv_json, refusal, run

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
pytestmark = [
    pytest.mark.nginx,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)"),
]

BLOG = ROOT / "schemas" / "blog.dbs"


def site_for(acme_port: int, globex_port: int, listen_port: int) -> str:
    """The recipe with the test's ports; each replaced text must be there exactly once."""
    text = NGINX_SITE.read_text()
    for old, new in (
        ("server 127.0.0.1:3001;", f"server 127.0.0.1:{acme_port};"),
        ("server 127.0.0.1:3002;", f"server 127.0.0.1:{globex_port};"),
        ("listen 80;", f"listen 127.0.0.1:{listen_port};"),
    ):
        assert text.count(old) == 1, f"{NGINX_SITE.name} no longer holds {old!r} exactly once"
        text = text.replace(old, new)
    return text


def main_config(prefix: Path, site: Path) -> str:
    """nginx.conf around the site: everything nginx writes stays under `prefix`."""
    return f"""
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {site};
}}
"""


def unprivileged() -> dict:
    """Popen arguments that run nginx as `nobody` when the tests run as root (as in CI
    containers); as another user, nginx simply runs as that user."""
    if os.geteuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def start_nginx(prefix: Path, acme_port: int, globex_port: int) -> tuple[subprocess.Popen, int]:
    """nginx in the foreground, listening; a port taken meanwhile by someone else is retried.
    `prefix` belongs to the user nginx runs as: its config, logs, pid and temporary files."""
    assert NGINX is not None
    drop = unprivileged()
    if drop:
        os.chown(prefix, drop["user"], drop["group"])
    for _attempt in range(3):
        port = free_port()
        site = prefix / "dbsvc-tenants.conf"
        site.write_text(site_for(acme_port, globex_port, port))
        conf = prefix / "nginx.conf"
        conf.write_text(main_config(prefix, site))
        command = [NGINX, "-p", f"{prefix}/", "-e", str(prefix / "error.log"), "-c", str(conf)]
        checked = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=60, **drop)
        assert checked.returncode == 0, checked.stderr
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **drop)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                return proc, port
            except OSError:
                time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=10)
    raise AssertionError(f"nginx did not start:\n{(prefix / 'error.log').read_text()}")


@pytest.fixture(scope="module")
def nginx_prefix() -> Iterator[Path]:
    """A directory of its own, outside pytest's (which only its owner may enter)."""
    with tempfile.TemporaryDirectory(prefix="dbsvc-nginx-") as directory:
        yield Path(directory)


@dataclass
class Deployment:
    proxy: Server  # requests to nginx's port (its paths carry the prefix)
    acme: Server  # the servers themselves, to see where a request went
    globex: Server
    idp: TestIdp

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.idp.token(tenant=tenant)}"}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, nginx_prefix) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("nginx")
    idp = TestIdp(base / "idp", tenant="acme")
    data = idp.data_dir()
    (data / "globex").mkdir()
    acme = start_server(BLOG, data, idp.server_env())
    globex = start_server(BLOG, data, idp.server_env(SERVICE_TENANT="globex"))
    nginx, port = start_nginx(nginx_prefix, acme.port, globex.port)
    try:
        yield Deployment(Server(nginx, port, nginx_prefix, []), acme, globex, idp)
    finally:
        nginx.terminate()
        nginx.wait(timeout=30)
        acme.stop()
        globex.stop()


def test_crud_through_each_prefix_reaches_only_its_tenant(deployment):
    proxy, acme, globex = deployment.proxy, deployment.acme, deployment.globex
    headers = {tenant: deployment.auth(tenant) for tenant in ("acme", "globex")}
    for tenant in ("acme", "globex"):
        created = proxy.post(
            f"/{tenant}/api/user", {"email": f"crud@{tenant}.io", "name": tenant}, headers=headers[tenant]
        )
        assert created.status == 201, created
        location = created.headers["location"]
        assert location == f"/{tenant}/api/user/{created.json['id']}"  # the prefix put back
        assert proxy.get(location, headers=headers[tenant]).json["name"] == tenant
        replaced = proxy.request(
            "PUT", location, {"email": f"crud@{tenant}.io", "name": tenant.upper()}, headers=headers[tenant]
        )
        assert replaced.status == 200 and replaced.json["name"] == tenant.upper()
    for tenant, server in (("acme", acme), ("globex", globex)):
        direct = server.get("/api/user?email=crud%40" + tenant + ".io", headers=headers[tenant]).json
        assert [r["name"] for r in direct["data"]] == [tenant.upper()]  # it landed on its own server
        assert (
            server.get(
                f"/api/user?email=crud%40{'globex' if tenant == 'acme' else 'acme'}.io", headers=headers[tenant]
            ).json["total"]
            == 0
        )
    location = (
        f"/acme/api/user/{acme.get('/api/user?email=crud%40acme.io', headers=headers['acme']).json['data'][0]['id']}"
    )
    assert proxy.request("DELETE", location, headers=headers["acme"]).status == 204
    gone = proxy.get(location, headers=headers["acme"])
    assert gone.status == 404 and gone.headers["content-type"] == "application/problem+json"
    assert globex.get("/api/user?email=crud%40globex.io", headers=headers["globex"]).json["total"] == 1


def test_guard_answers_through_the_proxy(deployment):
    proxy = deployment.proxy
    missing = proxy.get("/acme/api/user")
    assert missing.status == 401 and missing.json["code"] == "unauthorized"
    assert missing.headers["www-authenticate"] == 'Bearer realm="dbsvc"'
    assert proxy.get("/acme/api/user", headers=deployment.auth("acme")).status == 200
    other = proxy.get("/globex/api/user", headers=deployment.auth("acme"))  # acme's token, globex's server
    assert other.status == 403 and other.json["code"] == "forbidden"
    assert proxy.get("/acme/health").json["status"] == "ok"  # operational: no token
    assert proxy.get("/globex/ready").json["status"] == "ready"


def test_subscription_through_the_proxy_receives_a_post_made_through_it(deployment):
    proxy, headers = deployment.proxy, deployment.auth("globex")

    async def body() -> tuple[dict, int]:
        async with open_ws(proxy, "/globex/subscribe/user?name=Sub", additional_headers=headers) as ws:
            created = proxy.post("/globex/api/user", {"email": "sub@globex.io", "name": "Sub"}, headers=headers)
            assert created.status == 201, created
            return await recv_json(ws, timeout=30), created.json["id"]

    event, user_id = run(body())
    assert (event["kind"], event["model"], event["id"]) == ("insert", "User", user_id)
    assert event["record"]["email"] == "sub@globex.io"


def test_browser_style_bearer_subprotocol_passes_the_proxy(deployment):
    proxy, token = deployment.proxy, deployment.idp.token(tenant="acme")

    async def body() -> tuple[str | None, dict]:
        async with open_ws(
            proxy, "/acme/subscribe/user?name=Browser", subprotocols=["bearer", f"bearer.{token}"]
        ) as ws:
            proxy.post("/acme/api/user", {"email": "b@acme.io", "name": "Browser"}, headers=deployment.auth("acme"))
            return ws.subprotocol, await recv_json(ws, timeout=30)

    chosen, event = run(body())
    assert chosen == "bearer" and event["record"]["email"] == "b@acme.io"


def test_websocket_without_token_is_refused_before_the_upgrade(deployment):
    status, problem, headers = run(refusal(deployment.proxy, "/acme/subscribe/user"))
    assert status == 401 and problem["code"] == "unauthorized"
    assert headers["www-authenticate"] == 'Bearer realm="dbsvc"'


@pytest.mark.parametrize(
    "path", ["/api/user/a%2Fb", "/api/user/%20", "/api/user?email=a%2Bb%40x.io", "/api/user?sort=nope", "/api/nosuch"]
)
def test_path_and_query_reach_dbsvc_as_sent(deployment, path):
    """The proxied answer is the direct answer, byte-identical paths and queries included."""
    headers = deployment.auth("acme")
    direct = deployment.acme.get(path, headers=headers)
    proxied = deployment.proxy.get("/acme" + path, headers=headers)
    assert proxied.status == direct.status
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    strip = lambda reply: {k: v for k, v in reply.json.items() if k != "request_id"}  # noqa: E731
    assert strip(proxied) == strip(direct)


@pytest.mark.parametrize("path", ["/", "/other/api/user", "/api/user", "/acmeapi/user"])
def test_paths_outside_the_tenant_prefixes_are_not_served(deployment, path):
    reply = deployment.proxy.get(path, headers=deployment.auth("acme"))
    assert reply.status == 404
    assert b"data" not in reply.body


def test_bare_prefix_is_sent_to_the_tenants_root(deployment):
    reply = deployment.proxy.get("/acme")
    assert reply.status == 301 and reply.headers["location"] == "/acme/"


def test_dot_segments_never_reach_the_other_tenants_data(deployment):
    """nginx picks the location from the normalised path, dbsvc gets the raw one: neither
    way does a globex path climb into acme's records."""
    headers = deployment.auth("acme")
    deployment.proxy.post("/acme/api/user", {"email": "dots@acme.io", "name": "Dots"}, headers=headers)
    for path in ("/globex/../acme/api/user", "/acme/../acme/api/user", "/globex/%2E%2E/acme/api/user"):
        reply = deployment.proxy.get(path, headers=headers)
        assert reply.status in (400, 404), (path, reply)
        assert b"dots@acme.io" not in reply.body


def test_oversized_body_gets_dbsvcs_413_and_nothing_is_written(deployment):
    headers = deployment.auth("acme")
    before = deployment.acme.get("/api/user", headers=headers).json["total"]
    body = json.dumps({"email": "big@acme.io", "name": "x" * (1536 * 1024)})
    reply = deployment.proxy.post("/acme/api/user", body, headers={**headers, "Content-Type": "application/json"})
    assert reply.status == 413 and reply.json["code"] == "payload_too_large"  # dbsvc's, not nginx's page
    assert deployment.acme.get("/api/user", headers=headers).json["total"] == before
    assert deployment.proxy.get("/acme/api/user?email=big%40acme.io", headers=headers).json["total"] == 0
