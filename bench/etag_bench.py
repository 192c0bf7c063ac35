"""ETags and conditional requests (issue 35 item 2): what record versions cost in memory, and
what a conditional read or write costs against a plain one.

    python bench/etag_bench.py [--records 1000000] [--duration 5] [--connections 64] [--skip-http]

Memory: `Versions` (dbsvc/storage/versions.py) filled the way writes fill it, for
`--records` int ids (the array: 8 bytes a record) and a tenth as many uuid ids (the dict),
measured with tracemalloc; and the history's `prior` array, 8 bytes a row.

HTTP (wrk, the server pinned to core 0 and wrk to core 1, http_bench.py; `SERVICE_SYNC=off`
so a write's cost is the server's work, not the disk's): GET of one record plain and with
a matching `If-None-Match` (every answer a 304), and PUT of a record plain and with
`If-Match: *` (the header parsed and the version read under the write, the same work as
a tag). Each as requests/s and the server's CPU microseconds per request (`measure`).
Figures go into bench/README.md, "ETags".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tracemalloc
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.http_bench import measure, start_dbsvc, stop_server  # noqa: E402
from dbsvc.storage.versions import Versions  # noqa: E402

SEED = 1000  # records the HTTP figures read and write among


def memory(records: int) -> dict[str, float]:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ints = Versions()
    for i in range(1, records + 1):
        ints.set(i, i)
    int_bytes = tracemalloc.get_traced_memory()[0] - before
    keys = [str(uuid.UUID(int=i)) for i in range(records // 10)]  # held by the live map anyway
    before = tracemalloc.get_traced_memory()[0]
    strs = Versions()
    for n, key in enumerate(keys, 1):
        strs.set(key, n + 1_000_000)  # offsets past 256: int objects, as in a real tenant
    str_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(ints) == records and len(strs) == len(keys)
    return {"int_id_bytes_per_record": int_bytes / records, "uuid_id_bytes_per_record": str_bytes / len(keys)}


def _lua(workdir: Path, name: str, method: str, header: str | None, body: str | None) -> str:
    lines = [f'wrk.method = "{method}"']
    if body is not None:
        lines += [f"wrk.body = {json.dumps(body)}", 'wrk.headers["Content-Type"] = "application/json"']
    if header is not None:
        key, value = header.split(": ", 1)
        lines.append(f"wrk.headers[{json.dumps(key)}] = {json.dumps(value)}")
    path = workdir / f"{name}.lua"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def http_figures(duration: float, connections: int) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, port, _log = start_dbsvc({"SERVICE_DATA": str(Path(tmp) / "data"), "SERVICE_SYNC": "off"})
        try:
            base = f"http://127.0.0.1:{port}"
            for i in range(1, SEED + 1):
                body = json.dumps({"email": f"u{i}@example.com", "name": f"user {i}"}).encode()
                request = urllib.request.Request(
                    base + "/api/user", body, {"Content-Type": "application/json"}, method="POST"
                )
                urllib.request.urlopen(request).read()
            middle = SEED // 2
            url = f"{base}/api/user/{middle}"
            tag = urllib.request.urlopen(url).headers["ETag"]
            put = json.dumps({"email": f"u{middle}@example.com", "name": "written"})
            work = Path(tmp)
            runs = {
                "get": (url, None),
                "get_if_none_match": (url, _lua(work, "inm", "GET", f"If-None-Match: {tag}", None)),
                "put": (url, _lua(work, "put", "PUT", None, put)),
                "put_if_match": (url, _lua(work, "pim", "PUT", "If-Match: *", put)),
            }
            measure(proc, url, 2, connections)  # warm-up
            out = {}
            for name, (target, script) in runs.items():
                result = measure(proc, target, duration, connections, script=script)
                out[name] = {k: result[k] for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_request", "errors")}
            return out
        finally:
            stop_server(proc)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args(argv)
    report: dict = {"memory": memory(args.records)}
    if not args.skip_http:
        figures = http_figures(args.duration, args.connections)
        figures["ratios"] = {
            "get_if_none_match_over_get": figures["get_if_none_match"]["rps"] / figures["get"]["rps"],
            "put_if_match_over_put": figures["put_if_match"]["rps"] / figures["put"]["rps"],
        }
        report["http"] = figures
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
