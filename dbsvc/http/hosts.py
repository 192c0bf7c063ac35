"""The Host check: which names a request may address this server by (DNS rebinding).

Job: decide whether a request's `Host` header names this server. A page at
`http://evil.example` can rebind its own name to 127.0.0.1 and then read a loopback
service as "same origin": the browser sends `Host: evil.example:3000`, and nothing but
the Host tells the request apart from one of our own pages (the same-origin rule of the
WebSocket routes compares Origin with Host, so it passes too). Like Jupyter's
`allow_remote_access` and Vite's `server.allowedHosts`, the server answers only to the
names it is known by. Pure: no I/O; imports nothing from dbsvc.

Rules:
1. An empty list allows any Host (a server behind a proxy, reached by many names).
2. A name matches a Host whatever its port and letter case; an IPv6 literal is written
   in brackets (`[::1]`). A name starting with a dot (`.example.com`) matches that domain
   and every name under it (Django's ALLOWED_HOSTS rule); `*` allows any Host.
3. A request without a Host header passes: only HTTP/1.0 may omit it (h11 refuses an
   HTTP/1.1 request without one), and browsers, the only clients a rebinding page can
   drive, always send it.
4. LOOPBACK_NAMES is the list a loopback bind with the guard off gets when none is
   configured (dbsvc/service.py decides it, where the guard is known).
"""

from __future__ import annotations

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
SEEN_LIMIT = 1024  # permitted Host values remembered (any more are checked each time)


def host_name(host: str) -> str:
    """The name of a Host header value without its port, lower case (`[::1]:3000` -> `[::1]`)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end >= 0 else host
    name, _, _ = host.partition(":")
    return name.rstrip(".")  # `localhost.` is `localhost` (a rooted name)


class HostPolicy:
    """The names requests may address this server by (rules 1-2)."""

    __slots__ = ("enabled", "_names", "_domains", "_seen")

    def __init__(self, allowed: tuple[str, ...]) -> None:
        names = {n.strip().lower() for n in allowed if n.strip()}
        self.enabled = bool(names) and "*" not in names
        self._names = frozenset(n for n in names if not n.startswith("."))
        self._domains = tuple(n for n in names if n.startswith("."))
        # Host values already permitted, as the client wrote them: a client sends the same
        # Host on every request, so the check is one set lookup after its first.
        self._seen: set[str] = set()

    @property
    def remembered(self) -> frozenset[str]:
        """The permitted Host values kept for a quick answer (at most SEEN_LIMIT)."""
        return frozenset(self._seen)

    def permits(self, host: str | None) -> bool:
        if not self.enabled or host is None or host in self._seen:  # rules 1 and 3
            return True
        name = host_name(host)
        if name in self._names or any(name.endswith(domain) or name == domain[1:] for domain in self._domains):
            if len(self._seen) < SEEN_LIMIT:
                self._seen.add(host)
            return True
        return False
