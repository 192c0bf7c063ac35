"""The token guard: verify-only bearer tokens (RFC 6750) against one configured key source.

Job: `Guard.verify(authorization)` is the synchronous hot path the HTTP app calls for
every guarded request; `verify_token(token)` is the same for the WebSocket `bearer.<JWT>`
subprotocol. Both answer the claims or raise:

- `TokenError(msg, sent=False)` when no bearer token was sent (401 without an error code),
- `TokenError(msg)` for a malformed, badly signed, expired ... token (401 invalid_token),
- `TokenError(msg, forbidden=True)` when a valid token is for another tenant (403),
- `KeysUnavailable` (503 + Retry-After) while a JWKS guard has never had keys,
- `KeyRefreshNeeded` when a fetch would help (unknown `kid`, stale keys, or a fetch is
  already under way); the app then awaits `refresh_keys()` and calls verify again.

Order of checks for an uncached token, cheapest and least trusting first: size (before
any decoding), segments and base64url, header (`alg` equals the configured one, no
`crit`), key selection, signature, then claims (parsed only after the signature holds),
and the tenant last, so 403 is only ever said about a genuine token.

Invariants:

- A verified token is cached until `exp + leeway` in a bounded dict (oldest entry
  evicted first): a hot token costs a dict lookup and a clock read. The cache is cleared
  whenever the key material changes, so a key removed from the JWKS stops working at
  the next refresh even for cached tokens.
- JWKS keys are fetched in a worker thread, one fetch at a time (single flight), at most
  once per `jwks_min_interval` (10 s) on demand, and again when the response's max-age
  (default 5 min) runs out. A failed fetch keeps the keys it had.
- No token text is ever logged or put in a message; claims are never logged either.
- `cryptography` is imported only when a Guard is built (through `keys` and `jwks`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from dbsvc.auth.jwt import check_claims, check_header, parse_claims, parse_token
from dbsvc.auth.settings import AuthConfig
from dbsvc.errors import ConfigError, Forbidden, RequestError, TokenError, Unauthorized, Unavailable

if TYPE_CHECKING:
    from dbsvc.auth.jwks import KeySet
    from dbsvc.auth.keys import VerifyKey
    from dbsvc.interfaces import TokenGuard

log = logging.getLogger("dbsvc.auth")

REALM = "dbsvc"


class KeysUnavailable(Unavailable):
    """503: the JWKS guard has no keys yet. `retry_after` is in whole seconds and is
    also set as the `Retry-After` header of the problem response."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.headers = [("Retry-After", str(retry_after))]


class KeyRefreshNeeded(KeysUnavailable):
    """Raised by `verify` when awaiting `refresh_keys()` first could change the answer.

    It subclasses KeysUnavailable so that, if it ever escapes the app's retry, the
    client gets a 503 with `Retry-After: 1` rather than a 500.
    """

    def __init__(self) -> None:
        super().__init__("verification keys are being refreshed; retry", 1)


def www_authenticate(error: TokenError) -> str:
    """The WWW-Authenticate value for a 401 (RFC 6750 section 3; docs/guide/auth.md):
    the error code only when a token was actually sent (RFC 6750 section 3.1)."""
    if error.sent:
        return f'Bearer realm="{REALM}", error="invalid_token"'
    return f'Bearer realm="{REALM}"'


def token_problem(error: TokenError) -> RequestError:
    """The HTTP answer to a refused token: 403 for another tenant, else 401 with
    `WWW-Authenticate` (docs/guide/auth.md). The one translation of TokenError."""
    if error.forbidden:
        return Forbidden("the token does not grant access to this tenant")
    problem = Unauthorized(str(error))
    problem.headers = [("WWW-Authenticate", www_authenticate(error))]
    return problem


def authorize(guard: TokenGuard, authorization: str | None = None, *, token: str | None = None) -> dict[str, Any]:
    """The claims of a request's token (the `Authorization` header value, or a bare
    `token` from the WebSocket subprotocol), or the RequestError to answer: 401/403
    (`token_problem`), 503 `KeysUnavailable`. `KeyRefreshNeeded` passes through: the
    caller awaits `guard.refresh_keys()` and asks again."""
    try:
        return guard.verify(authorization) if token is None else guard.verify_token(token)
    except TokenError as exc:
        raise token_problem(exc) from None


def token_from_subprotocols(offered: Iterable[str]) -> str | None:
    """The JWT a browser offered as the `bearer.<JWT>` WebSocket subprotocol
    (docs/guide/auth.md#tokens-on-websockets), or None. The server then answers `Sec-WebSocket-Protocol: bearer`."""
    for proto in offered:
        proto = proto.strip()
        if proto[:7].lower() == "bearer.":
            return proto[7:]
    return None


def _is_loopback(url: str) -> bool:
    import ipaddress
    import urllib.parse

    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _import_crypto_modules() -> tuple[Any, Any]:
    try:
        from dbsvc.auth import jwks, keys
    except ImportError as exc:
        raise ConfigError("the token guard needs the 'cryptography' package (pip install 'dbsvc[auth]')") from exc
    return keys, jwks


