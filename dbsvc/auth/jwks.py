"""Fetching a JWK Set (RFC 7517 section 5) over HTTP with the standard library.

Job: one blocking function, `fetch_jwks`, that the guard runs in a worker thread
(`asyncio.to_thread`), and the immutable `KeySet` it returns. Scheduling (single flight,
the refresh interval, max-age, keeping old keys on failure) lives in `guard.py`; this
module only fetches, bounds and parses. It imports `cryptography` through `keys.py` and
is therefore imported lazily, only by a JWKS guard.

Bounds, all of them failures that keep the previous keys:

- the whole fetch (connect, headers, body) within `timeout` seconds;
- a body over `max_bytes` (by Content-Length, or counted while reading);
- any status but 200; a body that is not a JSON object with a `keys` array;
- a set with no key usable for the configured algorithm;
- a redirect to another origin (scheme, host, port) is never followed: keys come from
  the configured origin only. Same-origin redirects are followed (urllib caps them).

Keys that do not fit the algorithm (wrong `kty`, `crv`, `alg`, `use`, RSA under 2048
bits ...) are skipped one by one and logged with their `kid`; the others stay usable.
"""

from __future__ import annotations

import http.client
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.client import HTTPMessage
from typing import IO, Any

from dbsvc.auth.jwt import load_json_object
from dbsvc.auth.keys import UnusableKey, VerifyKey, key_from_jwk

log = logging.getLogger("dbsvc.auth")

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?([0-9]{1,10})\"?\s*(?:,|$)", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|,)\s*(?:no-store|no-cache)\s*(?:,|$)", re.IGNORECASE)


class JwksError(Exception):
    """A fetch that produced no usable key set; the message is safe to log."""


@dataclass(frozen=True, slots=True)
class KeySet:
    """The usable keys of one fetch. `fingerprint` changes iff the key material does."""

    by_kid: dict[str, VerifyKey] = field(default_factory=dict)
    anonymous: tuple[VerifyKey, ...] = ()
    fingerprint: frozenset[tuple[str | None, str, bytes]] = frozenset()

    def __len__(self) -> int:
        return len(self.by_kid) + len(self.anonymous)

    def select(self, kid: str | None) -> VerifyKey | None:
        """The key for a token's `kid` (RFC 7515 section 4.1.4). A token without `kid`
        is matched only when the set holds exactly one key, so no key is guessed."""
        if kid is not None:
            key = self.by_kid.get(kid)
            if key is not None:
                return key
            if not self.by_kid and len(self.anonymous) == 1:
                return self.anonymous[0]
            return None
        if len(self) == 1:
            return next(iter(self.by_kid.values())) if self.by_kid else self.anonymous[0]
        return None


def build_keyset(document: dict[str, Any], alg: str) -> KeySet:
    """The usable keys of a parsed JWK Set document. Raises JwksError if there are none."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise JwksError("response has no 'keys' array")
    by_kid: dict[str, VerifyKey] = {}
    anonymous: list[VerifyKey] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            log.warning("jwks: key #%d is not an object; skipped", index)
            continue
        try:
            key = key_from_jwk(entry, alg)
        except UnusableKey as exc:
            log.info("jwks: key #%d (kid %r) skipped: %s", index, entry.get("kid"), exc)
            continue
        if key.kid is None:
            anonymous.append(key)
        elif key.kid in by_kid:
            log.warning("jwks: duplicate kid %r; the first usable key is kept", key.kid)
        else:
            by_kid[key.kid] = key
    if not by_kid and not anonymous:
        raise JwksError(f"no key in the set is usable with {alg}")
    fingerprint = frozenset(k.fingerprint for k in (*by_kid.values(), *anonymous))
    return KeySet(by_kid, tuple(anonymous), fingerprint)


def parse_max_age(cache_control: str | None) -> float | None:
    """Seconds from `Cache-Control: max-age` (RFC 9111 section 5.2.2.1); 0 for
    no-store/no-cache; None when the header says nothing about freshness."""
    if not cache_control:
        return None
    match = _MAX_AGE.search(cache_control)
    if match:
        return float(match.group(1))
    if _NO_CACHE.search(cache_control):
        return 0.0
    return None


def origin_of(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of `url`, the scheme and host lower-cased and the port the
    scheme's default when none is written (RFC 6454 section 4): what a redirect must keep to
    be followed. Public so that the rule is tested on its own, URL by URL, beside the
    redirects a real server answers."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    default = 443 if scheme == "https" else 80
    return scheme, (parts.hostname or "").lower(), parts.port or default


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only when it stays on the configured origin."""

    def __init__(self, origin: tuple[str, str, int]) -> None:
        super().__init__()
        self._origin = origin

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        target = urllib.parse.urljoin(req.full_url, newurl)
        if origin_of(target) != self._origin:
            raise urllib.error.HTTPError(req.full_url, code, "redirect to another origin refused", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch_jwks(url: str, alg: str, *, timeout: float, max_bytes: int) -> tuple[KeySet, float | None]:
    """Fetch and parse the key set at `url` (blocking). Returns the keys and the
    response's max-age (None when it gave none). Raises JwksError, with a message
    that is safe to log, for every failure."""
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(_SameOriginRedirects(origin_of(url)))
    request = urllib.request.Request(
        url, headers={"Accept": "application/jwk-set+json, application/json", "User-Agent": "dbsvc"}
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            if response.status != 200:
                raise JwksError(f"http status {response.status}")
            length = response.headers.get("Content-Length")
            if length is not None and length.strip().isdigit() and int(length) > max_bytes:
                raise JwksError(f"response of {int(length)} bytes is over the {max_bytes}-byte cap")
            chunks: list[bytes] = []
            size = 0
            while True:
                if time.monotonic() > deadline:
                    raise JwksError(f"fetch took longer than {timeout:g} s")
                chunk = response.read1(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise JwksError(f"response is over the {max_bytes}-byte cap")
                chunks.append(chunk)
            cache_control = response.headers.get("Cache-Control")
    except urllib.error.HTTPError as exc:
        exc.close()
        raise JwksError(f"http status {exc.code} ({exc.msg})") from None
    except urllib.error.URLError as exc:
        raise JwksError(f"cannot reach the endpoint ({exc.reason})") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise JwksError(f"fetch failed ({type(exc).__name__}: {exc})") from None
    try:
        document = load_json_object(b"".join(chunks))
    except ValueError:
        raise JwksError("response is not a JSON object") from None
    return build_keyset(document, alg), parse_max_age(cache_control)
