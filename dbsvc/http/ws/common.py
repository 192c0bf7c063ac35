"""Close codes (RFC 6455 §7.4.1) that the WebSocket server and client both send or report.

A leaf of the ws package: imports nothing, from dbsvc or wsproto, so naming a close code
never loads either side. Only codes that dbsvc itself sends or reports live here; the
application's own codes (4401 for an expired token, 1012 for a replica that bootstrapped
again) belong to the code that chooses them.
"""

from __future__ import annotations

NORMAL_CLOSURE = 1000
GOING_AWAY = 1001  # the server is shutting down (server rule 8)
NO_STATUS = 1005  # a close frame without a code
ABNORMAL = 1006  # the TCP connection ended without a close frame (never sent on the wire)
POLICY_VIOLATION = 1008  # a peer flooding control frames (server rule 10)
TOO_BIG = 1009  # a message over the receiver's limit (server rule 2, client rule C3)
INTERNAL_ERROR = 1011  # a session callback raised (server rule 6)