class Guard:
    """Verifies bearer tokens for one tenant. Build it at start-up; see module docstring."""

    def __init__(
        self,
        config: AuthConfig,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._clock = clock
        self._monotonic = monotonic
        self._keys_mod, self._jwks_mod = _import_crypto_modules()
        self._cache: OrderedDict[str, tuple[dict[str, Any], float]] = OrderedDict()
        self._cache_size = max(1, config.token_cache_size)
        self._max_header = config.max_token_bytes + 64
        self._pem_key: VerifyKey | None = None
        self._keyset: KeySet | None = None
        self._fresh_until = math.inf  # monotonic; JWKS keys stale from then on
        self._last_attempt: float | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0  # attempts, for tests and metrics
        if config.pubkey_pem is not None:
            try:
                self._pem_key = self._keys_mod.load_pem_key(config.pubkey_pem, config.alg)
            except self._keys_mod.UnusableKey as exc:
                raise ConfigError(f"{config.pubkey_source or 'SERVICE_JWT_PUBKEY'}: {exc}") from None
        elif config.jwks_url is None:
            raise ConfigError("the guard needs SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL")
        elif config.jwks_url.startswith("http:") and not _is_loopback(config.jwks_url):
            log.warning(
                "SERVICE_JWKS_URL %s is plain http: keys fetched without TLS can be forged in transit", config.jwks_url
            )

    # -- the hot path -------------------------------------------------------------

    def verify(self, authorization: str | None) -> dict[str, Any]:
        """Claims of the bearer token in an `Authorization` header value.

        The returned dict is shared with the cache: read it, never mutate it.
        """
        if not authorization:
            raise TokenError("missing bearer token", sent=False)
        if len(authorization) > self._max_header:
            raise TokenError(f"token is larger than {self.config.max_token_bytes} bytes")
        if authorization[:7] == "Bearer " and authorization[7:8] not in (" ", "\t", ""):
            token = authorization[7:]  # the usual spelling: one slice, no scans
            if token[-1] in " \t":
                token = token.rstrip(" \t")
            return self.verify_token(token)
        # Only spaces and tabs surround the credentials (RFC 9110 OWS), as on the fast path.
        scheme, _, token = authorization.strip(" \t").partition(" ")
        if scheme.lower() != "bearer":
            # RFC 6750 section 3.1: a request without bearer credentials gets no error code.
            raise TokenError("authorization scheme is not Bearer", sent=False)
        return self.verify_token(token.strip(" \t"))

    def verify_token(self, token: str | None) -> dict[str, Any]:
        """Claims of a bare token (the WebSocket subprotocol form). Same errors as verify."""
        entry = self._cache.get(token)  # type: ignore[arg-type]  # None simply misses
        if entry is not None:
            assert token is not None
            if self._clock() >= entry[1]:
                del self._cache[token]
            elif (
                self._fresh_until == math.inf  # a PEM key never goes stale
                or self._monotonic() < self._fresh_until
                or not self._stale_refresh_due()
            ):
                return entry[0]
        return self._verify_uncached(token)

    def expires_at(self, claims: dict[str, Any]) -> float | None:
        """Unix time from which these (verified) claims are refused: `exp + leeway`, or
        None for a token without `exp`. A socket authenticated by them closes with 4401
        then (docs/guide/auth.md#tokens-on-websockets)."""
        exp = claims.get("exp")
        return None if exp is None else float(exp) + self.config.leeway

    def cached_tokens(self) -> list[str]:
        """The tokens whose verified claims are kept, oldest first (the next evicted): what
        shows the cache's bound and that a refused token is never kept."""
        return list(self._cache)

    def forget(self, token: str | None = None) -> None:
        """Drop `token`'s kept claims, or every token's: its next `verify` checks the
        signature again (as after a key set change, `_install`)."""
        if token is None:
            self._cache.clear()
        else:
            self._cache.pop(token, None)

    # -- the careful path ---------------------------------------------------------

    def _verify_uncached(self, token: str | None) -> dict[str, Any]:
        if not isinstance(token, str):
            raise TokenError("missing bearer token", sent=False)
        config = self.config
        parsed = parse_token(token, config.max_token_bytes)
        kid = check_header(parsed.header, config.alg)
        key = self._select_key(kid)
        if not key.verify(parsed.signing_input, parsed.signature):
            raise TokenError("token signature is invalid")
        claims = parse_claims(parsed.payload)
        deadline = check_claims(
            claims, now=self._clock(), leeway=config.leeway, issuer=config.issuer, audience=config.audience
        )
        self._check_tenant(claims)
        if len(self._cache) >= self._cache_size:
            self._cache.popitem(last=False)  # the oldest (readcache.py's docstring: why not a dict)
        self._cache[token] = (claims, deadline)
        return claims

    def _check_tenant(self, claims: dict[str, Any]) -> None:
        # 403, and the message never reveals the tenant this process serves.
        name = self.config.tenant_claim
        if name not in claims:
            raise TokenError(f"token has no {name!r} claim", forbidden=True)
        value = claims[name]
        if not isinstance(value, str) or value != self.config.tenant:
            raise TokenError(f"token {name!r} claim does not match this service's tenant", forbidden=True)

    def _select_key(self, kid: str | None) -> VerifyKey:
        if self._pem_key is not None:
            return self._pem_key  # a single configured key: `kid` is not consulted
        keyset = self._keyset
        if keyset is None:
            if self._inflight is not None or self._refresh_allowed():
                raise KeyRefreshNeeded()
            raise KeysUnavailable("token verification keys have not been fetched yet", self._retry_after())
        if self._stale_refresh_due():
            raise KeyRefreshNeeded()  # stale keys and no background refresher
        key = keyset.select(kid)
        if key is not None:
            return key
        if kid is None:
            raise TokenError("token has no 'kid' header and the key set holds several keys")
        if self._inflight is not None or self._refresh_allowed():
            raise KeyRefreshNeeded()
        raise TokenError("token 'kid' names no known key")

    # -- JWKS scheduling ----------------------------------------------------------

    def _stale_refresh_due(self) -> bool:
        """Keys past max-age, no background refresher, and a fetch allowed now."""
        return self._task is None and self._monotonic() >= self._fresh_until and self._refresh_allowed()

    def _refresh_allowed(self) -> bool:
        if self.config.jwks_url is None:
            return False
        last = self._last_attempt
        return last is None or self._monotonic() - last >= self.config.jwks_min_interval

    def _retry_after(self) -> int:
        last = self._last_attempt
        if last is None:
            return 1
        wait = last + self.config.jwks_min_interval - self._monotonic()
        return max(1, math.ceil(wait))

    async def refresh_keys(self) -> None:
        """Fetch the JWKS unless a fetch is running (then wait for that one) or the last
        attempt was less than `jwks_min_interval` ago (then return at once).

        Never raises for fetch failures and never blocks the event loop.
        """
        if self.config.jwks_url is None:
            return
        if self._inflight is None:
            if not self._refresh_allowed():
                return
            self._last_attempt = self._monotonic()
            self._inflight = asyncio.get_running_loop().create_task(self._fetch_once())
        await asyncio.shield(self._inflight)

    async def _fetch_once(self) -> None:
        config = self.config
        assert config.jwks_url is not None
        self.fetches += 1
        try:
            keyset, max_age = await asyncio.to_thread(
                self._jwks_mod.fetch_jwks,
                config.jwks_url,
                config.alg,
                timeout=config.jwks_timeout,
                max_bytes=config.jwks_max_bytes,
            )
        except self._jwks_mod.JwksError as exc:
            held = len(self._keyset) if self._keyset is not None else 0
            log.warning("jwks fetch from %s failed: %s; keeping %d key(s)", config.jwks_url, exc, held)
            return
        except Exception:  # a bug must not take the guard down; the old keys stay
            log.exception("jwks fetch from %s failed unexpectedly", config.jwks_url)
            return
        finally:
            # The interval runs from the end of a fetch: a slow endpoint cannot make the
            # next fetch due the moment this one gives up.
            self._last_attempt = self._monotonic()
            self._inflight = None
        self._install(keyset, max_age)

    def _install(self, keyset: KeySet, max_age: float | None) -> None:
        config = self.config
        if max_age is None:
            max_age = config.jwks_default_max_age
        max_age = min(max(max_age, config.jwks_min_interval), config.jwks_max_max_age)
        self._fresh_until = self._monotonic() + max_age
        old = self._keyset
        if old is None or old.fingerprint != keyset.fingerprint:
            self._cache.clear()  # removed keys must stop working, cached or not
            log.info(
                "jwks: %d key(s) from %s (kids %s); fresh for %g s",
                len(keyset),
                config.jwks_url,
                sorted(keyset.by_kid),
                max_age,
            )
        self._keyset = keyset

    async def start(self) -> None:
        """Start the background refresher of a JWKS guard (first fetch at once, then at
        each max-age, retrying failures every `jwks_min_interval`). Returns at once."""
        if self.config.jwks_url is None or self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        config = self.config
        while True:
            await self.refresh_keys()
            now = self._monotonic()
            last = self._last_attempt if self._last_attempt is not None else now
            due = last + config.jwks_min_interval
            if self._keyset is not None and self._fresh_until > last:
                due = max(due, self._fresh_until)
            await asyncio.sleep(max(due - now, 0.01))

    def close(self) -> None:
        """Stop the background refresher (a fetch already in its thread ends by timeout)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    @property
    def has_keys(self) -> bool:
        """True once a PEM key is loaded or a JWKS fetch has succeeded."""
        return self._pem_key is not None or self._keyset is not None
