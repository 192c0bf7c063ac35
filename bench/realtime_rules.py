"""bench/realtime_bench.py's runs of per-record rules: 7. rules (sans-IO) and 8. owned (issue 31).

Each a run function (a dict of figures) and its show function (the printed rows); what they
measure is in realtime_bench.py's docstring.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from realtime_kit import ROOT, Receivers
from realtime_serve import Server, fanout_figures

# -- 7. rules in this process: routing by owner, a residual test, a filter (issue 31) ------------------


RULES_SCHEMA = """
model Note {
  id    int  @id
  owner str  @filter
  text  str
}
"""


class CountingChannel:
    """A `Channel` that counts frames (the rules run measures the broker, not sockets)."""

    __slots__ = ("frames",)
    writable = True

    def __init__(self) -> None:
        self.frames = 0

    def send_frame(self, frame: bytes) -> None:
        self.frames += 1

    def close(self, code: int = 1000, reason: str = "") -> None:
        pass


def rules_run(tmp: Path, subscribers: int, feed: str, writes: int) -> dict:
    """Scenario 7: one size and one kind of feed; CPU per write of the broker's drain."""
    from dbsvc.compiler import compile_schema
    from dbsvc.realtime.broker import Broker
    from dbsvc.realtime.feeds import FeedKind, FeedSpec
    from dbsvc.realtime.session import FeedSession
    from dbsvc.rules import Scope
    from dbsvc.schema import parse_schema
    from dbsvc.storage import Store
    from dbsvc.storage.tenants import create_tenant

    module = compile_schema(parse_schema(RULES_SCHEMA, str(tmp / "rules.dbs")))
    note = module.BY_NAME["Note"]
    directory = create_tenant(str(tmp / f"rules-{feed}-{subscribers}"), "t")
    store = Store.open(directory, module.MODELS, module.DESCRIPTION, sync="off")
    pending: list = []
    broker = Broker(store, module.BY_NAME, 1024)
    broker.attach(pending.append)
    key = note.keys["owner"]
    channels = []
    for i in range(subscribers):
        sub = f"u{i}"
        if feed == "owner":
            spec = FeedSpec(
                FeedKind.SUBSCRIBE, note, {}, None, Scope(field="owner", keys=frozenset({key(sub)}), key=key)
            )
        elif feed == "where":
            spec = FeedSpec(FeedKind.SUBSCRIBE, note, {}, None, Scope(where=lambda r, sub=sub: r["owner"] == sub))
        else:
            spec = FeedSpec(FeedKind.SUBSCRIBE, note, note.parse_feed_query([("owner", sub)]).filters, None)
        session = FeedSession(spec, broker, store.head_offset)
        channel = CountingChannel()
        session.on_open(channel)  # type: ignore[arg-type]
        channels.append(channel)

    async def write_all() -> float:
        cpu = 0.0
        for i in range(writes):
            await store.insert("Note", note.validate_create({"owner": f"u{i % subscribers}", "text": "x"}))
            started = time.process_time()
            while pending:
                batch = pending[:]
                del pending[:]
                for callback in batch:
                    callback()
            cpu += time.process_time() - started
        return cpu

    cpu = asyncio.run(write_all())
    store.close()
    return {
        "subscribers": subscribers,
        "feed": feed,
        "writes": writes,
        "cpu_per_write_us": cpu / writes * 1e6,
        "deliveries": sum(c.frames for c in channels),
    }


def show_rules(runs: list[dict]) -> None:
    if not runs:
        return
    print("\nrules (sans-IO broker, each subscriber allowed only its own records)")
    print(f"   {'subscribers':>11} {'feed':>7} {'writes':>7} {'deliveries':>10} {'CPU per write':>14}")
    for r in runs:
        print(
            f"   {r['subscribers']:>11,} {r['feed']:>7} {r['writes']:>7,} {r['deliveries']:>10,} "
            f"{r['cpu_per_write_us']:>11,.1f} us"
        )


