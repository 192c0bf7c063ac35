"""What the token guard costs: GET one record with the guard on beside the guard off.

    python bench/auth_bench.py [--duration 10] [--connections 64] [--alg RS256]

Starts `python dbsvc.py serve schemas/blog.dbs` on port 0, pinned to core 0: with no key
configured (guard off, tenant `default`; measured without and with an Authorization
header, which it ignores), then with `SERVICE_JWT_PUBKEY` set to a freshly generated key
(guard on, tenant `bench`). Each gets one user; then wrk,
pinned to core 1, GETs `/api/user/1` (the guarded run sends the same bearer token every
time, as a real client does, so this measures the verified-token cache, not a signature
check per request). Prints the results and the ratios guarded / unguarded, measured in one
run. Uses `bench/http_bench.py`'s `run_wrk` (which installs wrk with apt-get if missing);
with `--python-load` it uses a small keep-alive http.client load loop instead (numbers
are then only comparable with each other).

The token is signed with `cryptography` directly, not with dbsvc's code.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import run_wrk, start_dbsvc, stop_server  # noqa: E402
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


def request(port: int, method: str, path: str, body: dict | None = None,
            token: str | None = None) -> tuple[int, bytes]:
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


def measure(url: str, args: argparse.Namespace, token: str | None, workdir: Path) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if args.python_load:
        python_load(url, 1, args.connections, headers)                    # warm-up
        return python_load(url, args.duration, args.connections, headers)
    script = None
    if token:
        script = str(workdir / "auth.lua")
        Path(script).write_text(f'wrk.headers["Authorization"] = "Bearer {token}"\n')
    run_wrk(url, duration=2, connections=args.connections, script=script)     # warm-up
    result = run_wrk(url, duration=args.duration, connections=args.connections, script=script)
    result.pop("raw", None)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--alg", default="RS256", choices=["RS256", "ES256"])
    parser.add_argument("--python-load", action="store_true", help="use a Python load loop, not wrk")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dbsvc-auth-bench-") as tmp:
        workdir = Path(tmp)
        pem, token = make_key_and_token(args.alg, workdir)
        results: dict[str, dict] = {}

        off_env = {"SERVICE_DATA": str(workdir / "off")}
        on_env = {
            "SERVICE_DATA": str(workdir / "on"), "SERVICE_TENANT": TENANT,
            "SERVICE_JWT_PUBKEY": str(pem), "SERVICE_JWT_ALG": args.alg,
            "SERVICE_JWT_ISSUER": ISSUER, "SERVICE_JWT_AUDIENCE": AUDIENCE,
        }
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
        subprocess.run([sys.executable, str(ROOT / "dbsvc.py"), "tenant", "create", TENANT],
                       cwd=ROOT, env={**clean, "SERVICE_DATA": on_env["SERVICE_DATA"]}, check=True,
                       stdout=subprocess.DEVNULL)

        # guard_off_with_header sends the same Authorization header to the unguarded
        # server: it separates what parsing a ~700-byte header costs the HTTP layer from
        # what the guard itself costs.
        runs = (("guard_off", off_env, None, False), ("guard_off_with_header", off_env, token, False),
                ("guard_on", on_env, token, True))
        for name, env, sent, guarded in runs:
            proc, port, _log = start_dbsvc({"RUST_LOG": "warn,dbsvc=info", "SERVICE_SYNC": "off", **env})
            try:
                status, body = request(port, "POST", "/api/user", {"email": "b@x.io", "name": "Bench"}, sent)
                if status not in (201, 409):
                    raise RuntimeError(f"{name}: seeding answered {status}: {body[:200]!r}")
                status, _ = request(port, "GET", "/api/user/1", token=sent)
                assert status == 200, (name, status)
                if guarded:
                    status, _ = request(port, "GET", "/api/user/1")
                    assert status == 401, f"the guard is not on: GET without a token answered {status}"
                results[name] = measure(f"http://127.0.0.1:{port}/api/user/1", args, sent, workdir)
            finally:
                stop_server(proc)

        off, header, on = results["guard_off"], results["guard_off_with_header"], results["guard_on"]

        def ratio(a: dict, b: dict) -> float | None:
            return round(a["rps"] / b["rps"], 3) if b["rps"] else None

        report = {
            "alg": args.alg,
            "load": "python" if args.python_load else "wrk",
            **results,
            "ratio_on_over_off": ratio(on, off),
            "ratio_on_over_off_with_header": ratio(on, header),
        }
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
