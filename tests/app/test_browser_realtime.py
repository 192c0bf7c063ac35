"""The realtime routes from a real browser (docs/guide/realtime.md): headless Chromium opens a page
served on loopback whose JS uses the browser's own WebSocket and fetch() against a dbsvc server
with the token guard on.

A browser cannot set `Authorization` on a WebSocket upgrade; it offers the subprotocols `bearer`
and `bearer.<JWT>` and the server must pick `bearer`. The page is served from another origin
(a second loopback HTTP server), listed in SERVICE_CORS_ORIGINS, so its fetch() calls go through
a real CORS preflight and its upgrades carry a real `Origin`. Each page stores its findings as a
JSON string in `window.__result`, which tests/support/browser.py waits for (with a deadline).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jwt
import pytest

from support.accesskit import keypair
from support.browser import Browser, PageServer, require_chromium
from support.server import ROOT, start_server

TENANT = "acme"

# The page's common part: helpers turning socket callbacks into awaitable steps, and `finish`,
# which publishes the findings (or the error that stopped the script) for the test to read.
PRELUDE = """
const CONFIG = %(config)s;
const WS = "ws://127.0.0.1:" + CONFIG.port;
const HTTP = "http://127.0.0.1:" + CONFIG.port;
const out = {step: "start"};
function finish(extra) {
  Object.assign(out, extra || {});
  window.__result = JSON.stringify(out);
  document.title = "done";
}
function open(path, token) {
  // Resolves with the socket once open; rejects with what happened instead (error/close first).
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(WS + path, ["bearer", "bearer." + token]);
    ws.queue = []; ws.waiters = []; ws.events = [];
    ws.onmessage = (e) => {
      const msg = JSON.parse(e.data);
      const w = ws.waiters.shift();
      if (w) w(msg); else ws.queue.push(msg);
    };
    ws.onopen = () => { ws.events.push("open"); resolve(ws); };
    ws.onerror = () => { ws.events.push("error"); };
    ws.onclose = (e) => {
      ws.events.push("close:" + e.code);
      reject({opened: ws.events.includes("open"), events: ws.events, code: e.code, protocol: ws.protocol});
    };
  });
}
function next(ws, ms) {
  // The next JSON message of `ws`, or a rejection after `ms` milliseconds.
  if (ws.queue.length) return Promise.resolve(ws.queue.shift());
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject("no message within " + ms + " ms; events " + ws.events), ms);
    ws.waiters.push((msg) => { clearTimeout(timer); resolve(msg); });
  });
}
async function createUser(body) {
  const r = await fetch(HTTP + "/api/user", {
    method: "POST",
    headers: {"Authorization": "Bearer " + CONFIG.token, "Content-Type": "application/json"},
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (r.status !== 201) throw "POST /api/user answered " + r.status + ": " + text;
  return JSON.parse(text);  // {"id": ...}
}
async function getUser(id) {
  const r = await fetch(HTTP + "/api/user/" + id, {headers: {"Authorization": "Bearer " + CONFIG.token}});
  const text = await r.text();
  if (r.status !== 200) throw "GET /api/user/" + id + " answered " + r.status + ": " + text;
  return JSON.parse(text);
}
"""

# Subscribe to /subscribe/user, create a user, read the insert event; then a live query over
# readers: Init, create another reader, Added.
REALTIME = """
(async () => {
  out.step = "open /subscribe/user";
  const sub = await open("/subscribe/user", CONFIG.token);
  out.subscribe_protocol = sub.protocol;
  out.step = "POST /api/user (first)";
  out.created = await createUser({email: CONFIG.tag + "-1@example.com", name: "First", role: "reader"});
  out.step = "insert event on /subscribe/user";
  out.subscribe_event = await next(sub, 10000);
  sub.close(1000);
  out.step = "GET /api/user/<first>";
  out.record = await getUser(out.created.id);

  out.step = "open /live-query/user?role=reader";
  const live = await open("/live-query/user?role=reader", CONFIG.token);
  out.live_protocol = live.protocol;
  out.step = "Init on /live-query/user";
  out.live = [await next(live, 10000)];
  out.step = "POST /api/user (second)";
  out.created2 = await createUser({email: CONFIG.tag + "-2@example.com", name: "Second", role: "reader"});
  out.step = "Added on /live-query/user";
  out.live.push(await next(live, 10000));
  live.close(1000);
  out.step = "GET /api/user/<second>";
  out.record2 = await getUser(out.created2.id);
  finish({ok: true, tag: CONFIG.tag});
})().catch((err) => finish({ok: false, error: (err && err.stack) ? String(err.stack) : err}));
"""

# A socket whose token is no token: the server answers 401 before the upgrade, so the browser
# sees the connection fail (error, then close 1006) and never an open.
BAD_TOKEN = """
open("/subscribe/user", "not-a-jwt")
  .then((ws) => { ws.close(); finish({opened: true}); })
  .catch((err) => finish(err));
"""

# A good token from an origin the server does not allow: refused before the upgrade too.
OTHER_ORIGIN = BAD_TOKEN.replace('"not-a-jwt"', "CONFIG.token")

PAGES = {"/realtime": REALTIME, "/bad-token": BAD_TOKEN, "/other-origin": OTHER_ORIGIN}


def html(script: str, config: dict) -> bytes:
    body = PRELUDE % {"config": json.dumps(config)} + script
    return (
        f"<!doctype html><html><head><title>running</title></head><body><script>{body}</script></body></html>".encode()
    )


def page_server(config: dict) -> PageServer:
    """The page's origin: one page per path of PAGES, with `config` baked in."""

    def route(path: str) -> tuple[bytes, str] | None:
        script = PAGES.get(path)
        return None if script is None else (html(script, config), "text/html; charset=utf-8")

    return PageServer(route)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A guarded blog server, the page server whose origin it allows, a token, a browser."""
    require_chromium()
    tmp = tmp_path_factory.mktemp("browser")
    private, pem = keypair(tmp)
    token = jwt.encode(
        {
            "sub": "browser",
            "iss": "https://id.example.com/",
            "aud": "blog",
            "tenant": TENANT,
            "iat": int(time.time()),
            "exp": int(time.time()) + 600,
        },
        private,
        algorithm="ES256",
    )
    data = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    created = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "tenant", "create", TENANT],
        env={**env, "SERVICE_DATA": str(data)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert created.returncode == 0, created.stderr

    config = {"token": token, "tag": f"b{os.getpid()}"}
    pages = page_server(config)
    server = start_server(
        ROOT / "schemas" / "blog.dbs",
        data,
        {
            "SERVICE_JWT_PUBKEY": str(pem),
            "SERVICE_JWT_ALG": "ES256",
            "SERVICE_TENANT": TENANT,
            "SERVICE_CORS_ORIGINS": pages.origin,
        },
    )
    config["port"] = server.port
    browser = Browser()
    try:
        yield Setup(server, pages, browser)
    finally:
        browser.close()
        pages.close()
        server.stop()


class Setup:
    def __init__(self, server, pages: PageServer, browser: Browser) -> None:
        self.server, self.pages, self.browser = server, pages, browser

    def __repr__(self) -> str:  # keeps the token out of failure reports
        return f"<Setup server :{self.server.port}, pages {self.pages.origin}>"


def run(setup: Setup, path: str, host: str = "127.0.0.1") -> dict:
    raw = setup.browser.run_page(f"http://{host}:{setup.pages.port}{path}", timeout=30)
    result = json.loads(raw)
    result["_server_log"] = "".join(setup.server.log[-40:])
    return result


def logged(setup: Setup, since: int, needle: str, timeout: float = 10) -> str:
    """The first server log line after index `since` containing `needle` (log lines arrive a
    little after the response: the server writes its log in batches)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in setup.server.log[since:]:
            if needle in line:
                return line
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"no server log line with {needle!r} within {timeout} s:\n" + "".join(setup.server.log[since:])
            )
        time.sleep(0.05)


def test_subscribe_and_live_query_from_a_browser(setup):
    result = run(setup, "/realtime")
    log = result.pop("_server_log")
    assert result.get("ok"), f"page failed: {result}\nserver log:\n{log}"

    # The browser offered ["bearer", "bearer.<JWT>"]; the server picked "bearer".
    assert result["subscribe_protocol"] == "bearer"
    assert result["live_protocol"] == "bearer"

    created = result["record"]  # the first user as GET /api/user/<id> answers it afterwards
    assert created["id"] == result["created"]["id"]
    assert (created["email"], created["name"], created["role"]) == (f"{result['tag']}-1@example.com", "First", "reader")
    event = result["subscribe_event"]
    assert event["kind"] == "insert", event
    assert event["model"] == "User"
    assert event["id"] == created["id"]
    assert event["record"] == created
    assert isinstance(event["offset"], int) and event["offset"] >= 1
    assert isinstance(event["watermark"], int)

    init, added = result["live"]
    assert init["type"] == "Init", init
    assert init["model"] == "User"
    assert isinstance(init["records"], list)
    assert created["id"] in [r["id"] for r in init["records"]]
    assert all(r["role"] == "reader" for r in init["records"])
    assert isinstance(init["watermark"], int)

    created2 = result["record2"]
    assert created2["id"] == result["created2"]["id"] != created["id"]
    assert added["type"] == "Added", added
    assert added["model"] == "User"
    assert added["record"]["id"] == created2["id"]
    assert added["record"] == created2
    assert added["offset"] > event["offset"]


def test_bad_token_never_opens(setup):
    since = len(setup.server.log)
    result = run(setup, "/bad-token")
    log = result.pop("_server_log")
    assert result["opened"] is False, f"{result}\nserver log:\n{log}"
    assert result["code"] == 1006  # the handshake failed: no close frame ever came
    assert "open" not in result["events"]
    logged(setup, since, "path=/subscribe/user status=401")


def test_origin_not_allowed_never_opens(setup):
    # The same page reached as http://localhost:PORT has an origin the server does not list.
    since = len(setup.server.log)
    result = run(setup, "/other-origin", host="localhost")
    log = result.pop("_server_log")
    assert result["opened"] is False, f"{result}\nserver log:\n{log}"
    assert result["code"] == 1006
    assert "open" not in result["events"]
    logged(setup, since, "path=/subscribe/user status=403")
