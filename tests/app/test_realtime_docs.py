"""docs/realtime.md's examples, run as written against a real server (guard on, tokens real).

The examples are the fenced blocks right after `<!-- example: NAME -->`; the Python one's
sample output follows `<!-- output: python-subscribe -->`. The Python example runs as a
subprocess (`--count`) across a server restart; the HTML one runs in headless Chromium
(tests/support/browser.py) from a loopback page origin listed in SERVICE_CORS_ORIGINS, with only
its `base` and `token` lines rewritten and a small reporter script appended.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jwt
import pytest

from support.accesskit import guard_env, keypair
from support.browser import Browser, PageServer, require_chromium
from support.server import ROOT, Server

DOC = ROOT / "docs" / "realtime.md"
TENANT = "acme"
BLOCK = re.compile(r"^<!-- (example|output): ([\w-]+) -->\n```(\w*)\n(.*?)^```$", re.M | re.S)


def child_env(**extra: str) -> dict[str, str]:
    """This environment without the server's variables or proxies, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "DBSVC_")) and "proxy" not in k.lower()}
    return {**env, **extra}


def doc_blocks() -> dict[tuple[str, str], tuple[str, str]]:
    """(marker, name) -> (fence language, text) for every marked block; each name once."""
    blocks: dict[tuple[str, str], tuple[str, str]] = {}
    for marker, name, lang, text in BLOCK.findall(DOC.read_text()):
        assert (marker, name) not in blocks, f"{marker} {name!r} is marked twice in {DOC}"
        blocks[marker, name] = (lang, text)
    return blocks


def example(name: str, lang: str) -> str:
    got_lang, text = doc_blocks()[("example", name)]
    assert got_lang == lang, f"example {name!r} is fenced as {got_lang!r}, expected {lang!r}"
    return text


