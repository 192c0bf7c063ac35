"""Tell a service manager how the server is doing: systemd's notification protocol, sd_notify(3).

Why: a unit with `Type=notify` (deploy/systemd/dbsvc@.service) counts as started only once
the process says `READY=1`, so units ordered after it, and `systemctl start` itself, wait
until the store is open and the socket listens, not merely until the process exists.

The protocol, all of it that dbsvc uses: when the environment names a socket in
`NOTIFY_SOCKET`, send one datagram of newline-separated `KEY=VALUE` lines to it.

    NOTIFY_SOCKET=/run/systemd/notify     a path: an AF_UNIX datagram socket
    NOTIFY_SOCKET=@name                   a leading '@': the Linux abstract namespace
    READY=1\\nSTATUS=listening on ...      the datagram once the server listens
    STOPPING=1                            once it has stopped serving, before the store closes

Unset or empty: nothing is sent (not run by systemd, or a unit of another type). Other
address forms (`vsock:`) are not supported and are logged once as such. A failed send is
logged, never raised: a notification is advice to the manager, and the server works without.
Imports nothing from dbsvc.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger("dbsvc")


def notify(lines: list[str], environ: Mapping[str, str] = os.environ) -> bool:
    """Send `lines` as one notification; True if a datagram went out."""
    address = environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        target = "\0" + address[1:]
    elif address.startswith("/"):
        target = address
    else:
        log.warning("NOTIFY_SOCKET=%r is not supported: expected a path or an @abstract name", address)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall("\n".join(lines).encode())
    except OSError as exc:
        log.warning("could not notify the service manager at NOTIFY_SOCKET=%r: %s", address, exc)
        return False
    return True


def notify_ready(status: str) -> bool:
    """The server listens: the manager may start what depends on it."""
    return notify(["READY=1", f"STATUS={status}"])


def notify_stopping() -> bool:
    """The server no longer serves; what is left is closing the store."""
    return notify(["STOPPING=1", "STATUS=stopping"])