# -- 8. the case: each subscriber allowed only its own records (issue 31) -----------------

OWNED_SCHEMA = """
model Note {
  id       int   @id
  owner    str   @filter
  profile  json?
  @allow(read, record.owner == token.sub)
  @allow(create, token.role == "writer")
}
"""


def note_body(tag: str, seq: int, name: str, sent_ns: int) -> bytes:
    return json.dumps({"owner": name, "profile": {"bench_ts": sent_ns, "tag": tag}}, separators=(",", ":")).encode()


def owned_run(tmp: Path, subscribers: int, args: argparse.Namespace) -> dict:
    """Scenario 8: `subscribers` owner-scoped sockets, one delivery per write."""
    import jwt  # PyJWT: tokens made by an independent implementation, as in the tests
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    pem = tmp / "owned-idp.pem"
    pem.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    schema = tmp / "owned.dbs"
    schema.write_text(OWNED_SCHEMA)
    exp = int(time.time()) + 3600

    def token(**claims: str) -> str:
        return jwt.encode({"exp": exp, "tenant": "bench", **claims}, private, algorithm="ES256")

    extra = {
        "SERVICE_MAX_SOCKETS": str(subscribers + 100),
        "SERVICE_JWT_PUBKEY": str(pem),
        "SERVICE_JWT_ALG": "ES256",
        "SERVICE_TENANT": "bench",
    }
    code = Path(args.code).resolve() if args.code else ROOT
    server = Server(tmp, f"owned-{subscribers}", "off", extra, code, schema=schema, tenant="bench")
    names = [f"s{i}" for i in range(subscribers)]
    paths = [("/subscribe/note", True, f"Authorization: Bearer {token(sub=name)}\r\n") for name in names]
    writer = b"Authorization: Bearer %s\r\n" % token(sub="writer", role="writer").encode()
    receivers = None
    result: dict = {"subscribers": subscribers, "rate": args.rate}
    try:
        result["rss_idle"] = server.rss()
        receivers = Receivers(server.port, paths, args.fanout_b_procs, timed=True)
        result["opened"], result["open_errors"] = receivers.opened, receivers.errors
        server.wait_for("subscriptions", subscribers, 60)
        write = dict(target=b"/api/note", make_body=note_body, headers=writer)
        result.update(fanout_figures(server, receivers, args, names, "owned", 1, **write))
    finally:
        if receivers is not None:
            receivers.stop()
        server.stop()
    return result


def show_owned(runs: list[dict]) -> None:
    if not runs:
        return
    print(
        "\n8. each subscriber allowed only its own records (issue 31): N /subscribe/note under "
        f"record.owner == token.sub, writes paced at {runs[0]['rate']:g}/s, one delivery per write; ms"
    )
    print(
        f"   {'subs':>6} {'w/s':>6} | {'at socket p50':>13} {'p99':>7} {'max':>7} | {'in client p99':>13} | "
        f"{'HTTP p99':>8} | {'/health p99':>11} | {'us/write':>8} | {'RSS idle/peak':>14} | received/expected"
    )
    for r in runs:
        k = r["socket"]
        print(
            f"   {r['opened']:>6} {r['writes_per_s']:>6.1f} | {k['p50_ms']:>13.2f} {k['p99_ms']:>7.2f} "
            f"{k['max_ms']:>7.2f} | {r['client']['p99_ms']:>13.2f} | {r['http']['p99_ms']:>8.2f} | "
            f"{r['health']['p99_ms']:>11.2f} | {r['cpu_us_per_write']:>8.0f} | "
            f"{r['rss_idle'] / 2**20:>5.0f}/{r['rss_peak'] / 2**20:<5.0f}MiB | {r['received']}/{r['expected']}"
            f"{'; errors ' + str(r['errors']) if r['errors'] else ''}"
            f"{'; open errors ' + str(r['open_errors']) if r['open_errors'] else ''}"
        )
