"""What checking a built app's unpacked cache costs at each start (dbsvc/zipapp.py, rule 5).

    python bench/zipapp_cache_bench.py [--runs 50]

Builds a `--with-guard` app (cryptography, cffi, pycparser embedded), unpacks it into a
temporary cache as a first start would, then times `--runs` times each way a start could
check that directory before importing from it:

    manifest    MANIFEST.json read and compared (what a start checked before issue 30)
    stat        zipapp.check_unpacked: the manifest, UNPACKED.json, one lstat per file
                (size and mtime_ns against what the unpack recorded): what a start does
    sha256      every file read and hashed, compared with the manifest's digests

Files are in the page cache (a start right after another); a cold cache adds the reads of
the whole 16 MB to `sha256` only. Prints min / median / max in ms and one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbsvc.build import write_zipapp  # noqa: E402
from dbsvc.zipapp import MANIFEST, MANIFEST_NAME, check_unpacked, unpack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dbsvc-zipapp-cache-bench-"))
    try:
        import zipfile

        app = write_zipapp(work / "guard.pyz", "X = 1\n", with_guard=True)
        with zipfile.ZipFile(app) as archive:
            manifest = archive.read(MANIFEST)
        names: dict[str, str] = json.loads(manifest)["files"]
        target = unpack(str(app), manifest, str(work / "cache"))
        size = sum(os.path.getsize(os.path.join(target, *n.split("/"))) for n in names)

        def manifest_only() -> None:
            with open(os.path.join(target, MANIFEST_NAME), "rb") as handle:
                assert handle.read() == manifest

        def stat_check() -> None:
            assert check_unpacked(target, manifest, names) is None

        def sha256_check() -> None:
            for name, digest in names.items():
                with open(os.path.join(target, *name.split("/")), "rb") as handle:
                    assert hashlib.file_digest(handle, "sha256").hexdigest() == digest

        ways: dict[str, Callable[[], None]] = {"manifest": manifest_only, "stat": stat_check, "sha256": sha256_check}
        times: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.runs):
            for way, check in ways.items():
                started = time.perf_counter()
                check()
                times[way].append((time.perf_counter() - started) * 1000)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"checking an unpacked cache of {len(names)} files, {size:,} bytes ({args.runs} runs; "
        f"load {os.getloadavg()[0]:.1f})"
    )
    print(f"{'check':<10} {'min':>8} {'median':>8} {'max':>8}")
    for way, ms in times.items():
        print(f"{way:<10} {min(ms):6.2f}ms {statistics.median(ms):6.2f}ms {max(ms):6.2f}ms")
    print(
        json.dumps(
            {
                "files": len(names),
                "bytes": size,
                "runs": args.runs,
                "median_ms": {w: round(statistics.median(ms), 3) for w, ms in times.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
