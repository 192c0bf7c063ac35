"""Serving the explorer's static files: `/_/` and `/_/<asset>`, with a strict policy.

Why the page is safe to serve beside the API:
- It holds no data. Every record it shows comes from the public routes, fetched by the
  browser with the user's own token, so it can never show what that token would not.
  The files themselves need no token (like `/openapi.json`, they describe nothing private).
- Record values are put in the page as text (`textContent`), never parsed as HTML; the
  `Content-Security-Policy` below allows scripts and styles from this origin only (no
  inline script, no `eval`), connections to this origin only (`'self'` covers the
  same-origin `ws:`/`wss:` upgrades, CSP Level 3 §6.7.2.8), and nothing else;
  `nosniff` stops a browser from running a file as anything but its declared type.

Whether it is served at all is `explorer_enabled()`: by default only where nobody else can
reach it and nothing needs a token (a loopback bind, guard off); SERVICE_EXPLORER decides
otherwise. Off, `/_/` is an unknown route (404).

The assets are read once, through `importlib.resources`, so they load the same from an
installed package, a checkout or a `dbsvc build` zipapp. Imports the protocol layer's
value types and `dbsvc.errors`; never storage, never h11.
"""

from __future__ import annotations

import ipaddress
from importlib import resources

from dbsvc.errors import MethodNotAllowed, NotFound
from dbsvc.http.types import Request, Response
from dbsvc.routes import EXPLORER_PATH, READ_METHODS

# asset name (the path after `/_/`) -> (file beside this module, Content-Type)
ASSETS: dict[str, tuple[str, str]] = {
    "": ("index.html", "text/html; charset=utf-8"),
    "explorer.css": ("explorer.css", "text/css; charset=utf-8"),
    "explorer.js": ("explorer.js", "text/javascript; charset=utf-8"),
    "explorer-query.js": ("explorer-query.js", "text/javascript; charset=utf-8"),  # the query form
    "explorer-edit.js": ("explorer-edit.js", "text/javascript; charset=utf-8"),  # the record form
    "explorer-record.js": ("explorer-record.js", "text/javascript; charset=utf-8"),  # the record pane
    "explorer-live.js": ("explorer-live.js", "text/javascript; charset=utf-8"),  # live mode
    "favicon.svg": ("favicon.svg", "image/svg+xml"),  # so the browser asks for no /favicon.ico
}

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),  # revalidate: a new dbsvc version ships new files
)


def explorer_enabled(setting: bool | None, host: str, guarded: bool) -> bool:
    """SERVICE_EXPLORER when set (`setting`), else on only for a loopback bind without the guard."""
    if setting is not None:
        return setting
    return is_loopback(host) and not guarded


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the port on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def load_assets() -> dict[str, tuple[bytes, str]]:
    """Each asset's bytes and Content-Type, read from the package."""
    folder = resources.files(__package__)
    return {name: (folder.joinpath(filename).read_bytes(), kind) for name, (filename, kind) in ASSETS.items()}


class ExplorerPage:
    """Answers the explorer's paths; built once per server (the files are read here)."""

    def __init__(self) -> None:
        self._assets = load_assets()

    @staticmethod
    def owns(path: str) -> bool:
        """Whether `path` is the explorer's: `/_` or anything under `/_/`."""
        return path.startswith(EXPLORER_PATH) or path == EXPLORER_PATH.rstrip("/")

    def answer(self, request: Request) -> Response:
        if request.method not in READ_METHODS:
            raise MethodNotAllowed(f"method {request.method!r} is not allowed on {request.path!r}", list(READ_METHODS))
        if request.path == EXPLORER_PATH.rstrip("/"):
            # A relative reference would resolve against `/`: the page needs the trailing slash.
            return Response(308, headers=[("Location", EXPLORER_PATH)], content_type=None)
        asset = self._assets.get(request.path[len(EXPLORER_PATH) :])
        if asset is None:
            raise NotFound(
                f"no explorer file at {request.path!r}: expected one of "
                f"{', '.join(EXPLORER_PATH + name for name in ASSETS)}"
            )
        body, content_type = asset
        return Response(200, body, list(SECURITY_HEADERS), content_type=content_type)
