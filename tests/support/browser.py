"""A real headless Chromium for end-to-end tests: open a page, wait for the result its JS sets.

`run_page(url)` starts Debian's `chromium` (headless, no sandbox: CI runs as root in a container)
with its own throwaway profile, drives it through the DevTools protocol over
`--remote-debugging-pipe` (NUL-separated JSON on the child's fds 3 and 4: no port to discover,
no WebSocket client library needed), navigates to `url`, then polls the page until the
expression `window.__result` holds a string, which it returns (by convention a JSON document the
page builds). The wait has a real deadline; on timeout the error carries the page's title, its
console messages, uncaught exceptions and the browser's stderr tail. The browser's whole process
group is killed afterwards, whatever happened.

`--dump-dom --virtual-time-budget=...` is not used on purpose: it returns as soon as the page is
loaded and virtual time is spent, before real network I/O such as a WebSocket reply arrives.

`chromium_binary()` finds the browser (`$CHROMIUM` first); `require_chromium()` skips the calling
test with a clear reason when there is none (`.ci/run` installs the `chromium` package).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

FLAGS = (
    "--headless=new",
    "--no-sandbox",  # root in a container: the setuid/namespace sandbox is unavailable
    "--disable-gpu",
    "--disable-dev-shm-usage",  # small /dev/shm in containers
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--mute-audio",
    "--password-store=basic",
    "--use-mock-keychain",
)

# Runs in a tiny child process: puts the two pipe ends on fds 3 and 4, where
# --remote-debugging-pipe expects them, then becomes the browser (same pid, same process group).
_TRAMPOLINE = """
import fcntl, os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
r2, w2 = fcntl.fcntl(r, fcntl.F_DUPFD, 10), fcntl.fcntl(w, fcntl.F_DUPFD, 10)
for fd in (r, w):
    os.close(fd)
os.dup2(r2, 3)
os.dup2(w2, 4)
os.close(r2)
os.close(w2)
os.execv(sys.argv[3], sys.argv[3:])
"""


class BrowserError(AssertionError):
    """The browser failed, or the page did not produce a result in time."""


def chromium_binary() -> str | None:
    """The Chromium/Chrome executable: `$CHROMIUM` if set, else the first on PATH, else None."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    """The browser binary, or skip the calling test with the reason."""
    import pytest

    binary = chromium_binary()
    if binary is None:
        pytest.skip(
            "no Chromium found (install Debian's `chromium` package; .ci/run does it, or point $CHROMIUM at a binary)"
        )
    return binary


class _Pipe:
    """DevTools protocol client over the browser's debugging pipe."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self._write_fd = write_fd
        self._read_fd = read_fd
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._write_lock = threading.Lock()
        self.events: list[dict] = []
        threading.Thread(target=self._read_loop, name="cdp-pipe", daemon=True).start()

    def _read_loop(self) -> None:
        buf = b""
        try:
            while True:
                chunk = os.read(self._read_fd, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    message = json.loads(raw)
                    with self._cond:
                        if "id" in message:
                            self._replies[message["id"]] = message
                        else:
                            self.events.append(message)
                        self._cond.notify_all()
        except OSError:
            pass
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 10.0) -> dict:
        with self._cond:
            self._next_id += 1
            ident = self._next_id
        message = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        with self._write_lock:
            try:
                while data:
                    data = data[os.write(self._write_fd, data) :]
            except OSError as exc:
                raise BrowserError(f"browser pipe closed while sending {method}: {exc}") from None
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if self._closed:
                    raise BrowserError(f"browser exited before answering {method}")
                if left <= 0:
                    raise BrowserError(f"no answer to {method} within {timeout} s")
                self._cond.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method} failed: {reply['error']}")
        return reply.get("result", {})

    def close(self) -> None:
        for fd in (self._write_fd, self._read_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class Browser:
    """One headless Chromium process (own profile, own process group). Use as a context manager."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or chromium_binary()
        if self.binary is None:
            raise BrowserError("no Chromium binary found")
        self.profile = Path(tempfile.mkdtemp(prefix="dbsvc-chromium-"))
        self._stderr = open(self.profile.parent / (self.profile.name + ".stderr"), "w+b")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        argv = [self.binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _TRAMPOLINE, str(to_child_r), str(from_child_w), *argv],
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                pass_fds=(to_child_r, from_child_w),
                start_new_session=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.cdp = _Pipe(to_child_w, from_child_r)

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""
        # The container has no D-Bus; those errors are noise.
        lines = [l for l in text.splitlines() if "dbus" not in l.lower()]
        return "\n".join(lines)[-limit:]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.cdp.call("Browser.close", timeout=2)
            except BrowserError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the whole group: renderers, zygote, GPU
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.cdp.close()
        self._stderr.close()
        os.unlink(self._stderr.name)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run_page(self, url: str, timeout: float = 30.0, result: str = "window.__result") -> str:
        """Open `url` in a new tab; return the string `result` evaluates to once it is one."""
        deadline = time.monotonic() + timeout
        target = self.cdp.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = self.cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.cdp.call("Runtime.enable", session=session)
        self.cdp.call("Page.enable", session=session)
        nav = self.cdp.call("Page.navigate", {"url": url}, session=session)
        if nav.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {nav['errorText']}")
        probe = f"(() => {{ const v = ({result}); return typeof v === 'string' ? v : null; }})()"
        while True:
            try:
                reply = self.cdp.call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)
                value = reply.get("result", {}).get("value")
            except BrowserError as exc:
                if self.proc.poll() is not None:
                    raise BrowserError(f"browser exited ({self.proc.returncode}):\n{self.stderr_tail()}") from exc
                value = None  # e.g. the context was torn down by a navigation: ask again
            if isinstance(value, str):
                return value
            if time.monotonic() >= deadline:
                raise BrowserError(self._timeout_report(url, timeout, session))
            time.sleep(0.05)  # poll interval; the deadline above bounds the wait

    def _timeout_report(self, url: str, timeout: float, session: str) -> str:
        try:
            title = (
                self.cdp.call(
                    "Runtime.evaluate",
                    {"expression": "document.title", "returnByValue": True},
                    session=session,
                    timeout=2,
                )
                .get("result", {})
                .get("value")
            )
        except BrowserError as exc:
            title = f"<unavailable: {exc}>"
        return (
            f"{url}: no result within {timeout} s; title={title!r}\n"
            f"page log:\n{self.page_log()}\nbrowser stderr:\n{self.stderr_tail()}"
        )

    def page_log(self) -> str:
        """Console messages and uncaught exceptions of the pages so far, one per line."""
        out = []
        for event in list(self.cdp.events):
            params = event.get("params", {})
            if event.get("method") == "Runtime.consoleAPICalled":
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                out.append(f"console.{params.get('type')}: {args}")
            elif event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        return "\n".join(out)


def run_page(url: str, timeout: float = 30.0, result: str = "window.__result") -> str:
    """Start a browser, open `url`, return the string the page puts in `result`, kill the browser."""
    with Browser() as browser:
        return browser.run_page(url, timeout=timeout, result=result)


class PageServer:
    """A page's origin: a loopback HTTP server in a thread. `route(path)` answers
    `(body, content type)` or None for 404; nothing is cached by the browser."""

    def __init__(self, route: Callable[[str], tuple[bytes, str] | None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                answer = route(self.path)
                if answer is None:
                    self.send_error(404)
                    return
                data, kind = answer
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
