"""Token verification: the verify-only JWT guard (docs/guide/auth.md).

Public API (what `dbsvc.app` and `dbsvc.realtime` use)::

    config = load_auth_config(os.environ, schema.auth, schema_dir)   # None: guard off
    guard = Guard(config)                  # loads a PEM key now; a JWKS guard fetches later
    await guard.start()                    # JWKS: first fetch in the background, then at max-age
    try:
        claims = guard.verify(request.header("authorization"))
    except KeyRefreshNeeded:
        await guard.refresh_keys()         # single flight, in a worker thread
        claims = guard.verify(request.header("authorization"))
    # TokenError -> 401 (WWW-Authenticate: www_authenticate(exc)) or 403 if exc.forbidden
    # KeysUnavailable -> 503 with Retry-After (its `headers`)
    guard.verify_token(token_from_subprotocols(offered))   # WebSocket `bearer.<JWT>`
    guard.expires_at(claims)               # close the socket with 4401 from then on
    guard.close()

Layout: `settings` (configuration, no crypto), `jwt` (JWS/JWT parsing and claim checks,
no crypto), `keys` (PEM/JWK loading and signature checks: the only `cryptography`
importer in dbsvc), `jwks` (fetching a key set), `guard` (caching and scheduling).
`import dbsvc.auth` does not import `cryptography`; building a Guard (or loading a config
with a PEM key) does.
"""

from __future__ import annotations

from dbsvc.auth.guard import (
    REALM,
    Guard,
    KeyRefreshNeeded,
    KeysUnavailable,
    authorize,
    token_from_subprotocols,
    token_problem,
    www_authenticate,
)
from dbsvc.auth.settings import ALGORITHMS, AuthConfig, load_auth_config

__all__ = [
    "ALGORITHMS",
    "REALM",
    "AuthConfig",
    "Guard",
    "KeyRefreshNeeded",
    "KeysUnavailable",
    "authorize",
    "load_auth_config",
    "token_from_subprotocols",
    "token_problem",
    "www_authenticate",
]