@pytest.fixture
def guarded(serve, tmp_path):
    """start(env=None) -> a blog server with the token guard on (tenant acme); plus a token."""
    private, pem = keypair(tmp_path)
    now = int(time.time())
    token = jwt.encode(
        {
            "sub": "docs",
            "iss": "https://id.example.com/",
            "aud": "blog",
            "tenant": TENANT,
            "iat": now,
            "exp": now + 600,
        },
        private,
        algorithm="ES256",
    )
    data = tmp_path / "data"
    created = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "tenant", "create", TENANT],
        env=child_env(SERVICE_DATA=str(data)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert created.returncode == 0, created.stderr
    base_env = guard_env(pem)

    def start(env: dict | None = None) -> Server:
        return serve(env={**base_env, **(env or {})}, data_dir=data)

    start.token = token  # type: ignore[attr-defined]
    start.auth = {"Authorization": f"Bearer {token}"}  # type: ignore[attr-defined]
    return start


def write(server: Server, auth: dict, method: str, path: str, body: dict | None = None) -> None:
    reply = server.request(method, path, body, headers=auth)
    assert reply.status in (200, 201, 204), reply


class Lines:
    """A child's output lines, collected by a thread; `wait_for` polls them with a deadline."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, predicate, what: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not any(predicate(line) for line in list(self.lines)):
            if time.monotonic() >= deadline:
                raise AssertionError(f"no line {what} within {timeout} s: {self.lines}")
            time.sleep(0.02)

    def join(self) -> list[str]:
        self._thread.join(10)
        return self.lines


def test_doc_marks_each_runnable_example_once():
    blocks = doc_blocks()
    assert set(blocks) == {
        ("example", "python-subscribe"),
        ("example", "browser-live-query"),
        ("output", "python-subscribe"),
    }
    assert blocks["example", "python-subscribe"][0] == "python"
    assert blocks["example", "browser-live-query"][0] == "html"


def test_python_example_prints_the_readers_then_every_change_across_a_restart(guarded, tmp_path):
    server = guarded()
    auth = guarded.auth
    for body in (
        {"email": "ann@example.com", "name": "Ann", "age": 31, "role": "reader"},
        {"email": "bo@example.com", "name": "Bo", "role": "admin"},
        {"email": "cy@example.com", "name": "Cy", "role": "reader"},
    ):
        write(server, auth, "POST", "/api/user", body)
    script = tmp_path / "follow_readers.py"
    script.write_text(example("python-subscribe", "python"))
    env = child_env(DBSVC_URL=f"ws://127.0.0.1:{server.port}", DBSVC_TOKEN=guarded.token)
    proc = subprocess.Popen(
        [sys.executable, str(script), "--count", "6"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        out.wait_for(lambda line: line.startswith("-- "), "'-- N readers as of offset M'")

        # The writes of the doc's sample output.
        write(server, auth, "PATCH", "/api/user/1", {"age": 32})  # 4 update 1
        write(server, auth, "POST", "/api/user", {"email": "dee@example.com", "name": "Dee"})  # 5 insert 4
        write(server, auth, "PATCH", "/api/user/3", {"role": "admin"})  # 6 update 3
        write(
            server, auth, "POST", "/api/blog-post", {"author_id": 1, "title": "Hi", "body": "b", "score": 1}
        )  # 7 link 1
        out.wait_for(lambda line: line == "7 link 1", "'7 link 1'")

        # A restart on the same port: the socket closes with 1001; the writes made before the
        # example is back are replayed from the durable log (`after=7`), then it follows live.
        port = server.port
        assert server.stop() == 0
        server = guarded({"SERVICE_PORT": str(port)})
        write(server, auth, "DELETE", "/api/blog-post/1")  # 8 link 1
        write(server, auth, "POST", "/api/user", {"email": "eve@example.com", "name": "Eve", "role": "admin"})  # 9: no
        write(server, auth, "PATCH", "/api/user/2", {"role": "reader"})  # 10 update 2
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the example did not stop: {out.lines} {err.lines}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    lines, errors = out.join(), err.join()
    assert proc.returncode == 0, "\n".join(lines + errors)

    sample = doc_blocks()["output", "python-subscribe"][1].splitlines()
    assert lines[: len(sample)] == sample
    assert lines[len(sample) :] == ["8 link 1", "10 update 2"]
    assert "resuming after offset 7" in errors, errors  # resumed, not re-read
    assert sum(line.startswith("-- ") for line in lines) == 1


class DocPage:
    """The page's origin: `page` at `/` and the offset to wait for at `/target`."""

    def __init__(self) -> None:
        self.page = b""
        self.target: int | None = None
        self.server = PageServer(self.route)
        self.origin = self.server.origin
        self.close = self.server.close

    def route(self, path: str) -> tuple[bytes, str] | None:
        if path == "/":
            return self.page, "text/html; charset=utf-8"
        if path == "/target":
            return json.dumps({"offset": self.target}).encode(), "application/json"
        return None


# Appended to the doc's page: once the page has applied the message at the test's target
# offset, publish its Map (the example's top-level `readers` and `after`) and what it shows.
REPORTER = """
<script>
const __poll = setInterval(async () => {
  const target = (await (await fetch("/target")).json()).offset;
  if (target !== null && after !== null && after >= target) {
    clearInterval(__poll);
    window.__result = JSON.stringify({after, records: [...readers.values()],
                                      shown: [...document.querySelectorAll("#readers li")].length});
  }
}, 50);
</script>
"""


def browser_page(html: str, base: str, token: str) -> bytes:
    """The doc's page with its `const base = "...";` and `const token = "...";` lines set."""
    for name, value in (("base", base), ("token", token)):
        html, count = re.subn(rf'^const {name} = "[^"]*";', f"const {name} = {json.dumps(value)};", html, flags=re.M)
        assert count == 1, f'the example needs exactly one line `const {name} = "...";`'
    return (html + REPORTER).encode()


def wait_for_live_queries(server: Server, count: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while server.get("/metrics").json["realtime"]["live_queries"] != count:
        if time.monotonic() >= deadline:
            raise AssertionError(f"live_queries never reached {count}")
        time.sleep(0.02)


def test_browser_example_keeps_the_live_result_set(guarded):
    require_chromium()
    pages = DocPage()
    try:
        server = guarded({"SERVICE_CORS_ORIGINS": pages.origin})
        auth = guarded.auth
        pages.page = browser_page(example("browser-live-query", "html"), f"ws://127.0.0.1:{server.port}", guarded.token)
        for body in (
            {"email": "ann@example.com", "name": "Ann", "role": "reader"},
            {"email": "bo@example.com", "name": "Bo", "role": "admin"},
            {"email": "cy@example.com", "name": "Cy", "role": "reader"},
        ):
            write(server, auth, "POST", "/api/user", body)

        def writes() -> list[dict]:
            """Once the page's live query is open: one write of each delta kind, then the
            offset to wait for (the head: the last write is a reader, so the page sees it)."""
            wait_for_live_queries(server, 1)
            write(server, auth, "PATCH", "/api/user/1", {"name": "Ann B"})  # Updated
            write(server, auth, "POST", "/api/user", {"email": "dee@example.com", "name": "Dee"})  # Added
            write(server, auth, "PATCH", "/api/user/3", {"role": "admin"})  # Removed
            write(server, auth, "PATCH", "/api/user/2", {"role": "reader"})  # Added
            write(server, auth, "DELETE", "/api/user/4")  # Removed
            write(server, auth, "POST", "/api/user", {"email": "eve@example.com", "name": "Eve"})  # Added
            listed = server.get("/api/user?role=reader", headers=auth)
            assert listed.status == 200, listed
            pages.target = int(listed.headers["dbsvc-offset"])
            return listed.json["data"]

        with ThreadPoolExecutor(1) as pool, Browser() as browser:
            listed = pool.submit(writes)
            try:
                raw = browser.run_page(f"{pages.origin}/", timeout=20)
            except AssertionError:
                if listed.done() and listed.exception() is not None:
                    raise listed.exception() from None
                raise
            readers = listed.result(timeout=20)
    finally:
        pages.close()
    result = json.loads(raw)
    assert result["after"] == pages.target == 9
    assert sorted(result["records"], key=lambda r: r["id"]) == readers
    assert [r["name"] for r in readers] == ["Ann B", "Bo", "Eve"]
    assert result["shown"] == 3
