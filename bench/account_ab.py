"""`account` a request (dbsvc/http/account.py: the span log's line and the route's meter), two
trees side by side in one process, their rounds interleaved (issue 36 item 2).

    python bench/account_ab.py OLD_TREE NEW_TREE [--rounds 40] [--no-format]

Each tree's `dbsvc` is imported under its own modules (sys.modules cleared between the two
imports; each function keeps its own module's globals), and each configures its own span log
into /dev/null. Before a tree's round the root logger's only handler is that tree's span log,
so each takes its own fast path, as a served process does. A round: 20,000 responses of
1,000 GETs of 20k's ids (durations 0.05-3 ms) through `account(True, None, request, ...)`,
then the batch formatted and written; thread CPU a request. Rounds alternate which tree goes
first, so load that drifts during the run falls on both. `--no-format` empties the buffer in
place of writing it (the line count never reaches the flush), leaving what a request pays
before its line is formatted: the calls, the test of being alone, the lock, the tuple.
Printed: min, p25 and median per tree, the ratio of medians, and how many rounds the new
tree was the cheaper. On a shared machine say the load beside the figures.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import random
import statistics
import sys
import time
from typing import Any

ROUND = 20_000


class Request:
    """What `account` reads of a request."""

    __slots__ = ("method", "path", "request_id", "meter")

    def __init__(self, post: int, meter: Any) -> None:
        self.method = "GET"
        self.path = f"/api/post/{post}"
        self.request_id = f"{post:016x}"
        self.meter = meter


def load(tree: str) -> tuple[Any, Any, Any, Any]:
    """The logs module, `account`, the metrics module and the span log of `tree`."""
    for name in [name for name in sys.modules if name == "dbsvc" or name.startswith("dbsvc.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    try:
        logs = importlib.import_module("dbsvc.logs")
        account = importlib.import_module("dbsvc.http.account").account
        metrics = importlib.import_module("dbsvc.metrics")
    finally:
        sys.path.remove(tree)
    logs.configure_logging("info", "text", stream=open(os.devnull, "w"))  # noqa: SIM115 (the run's length)
    return logs, account, metrics, logs._installed[0]


def one_round(tree: tuple[Any, Any, Any, Any], posts: list[int], seconds: list[float], no_format: bool) -> float:
    logs, account, metrics, span_log = tree
    logging.root.handlers[:] = [span_log]
    meter = metrics.RouteMeter("/api/post/{id}")
    requests = [Request(post, meter) for post in posts]
    if no_format:
        logs.SPAN_BUFFER_LINES = 10**9
    started = time.thread_time()
    for _ in range(ROUND // len(requests)):
        for request, elapsed in zip(requests, seconds):
            account(True, None, request, 200, 321, request.request_id, elapsed)
    if no_format:
        span_log._pending.clear()
        span_log._pending_count = 0
        span_log._requests = None
    else:
        logs.flush_logs()
    return (time.thread_time() - started) / ROUND * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--no-format", action="store_true")
    args = parser.parse_args()
    trees = {"old": load(args.old), "new": load(args.new)}
    rng = random.Random(7)
    posts = [rng.randrange(1, 20_001) for _ in range(1_000)]
    seconds = [rng.uniform(0.00005, 0.003) for _ in range(1_000)]
    figures: dict[str, list[float]] = {"old": [], "new": []}
    for number in range(args.rounds):
        for name in ("old", "new") if number % 2 == 0 else ("new", "old"):
            figures[name].append(one_round(trees[name], posts, seconds, args.no_format))
    for name, values in figures.items():
        ordered = sorted(values)
        print(
            f"{name}: min {ordered[0]:.2f}  p25 {ordered[len(ordered) // 4]:.2f}  median {statistics.median(ordered):.2f} us"
        )
    ratio = statistics.median(figures["new"]) / statistics.median(figures["old"])
    cheaper = sum(new < old for new, old in zip(figures["new"], figures["old"]))
    print(f"new/old by median {ratio:.3f}; new the cheaper in {cheaper} of {args.rounds} rounds")


if __name__ == "__main__":
    main()
