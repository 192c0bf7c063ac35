"""What the token guard costs: GET one record with the guard on beside the guard off.

    python bench/auth_bench.py [--duration 3] [--rounds 5] [--connections 64] [--alg RS256]

Starts two `python dbsvc.py serve schemas/blog.dbs` on port 0: one with no key
configured (guard off, tenant `default`; measured without and with an Authorization
header, which it ignores), one with `SERVICE_JWT_PUBKEY` set to a freshly generated key
(guard on, tenant `bench`). Each gets one user; then wrk,
pinned to core 1, GETs `/api/user/1` (the guarded run sends the same bearer token every
time, as a real client does, so this measures the verified-token cache, not a signature
check per request). Both servers run at once, pinned to core 0, and are loaded side by side
(`http_bench.side_by_side`: the median of `--rounds` ratios, each measured with both busy on
the same core, so the core's drifting speed cancels out). Prints the results and the
ratios guarded / unguarded. With `--python-load` it uses a small keep-alive http.client load
loop instead, one server after the other (numbers are then only comparable with each other).

It also times, in process, how long the guard takes to refuse a 1 MiB token (the size check
comes before any decoding; tests/auth/test_verify.py proves that nothing is decoded, this
prints what the refusal costs): `oversized_token_refusal_ms`, the median and the worst of
`--rounds` x 20 refusals. `--oversized-only` prints that figure alone, without servers.

The token is signed with `cryptography` directly, not with dbsvc's code.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import run_wrk, side_by_side, start_dbsvc, stop_server  # noqa: E402

SCHEMA = ROOT / "schemas" / "blog.dbs"
ISSUER, AUDIENCE, TENANT = "https://id.example.com/", "blog", "bench"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_key_and_token(alg: str, directory: Path) -> tuple[Path, str]:
    """A PEM public key file and a token for it, valid for an hour (RS256 or ES256)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    if alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise SystemExit(f"--alg {alg!r}: this bench mints RS256 or ES256")
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path = directory / "idp.pem"
    path.write_bytes(pem)
    now = int(time.time())
    header = _b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    claims = {"sub": "bench", "iss": ISSUER, "aud": AUDIENCE, "tenant": TENANT, "iat": now, "exp": now + 3600}
    payload = _b64(json.dumps(claims).encode())
    signing_input = f"{header}.{payload}".encode()
    if alg == "RS256":
        signature = private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        r, s = decode_dss_signature(private.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return path, f"{header}.{payload}.{_b64(signature)}"


def oversized_token_refusal(alg: str, pem: Path, rounds: int) -> dict:
    """Milliseconds the guard takes to refuse a 1 MiB bearer token (median and worst)."""
    from dbsvc.auth import Guard, load_auth_config
    from dbsvc.errors import TokenError
    from dbsvc.schema.ir import AuthSettings

    environ = {
        "SERVICE_JWT_PUBKEY": str(pem),
        "SERVICE_JWT_ALG": alg,
        "SERVICE_TENANT": TENANT,
        "SERVICE_JWT_ISSUER": ISSUER,
        "SERVICE_JWT_AUDIENCE": AUDIENCE,
    }
    config = load_auth_config(environ, AuthSettings(), str(pem.parent))
    assert config is not None
    guard = Guard(config)
    header = "Bearer eyJ" + "A" * (1 << 20) + ".e30.AAAA"
    times = []
    try:
        for _ in range(max(rounds, 1) * 20):
            started = time.perf_counter()
            try:
                guard.verify(header)
            except TokenError:
                pass
            else:
                raise RuntimeError("the guard accepted a 1 MiB token")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        guard.close()
    return {
        "token_bytes": len(header) - len("Bearer "),
        "refusals": len(times),
        "median_ms": round(statistics.median(times), 4),
        "max_ms": round(max(times), 4),
    }


def request(port: int, method: str, path: str, body: dict | None = None, token: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, data


def python_load(url: str, duration: float, connections: int, headers: dict[str, str]) -> dict:
    """A keep-alive load loop in threads: a fallback when wrk is unavailable."""
    match = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    assert match
    host, port, path = match.group(1), int(match.group(2)), match.group(3)
    counts = [0] * connections
    errors = [0] * connections
    end = time.monotonic() + duration

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        while time.monotonic() < end:
            conn.request("GET", path, headers=headers)
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                errors[i] += 1
            counts[i] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"rps": sum(counts) / (time.monotonic() - started), "requests": sum(counts), "errors": sum(errors)}


def auth_script(workdir: Path, token: str) -> str:
    script = workdir / "auth.lua"
    script.write_text(f'wrk.headers["Authorization"] = "Bearer {token}"\n')
    return str(script)


def seed(name: str, port: int, sent: str | None, guarded: bool) -> None:
    status, body = request(port, "POST", "/api/user", {"email": "b@x.io", "name": "Bench"}, sent)
    if status not in (201, 409):
        raise RuntimeError(f"{name}: seeding answered {status}: {body[:200]!r}")
    status, _ = request(port, "GET", "/api/user/1", token=sent)
    assert status == 200, (name, status)
    if guarded:
        status, _ = request(port, "GET", "/api/user/1")
        assert status == 401, f"the guard is not on: GET without a token answered {status}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=5, help="side-by-side rounds per ratio")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--alg", default="RS256", choices=["RS256", "ES256"])
    parser.add_argument(
        "--python-load", action="store_true", help="a Python load loop instead of wrk, one server after the other"
    )
    parser.add_argument(
        "--oversized-only", action="store_true", help="only time the refusal of a 1 MiB token (no servers)"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dbsvc-auth-bench-") as tmp:
        workdir = Path(tmp)
        pem, token = make_key_and_token(args.alg, workdir)
        oversized = oversized_token_refusal(args.alg, pem, args.rounds)
        if args.oversized_only:
            print(json.dumps({"alg": args.alg, "oversized_token_refusal_ms": oversized}, indent=2))
            return 0
        off_env = {"SERVICE_DATA": str(workdir / "off")}
        on_env = {
            "SERVICE_DATA": str(workdir / "on"),
            "SERVICE_TENANT": TENANT,
            "SERVICE_JWT_PUBKEY": str(pem),
            "SERVICE_JWT_ALG": args.alg,
            "SERVICE_JWT_ISSUER": ISSUER,
            "SERVICE_JWT_AUDIENCE": AUDIENCE,
        }
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
        subprocess.run(
            [sys.executable, str(ROOT / "dbsvc.py"), "tenant", "create", TENANT],
            cwd=ROOT,
            env={**clean, "SERVICE_DATA": on_env["SERVICE_DATA"]},
            check=True,
            stdout=subprocess.DEVNULL,
        )
        common = {"RUST_LOG": "warn,dbsvc=info", "SERVICE_SYNC": "off"}
        off, off_port, _ = start_dbsvc({**common, **off_env})
        on, on_port, _ = start_dbsvc({**common, **on_env})
        try:
            seed("guard_off", off_port, None, False)
            seed("guard_on", on_port, token, True)
            off_url = f"http://127.0.0.1:{off_port}/api/user/1"
            on_url = f"http://127.0.0.1:{on_port}/api/user/1"
            if args.python_load:
                headers = {"Authorization": f"Bearer {token}"}
                results = {
                    "guard_off": python_load(off_url, args.duration, args.connections, {}),
                    "guard_off_with_header": python_load(off_url, args.duration, args.connections, headers),
                    "guard_on": python_load(on_url, args.duration, args.connections, headers),
                }
                report = {
                    "alg": args.alg,
                    "load": "python",
                    **results,
                    "ratio_on_over_off": round(results["guard_on"]["rps"] / results["guard_off"]["rps"], 3),
                    "ratio_on_over_off_with_header": round(
                        results["guard_on"]["rps"] / results["guard_off_with_header"]["rps"], 3
                    ),
                }
            else:
                script = auth_script(workdir, token)
                run_wrk(off_url, duration=2, connections=args.connections)  # warm-up
                run_wrk(on_url, duration=2, connections=args.connections, script=script)
                # guard_off_with_header sends the same Authorization header to the unguarded
                # server: it separates what parsing a ~700-byte header costs the HTTP layer
                # from what the guard itself costs.
                plain = side_by_side(
                    (off, off_url), (on, on_url), args.rounds, args.duration, args.connections, script=script
                )
                same_header = side_by_side(
                    (off, off_url),
                    (on, on_url),
                    args.rounds,
                    args.duration,
                    args.connections,
                    script=script,
                    baseline_script=script,
                )
                report = {
                    "alg": args.alg,
                    "load": "wrk, side by side on one core (http_bench.side_by_side)",
                    "guard_off": plain["base"],
                    "guard_off_with_header": same_header["base"],
                    "guard_on": plain["subject"],
                    "ratio_on_over_off": round(plain["ratio"], 3),
                    "rounds_on_over_off": [round(r, 3) for r in plain["ratios"]],
                    "ratio_on_over_off_with_header": round(same_header["ratio"], 3),
                    "rounds_on_over_off_with_header": [round(r, 3) for r in same_header["ratios"]],
                }
        finally:
            stop_server(off)
            stop_server(on)
        report["oversized_token_refusal_ms"] = oversized
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
