"""No token text reaches any log record or any error message, whatever the outcome."""

from __future__ import annotations

import asyncio
import logging
import traceback

from dbsvc.auth import KeyRefreshNeeded
from dbsvc.errors import DbsvcError
from support.authkit import Reply, forge, jwk_of, mint


def _fragments(token: str) -> list[str]:
    """The token and every segment long enough to be recognisable."""
    return [token] + [part for part in token.split(".") if len(part) >= 8]


def _outcome(call) -> str:
    try:
        call()
    except DbsvcError as exc:
        return str(exc) + "".join(traceback.format_exception(exc))
    return ""


def test_no_token_text_in_logs_or_messages(make_guard, keys, jwks_server, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, every level
    jwks_server.serve_keys([jwk_of(keys["rsa"], "RS256", "k1"), jwk_of(keys["rsa_small"], "RS256", "weak")])
    guard = make_guard("RS256", jwks_url=jwks_server.url(), jwks_min_interval=0.05)
    tokens = [
        mint(keys["rsa"], "RS256", kid="k1"),
        mint(keys["rsa"], "RS256", kid="k1", tenant="other"),
        mint(keys["rsa"], "RS256", kid="k1", exp=1),
        mint(keys["rsa_other"], "RS256", kid="k1"),
        mint(keys["rsa"], "RS256", kid="nope-unknown-kid"),
        mint(keys["rsa"], "RS256", kid="k1", aud="elsewhere"),
        forge({"alg": "none", "kid": "k1"}, {"secret": "s3cr3t-claim-value"}, b"sig-bytes-here"),
        forge({"alg": "RS256", "kid": "k1", "crit": ["x"]}, {"x": 1}, b"s" * 256),
        mint(keys["rsa"], "RS256", kid="k1")[:-5] + "!!!!!",
        mint(keys["rsa"], "RS256", kid="k1", pad="p" * 9000),
    ]
    messages: list[str] = []

    async def scenario():
        for token in tokens:
            for header in (f"Bearer {token}", token):
                try:
                    guard.verify(header)
                except KeyRefreshNeeded:
                    await guard.refresh_keys()
                except DbsvcError:
                    pass
                messages.append(_outcome(lambda h=header: guard.verify(h)))
            messages.append(_outcome(lambda t=token: guard.verify_token(t)))
        # A failing refresh is logged too: it must not carry the token that triggered it.
        jwks_server.replies["/jwks.json"] = Reply(500, b"down")
        await asyncio.sleep(0.06)
        messages.append(_outcome(lambda: guard.verify(f"Bearer {tokens[4]}")))
        await guard.refresh_keys()

    asyncio.run(scenario())
    assert any("jwks" in r.getMessage() for r in caplog.records)  # the capture works
    logged = []
    for record in caplog.records:
        logged.append(record.getMessage())
        logged.append(repr(record.args))
        if record.exc_info:
            logged.append("".join(traceback.format_exception(*record.exc_info)))
    text = "\n".join(logged + messages)
    for token in tokens:
        for fragment in _fragments(token):
            assert fragment not in text
    assert "s3cr3t-claim-value" not in text
