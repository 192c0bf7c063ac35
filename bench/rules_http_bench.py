"""Access rules over HTTP: a served schema with `@allow` rules against the same schema without
them, side by side under wrk (issue 31's targets).

    python bench/rules_http_bench.py [--records 100000] [--owners 1000] [--rounds 5] [--duration 3]

Two tenants are seeded alike (N notes over the owners, through the Store API), then two
servers start pinned to core 0, both with the token guard on (every request carries the
same ES256 token, so both sides verify it alike):

- `rules`: `@allow(read, record.owner == token.sub)` (plus write rules) on `owner @filter`;
- `plain`: the same model without `@allow`.

Figures, as `http_bench.side_by_side` ratios (both servers loaded at once, so a neighbour's
load hits both alike; the median of `--rounds` rounds):

1. list: `GET /api/note?limit=20` on `rules` vs `GET /api/note?owner=<sub>&limit=20` on
   `plain`. Target: at least 0.90 (within 10%).
2. GET one record the token owns: `rules` vs `plain`. Target: at least 0.95 (within 5%).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import jwt  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from http_bench import side_by_side, start_dbsvc, stop_server  # noqa: E402

from dbsvc.compiler import compile_schema  # noqa: E402
from dbsvc.schema import parse_schema  # noqa: E402
from dbsvc.storage import Store  # noqa: E402
from dbsvc.storage.tenants import create_tenant  # noqa: E402

MODEL = """
[auth]
tenant_claim = "tenant"

model Note {
  id     int   @id
  owner  str   @filter
  title  str   @sort
  body   str
  score  float @sort
  %s
}
"""
RULES = """@allow(read, record.owner == token.sub)
  @allow(create update delete, record.owner == token.sub)"""
SUB = "owner-7"


def seed(directory: str, text: str, records: int, owners: int) -> None:
    module = compile_schema(parse_schema(text, "notes.dbs"))
    note = module.BY_NAME["Note"]
    store = Store.open(directory, module.MODELS, module.DESCRIPTION, sync="off")
    chunk = 10_000
    for start in range(0, records, chunk):
        rows = []
        for i in range(start, min(records, start + chunk)):
            body = {"owner": f"owner-{i % owners}", "title": f"note {i}", "body": "x" * 40, "score": i % 997 / 10}
            rows.append(("Note", note.validate_create(body)))
        store.insert_batch(rows)
    store.close()


def lua(workdir: Path, token: str) -> str:
    path = workdir / "auth.lua"
    path.write_text(f'wrk.headers["Authorization"] = "Bearer {token}"\n')
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=3)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        private = ec.generate_private_key(ec.SECP256R1())
        pem = work / "idp.pem"
        pem.write_bytes(
            private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        token = jwt.encode({"sub": SUB, "tenant": "bench", "exp": int(time.time()) + 3600}, private, algorithm="ES256")
        script = lua(work, token)
        servers = {}
        try:
            for name, rules in (("rules", RULES), ("plain", "")):
                text = MODEL % rules
                schema = work / f"{name}.dbs"
                schema.write_text(text)
                data = work / name
                seed(create_tenant(str(data), "bench"), text, args.records, args.owners)
                env = {
                    "SERVICE_DATA": str(data),
                    "SERVICE_TENANT": "bench",
                    "SERVICE_JWT_PUBKEY": str(pem),
                    "SERVICE_JWT_ALG": "ES256",
                    "SERVICE_SYNC": "off",
                }
                proc, port, _log = start_dbsvc(env, schema=schema)
                servers[name] = (proc, f"http://127.0.0.1:{port}")
            rules_proc, rules_url = servers["rules"]
            plain_proc, plain_url = servers["plain"]
            owned_id = 8  # note 7 (id 8) belongs to owner-7
            for url in (f"{rules_url}/api/note?limit=20", f"{plain_url}/api/note?owner={SUB}&limit=20"):
                request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
                with urllib.request.urlopen(request, timeout=10) as reply:
                    page = json.loads(reply.read())
                assert page["total"] == args.records // args.owners, (url, page["total"])
            print(f"{args.records} notes over {args.owners} owners; guard on both sides")
            for title, subject, baseline, goal in (
                (
                    "list limit 20: owner rule vs ?owner=",
                    (rules_proc, f"{rules_url}/api/note?limit=20"),
                    (plain_proc, f"{plain_url}/api/note?owner={SUB}&limit=20"),
                    0.90,
                ),
                (
                    "GET one owned record: owner rule vs no rules",
                    (rules_proc, f"{rules_url}/api/note/{owned_id}"),
                    (plain_proc, f"{plain_url}/api/note/{owned_id}"),
                    0.95,
                ),
            ):
                result = side_by_side(
                    baseline,
                    subject,
                    args.rounds,
                    args.duration,
                    args.connections,
                    script=script,
                    baseline_script=script,
                )
                sub, base = result["subject"], result["base"]
                print(
                    f"{title}: ratio {result['ratio']:.3f} (goal >= {goal})  "
                    f"rules {sub['rps']:.0f} req/s {sub['cpu_us_per_request']:.0f} us CPU, "
                    f"plain {base['rps']:.0f} req/s {base['cpu_us_per_request']:.0f} us CPU, "
                    f"errors {sub['errors'] + base['errors']}; rounds {[round(r, 3) for r in result['ratios']]}"
                )
        finally:
            for proc, _url in servers.values():
                stop_server(proc)


if __name__ == "__main__":
    main()
