"""CORS (the Fetch standard's CORS protocol) for the origins in `SERVICE_CORS_ORIGINS`.

Job: decide the extra response headers for a request carrying `Origin`, and answer
preflight requests (`OPTIONS` with `Access-Control-Request-Method`) without the
application. Pure: no I/O, no h11; of dbsvc it reads only the route table's methods.

Rules:
1. CORS is off when no origins are configured: no headers are added, OPTIONS goes to the app.
2. An allowed origin (listed, or `*` configured) gets `Access-Control-Allow-Origin`: the
   origin itself, or `*` when the wildcard is configured. Credentials are never allowed
   (tokens travel in `Authorization`, which a wildcard origin may still send explicitly).
3. Every response under CORS carries `Vary: Origin`, allowed or not, so a shared cache never
   serves one origin's answer to another.
4. Actual responses expose Location, X-Request-Id, Dbsvc-Watermark, Dbsvc-Offset, Link, ETag
   (a record's version, which a browser client sends back in If-Match: issue 35).
5. A preflight is answered 204 by the protocol layer: Allow-Methods (the route table's),
   Allow-Headers (the requested ones that are in `ALLOWED_HEADERS`: the safelisted ones,
   `Authorization`, `If-Match` and `If-None-Match`, and `Dbsvc-After`, which a browser client
   sends to read its own writes from a replica or worker), Max-Age 600. A
   preflight from a disallowed origin gets 204 without Allow-* headers: the browser fails it.
"""

from __future__ import annotations

from dbsvc.routes import ALL_METHODS

ALLOWED_METHODS = ", ".join(ALL_METHODS).encode("ascii")
ALLOWED_HEADERS = frozenset(
    {
        "accept",
        "accept-language",
        "authorization",
        "cache-control",
        "content-language",
        "content-type",
        "dbsvc-after",
        "if-match",
        "if-none-match",
        "x-request-id",
        "x-requested-with",
    }
)
EXPOSED_HEADERS = b"Location, X-Request-Id, Dbsvc-Watermark, Dbsvc-Offset, Link, ETag"
MAX_AGE = b"600"

Headers = list[tuple[bytes, bytes]]


class CorsPolicy:
    """The configured origins and the headers they earn."""

    __slots__ = ("enabled", "_any", "_origins")

    def __init__(self, origins: tuple[str, ...]) -> None:
        cleaned = tuple(o.strip().rstrip("/") for o in origins if o.strip())
        self.enabled = bool(cleaned)
        self._any = "*" in cleaned
        self._origins = frozenset(cleaned)

    def _allow_origin(self, origin: str | None) -> bytes | None:
        if origin is None:
            return None
        if self._any:
            return b"*"
        if origin in self._origins:
            return origin.encode("latin-1")
        return None

    def permits(self, origin: str) -> bool:
        """Whether `origin` may use the service at all (a WebSocket upgrade): always when no
        origins are configured or `*` is, else only a listed one."""
        return not self.enabled or self._any or origin.rstrip("/") in self._origins

    def actual_headers(self, origin: str | None) -> Headers:
        """Headers for an ordinary response (rules 2-4)."""
        allowed = self._allow_origin(origin)
        if allowed is None:
            return [(b"vary", b"Origin")]
        return [
            (b"access-control-allow-origin", allowed),
            (b"access-control-expose-headers", EXPOSED_HEADERS),
            (b"vary", b"Origin"),
        ]

    def preflight_headers(self, origin: str | None, requested_headers: str | None) -> Headers:
        """Headers of the 204 answering a preflight (rule 5)."""
        allowed = self._allow_origin(origin)
        if allowed is None:
            return [(b"vary", b"Origin")]
        headers = [
            (b"access-control-allow-origin", allowed),
            (b"access-control-allow-methods", ALLOWED_METHODS),
            (b"access-control-max-age", MAX_AGE),
            (b"vary", b"Origin"),
        ]
        if requested_headers:
            echoed = [h.strip().lower() for h in requested_headers.split(",")]
            echoed = [h for h in echoed if h in ALLOWED_HEADERS]
            if echoed:
                headers.append((b"access-control-allow-headers", ", ".join(echoed).encode("ascii")))
        return headers
