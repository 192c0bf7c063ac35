"""Where a request's CPU goes, by layer: py-spy on the service under wrk, one figure at a time.

    python bench/layer_profile.py post [--records 100000] [--duration 8] [--connections 64]
    python bench/layer_profile.py get list post put patch delete --top 12

For each figure: seed a tenant of `--schema` (service_bench.seed; `peers`, the default, is
bench/peers_blog.dbs, `search` schemas/blog.dbs), start `dbsvc serve` pinned to core 0,
load it with wrk on core 1 (the figure's Lua script from service_bench), and sample the
server with `py-spy record --format raw` (pip install py-spy; ptrace must be allowed) for
the same seconds, counting only the thread that holds the GIL (`--gil`: Python work; an
fsync, a send or an idle thread waiting with the GIL released is not CPU of ours). Every
sample is charged to its innermost frame (self time; C functions such as the JSON encoder
count in the Python function that called them), and frames are grouped into layers by file
(`LAYERS`).
Printed per figure: req/s, CPU microseconds per request, each layer's share and its
microseconds per request, and with `--top N` the N hottest functions.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import measure, start_dbsvc, stop_server  # noqa: E402
from service_bench import FIGURE_SCRIPTS, WRITE_SCHEMAS, script_for, seed  # noqa: E402

# (layer, pattern on a frame's file name, which py-spy gives relative to its sys.path entry,
# say `asyncio/events.py`), first match wins.
LAYERS = [
    ("fast path: parse + response bytes", r"dbsvc/http/fastpath\.py"),
    ("h11 (handed-over requests)", r"(^|/)h11/"),
    ("connection loop, headers, output", r"dbsvc/http/"),
    ("request span log", r"dbsvc/logs\.py|(^|/)logging/"),
    ("generated handlers and validators", r"<dbsvc generated"),
    ("app wiring and runtime", r"dbsvc/(app|runtime|service|interfaces)\.py|dbsvc/realtime/"),
    ("storage: tables and indexes", r"dbsvc/storage/(table|indexes|query|batch)\.py"),
    ("fsync thread", r"dbsvc/storage/fsyncthread\.py|(^|/)concurrent/futures/|(^|/)threading\.py"),
    ("storage: store, commit queue, log", r"dbsvc/storage/"),
    ("json encode/decode", r"(^|/)json/"),
    ("asyncio loop and socket I/O", r"(^|/)asyncio/|(^|/)(selectors|socket)\.py"),
]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def layer_of(filename: str) -> str:
    for name, pattern in LAYERS:
        if re.search(pattern, filename):
            return name
    return "other"


def parse_raw(path: Path) -> tuple[Counter[str], Counter[str], int]:
    """(samples per layer, samples per innermost function, all samples) of a py-spy raw file:
    one line per distinct stack, `frame;frame;...;innermost COUNT`."""
    layers: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        innermost = stack.rsplit(";", 1)[-1]
        match = _FRAME.match(innermost)
        func, filename = (match["func"], match["file"]) if match else (innermost, "")
        layer = layer_of(filename)
        layers[layer] += int(count)
        functions[f"{func} ({Path(filename).name}; {layer})"] += int(count)
        total += int(count)
    return layers, functions, total


def profile(
    figure: str,
    url: str,
    script: str | None,
    proc: subprocess.Popen,
    duration: float,
    connections: int,
    rate: int,
    workdir: Path,
) -> tuple[dict, Counter[str], Counter[str], int]:
    raw = workdir / f"{figure}.txt"
    spy = subprocess.Popen(
        [
            "py-spy",
            "record",
            "--gil",
            "--format",
            "raw",
            "--rate",
            str(rate),
            "--duration",
            str(int(duration)),
            "--pid",
            str(proc.pid),
            "--output",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    result = measure(proc, url, duration, connections, script=script)
    _out, err = spy.communicate(timeout=duration + 60)
    if spy.returncode != 0 or not raw.exists():
        raise RuntimeError(f"py-spy failed: {err.strip()}")
    return (result, *parse_raw(raw))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figures", nargs="+", choices=sorted(FIGURE_SCRIPTS))
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--log-level", default="info", help="RUST_LOG for the server")
    parser.add_argument(
        "--schema", default="peers", choices=sorted(WRITE_SCHEMAS), help="peers: bench/peers_blog.dbs; search: blog.dbs"
    )
    parser.add_argument("--top", type=int, default=0, help="also print the N hottest functions")
    args = parser.parse_args(argv)
    if not shutil.which("py-spy"):
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dbsvc-layer-profile-") as tmp:
        workdir = Path(tmp)
        for figure in args.figures:
            data = workdir / f"data-{figure}"
            # DELETE spends one post per request: seed enough for the warm-up and the run.
            schema = WRITE_SCHEMAS[args.schema][0]
            seed(data, args.records * 3 if figure == "delete" else args.records, schema=schema)
            proc, port, _log = start_dbsvc({"SERVICE_DATA": str(data), "RUST_LOG": args.log_level}, schema)
            try:
                path = FIGURE_SCRIPTS[figure][0]
                lua = script_for(workdir, figure, args.records)
                url = f"http://127.0.0.1:{port}{path.replace('RECORDS', str(args.records // 2))}"
                measure(proc, url, 2, args.connections, script=lua)  # warm-up
                result, layers, functions, total = profile(
                    figure, url, lua, proc, args.duration, args.connections, args.rate, workdir
                )
            finally:
                stop_server(proc)
            cpu = result["cpu_us_per_request"]
            print(
                f"\n{figure}: {result['rps']:.0f} req/s, {cpu:.0f} us CPU per request, "
                f"non-2xx {result['errors']}, {total} samples"
            )
            for name, count in layers.most_common():
                print(f"  {name:40s} {count / total:6.1%}  {cpu * count / total:6.1f} us")
            for func, count in functions.most_common(args.top):
                print(f"    {count / total:6.1%}  {func}")
            shutil.rmtree(data, ignore_errors=True)
    print(f"\nload average: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
