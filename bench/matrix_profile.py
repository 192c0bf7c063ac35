"""Where one many-target matrix row's CPU goes in the server: py-spy under wrk, by part.

    python bench/matrix_profile.py --data DIR [--records 1000000] [--row filter] [--top 25]

bench/layer_profile.py's way (py-spy `--gil --format raw` on the service while wrk loads it,
every sample charged to its innermost frame), for a row of the matrix's many targets
(matrix_bench.py `varied_shapes`: `--row` picks the first label holding that text, say
"filter" for "cursor at random + filter") over a tenant already seeded by `service_bench.py
--matrix --records N --data DIR` (a copy: the server opens it as its writer). The server is
pinned to core 0 and wrk to core 1 as in layer_profile.py; it is loaded `--warm` seconds
first (a matrix row's warm-up), then `--duration` seconds under py-spy. The storage layer is
split by job (`PARTS`): the list's plan (bucketplan, seek, buckets, sortedlist, query,
conditions, indexes, keycolumns), the page's records (shown.py, idmap), the rest of storage.
Printed: req/s, the service's CPU us a request, each part's share and us, the `--top`
hottest functions. bench/README.md, "A GET sent as its stored text" (session 28), has the
1M filter row's profile.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import measure, start_dbsvc, stop_server  # noqa: E402
from layer_profile import _FRAME, LAYERS, profile  # noqa: E402
from matrix_bench import varied_shapes  # noqa: E402

PARTS = [
    (
        "storage: the list's plan",
        r"dbsvc/storage/(bucketplan|seek|buckets|sortedlist|query|conditions|indexes|keycolumns|orders|walks)\.py",
    ),
    ("storage: the page's records", r"dbsvc/storage/(shown|idmap|rows)\.py"),
    ("list query parse, Link, caches", r"dbsvc/(parsedlists|operators|cursors|readcache|admission)\.py"),
    *LAYERS,
]


def part_of(filename: str) -> str:
    for name, pattern in PARTS:
        if re.search(pattern, filename):
            return name
    return "other"


def regroup(raw: Path) -> tuple[Counter[str], Counter[str], int]:
    """(samples per part, per innermost function, all) of a py-spy raw file (PARTS)."""
    parts: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        match = _FRAME.match(stack.rsplit(";", 1)[-1])
        func, filename = (match["func"], match["file"]) if match else (stack, "")
        part = part_of(filename)
        parts[part] += int(count)
        functions[f"{func} ({Path(filename).name}; {part})"] += int(count)
        total += int(count)
    return parts, functions, total


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a tenant seeded by service_bench.py --matrix (a copy)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--row", default="filter", help="text of the varied_shapes label to profile")
    parser.add_argument("--warm", type=float, default=10)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if not shutil.which("py-spy"):
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    label, lua_text = next((label, lua) for label, lua in varied_shapes(args.records) if args.row in label)
    with tempfile.TemporaryDirectory(prefix="dbsvc-matrix-profile-") as tmp:
        workdir = Path(tmp)
        lua = workdir / "row.lua"
        lua.write_text(lua_text)
        proc, port, _log = start_dbsvc({"SERVICE_DATA": args.data, "RUST_LOG": "info"}, timeout=600)
        try:
            url = f"http://127.0.0.1:{port}"
            measure(proc, url, args.warm, args.connections, script=str(lua))
            result, _layers, _functions, _total = profile(
                "row", url, str(lua), proc, args.duration, args.connections, args.rate, workdir
            )
            parts, functions, total = regroup(workdir / "row.txt")
        finally:
            stop_server(proc)
    cpu = result["cpu_us_per_request"]
    print(
        f"{label}: {result['rps']:.0f} req/s, {cpu:.0f} us CPU a request, non-2xx {result['errors']}, {total} samples"
    )
    for name, count in parts.most_common():
        print(f"  {name:42s} {count / total:6.1%}  {cpu * count / total:6.1f} us")
    for func, count in functions.most_common(args.top):
        print(f"    {count / total:6.1%}  {cpu * count / total:5.1f} us  {func}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
