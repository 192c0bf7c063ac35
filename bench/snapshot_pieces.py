"""The snapshot step of an online compaction in process: its thread's CPU between two of
its pauses, and the file it writes (issue 36 item 3, the snapshot step's GIL share).

    python bench/snapshot_pieces.py DATA [--code DIR] [--rounds 2]

DATA is a tenant directory of the peers' blog schema (bench/peers_blog.dbs), for example a
fresh 100,000-post one made by tail_bench's `seed`; it is opened in place with
SERVICE_SYNC off (nothing is written to it but the snapshot.new of each round, removed at
the end), so copy a read-only seed first. Each round takes a cut and runs
`online.write_snapshot` unpaced (PACE 0: no sleeps, the pieces are what they are) in
this thread, with `online.Pacer.__call__` wrapped to note the thread CPU since the last
pause at each pause. A piece is a stretch the thread may hold the GIL (it lets it go
only in its writes, fsyncs and pauses, or when the switch interval asks), so its length is
what the loop of a served store may wait for the GIL behind it. Printed per round: the
step's thread CPU (and the user and system ticks of /proc/thread-self/stat), the pieces'
p50 / p90 / p99 / largest and how many ran over 2 ms, the load; then the sha256 of the
last snapshot.new, written with a fixed epoch, so two checkouts' files compare byte for
byte on the same tenant. `--code DIR` runs another checkout: alternate two for an A/B pair.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ticks() -> tuple[int, int]:
    """The calling thread's user and system CPU ticks (proc(5): fields 14 and 15)."""
    fields = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the tenant directory (DATA/default of a seed)")
    parser.add_argument("--code", type=Path, default=HERE.parent)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store, compact, files, online

    compact.new_epoch = lambda: "0" * 32  # the same file from the same tenant, whatever the tree
    online.PACE = 0.0
    pieces: list[float] = []
    pause = online.Pacer.__call__

    def noted(self: online.Pacer) -> None:
        pieces.append(time.thread_time() - self.mark)
        pause(self)

    online.Pacer.__call__ = noted  # type: ignore[method-assign]
    module = compile_schema(load_schema(str(HERE / "peers_blog.dbs")))
    store = Store.open(str(args.data), module.MODELS, module.DESCRIPTION, sync="off", replication=True)
    tables = dict(store.tables)
    tick = os.sysconf("SC_CLK_TCK") / 1e3
    try:
        for r in range(args.rounds):
            pieces.clear()
            cut = online.take_cut(tables, store.applied_offset, 0)
            cpu, (user, system) = time.thread_time(), ticks()
            try:
                online.write_snapshot(str(args.data), cut, online.Progress(), files.NO_FAULTS)
            finally:
                online.end_cut(tables)
            cpu = time.thread_time() - cpu
            user, system = (now - then for now, then in zip(ticks(), (user, system)))
            ps = sorted(pieces)
            load = Path("/proc/loadavg").read_text().split()[0]
            print(
                f"{args.code.resolve().name} round {r + 1}: thread CPU {cpu * 1e3:.0f} ms (user {user / tick:.0f}, "
                f"system {system / tick:.0f}); {len(ps)} pieces, p50 / p90 / p99 / largest "
                f"{ps[len(ps) // 2] * 1e3:.2f} / {ps[int(len(ps) * 0.9)] * 1e3:.2f} / {ps[int(len(ps) * 0.99)] * 1e3:.2f}"
                f" / {ps[-1] * 1e3:.2f} ms, {sum(p > 0.002 for p in ps)} over 2 ms; "
                f"{cut.snapshot_bytes} bytes; load {load}",
                flush=True,
            )
        path = args.data / (compact.SNAPSHOT_NAME + compact.NEW_SUFFIX)
        print(f"  sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}")
    finally:
        online.discard(str(args.data))
        store.close()


if __name__ == "__main__":
    main()
