"""Operators, cursor pages and expand at scale (issue 34): lists against a GET of one record.

    python bench/query_bench.py [--records 1000000] [--duration 5] [--connections 16] [--data DIR] [--fresh]
    python bench/query_bench.py --search-memory [--records 100000]

1. Seeds a tenant with 1,000 users and N blog posts (random titles of six lowercase
   letters, so `title__prefix=ab` matches about N / 676 of them; random scores 0-100;
   bodies of 12 words drawn from a vocabulary of 5,000 made-up words with Zipf's law,
   word k of it with weight 1/k, for text search)
   through `Store.insert_batch` in chunks of 10,000 (one fsync each), then compacts it, so
   the server opens a snapshot. `--data DIR` keeps the tenant there and reuses it when it
   holds the same number of posts.
2. Starts `python dbsvc.py serve schemas/blog.dbs` on it pinned to core 0 (wrk on core 1,
   `--connections` connections), SERVICE_SYNC=off, RUST_LOG=info (as service_bench.py).
   Each URL is asked over and over with no write between, so its list is the app's kept
   answer (dbsvc/readcache.py `PresentPages`), the cost of a polled list; `--fresh` serves
   with SERVICE_LIST_CACHE_BYTES=0, every list made afresh: the cost of the query itself.
3. Loads each URL alone for `--duration` seconds and prints req/s, p50 and p99, each
   list's p50 as a multiple of the GET's, and the median time of requests sent one after
   another on one connection ("alone"; the only figure for `offset=` at the end, whose
   requests outlast wrk's 2 s timeout), and the server's CPU time per request ("cpu us",
   the steadiest figure on a shared machine):
   - `GET /api/blog-post/<id>`, the yardstick;
   - `score__gte=50&sort=-score&limit=20` (a range sorted by its own field: a seek);
   - `title__prefix=ab&limit=20` (a prefix in id order: its first ids bisected from the
     id-sorted sublists of the title index its span covers, storage/seek.py `_first_ids`);
   - `score__gte=50&limit=20` (a range of half the posts in id order: the primary key
     walked, testing each id's score);
   - `sort=-score&limit=20`, the first page, then the last page twice: by `cursor` (made
     from the record at position N - 21, read once) and by `offset=N-20`;
   - `limit=20` against `limit=20&expand=author_id` and `...=author_id:card` (each post's
     author embedded: 20 posts of ~20 distinct authors of 1,000; issue 34 item 4, run at
     `--records 100000`).
   - text search (issue 34 item 2): `search=` two words of the vocabulary (ranks 50 and
     200: a few thousand and a few hundred posts hold them), the same sorted by score, and a
     two-letter prefix (`search=ab`, every word starting with it unioned).

`--search-memory` measures the search index alone, in process: the bytes `tracemalloc`
sees allocated by `WordIndex.build` over the N posts' titles and bodies (the index's sets,
dict, word strings and sorted word list; the records' own id objects are not counted), per
record, per distinct word and per (word, record) posting.

Figures in bench/README.md ("Operators and cursor pages").
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import string
import sys
import tempfile
import time
import urllib.request
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from http_bench import measure, start_dbsvc, stop_server  # noqa: E402

SCHEMA = ROOT / "schemas" / "blog.dbs"
CHUNK = 10_000
VOCABULARY = 5000
BODY_WORDS = 12


def vocabulary() -> tuple[list[str], list[float]]:
    """The made-up words of the bodies, and their Zipf weights (word k: 1/k)."""
    rng = random.Random(35)
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        words["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9)))] = None
    return list(words), [1 / k for k in range(1, VOCABULARY + 1)]


def bodies(count: int) -> list[str]:
    words, weights = vocabulary()
    rng = random.Random(36)
    # The same draws as `choices(words, weights)`, whose cumulative weights (5,000 sums) would
    # be made again at every call: a 1,000,000-post seed spent minutes on them alone.
    cum_weights = list(accumulate(weights))
    return [" ".join(rng.choices(words, cum_weights=cum_weights, k=BODY_WORDS)) for _ in range(count)]


def seed(data_dir: Path, posts: int, users: int = 1000) -> None:
    """The tenant `default` with `users` users and `posts` posts, compacted."""
    from dbsvc.compiler import compile_schema
    from dbsvc.schema import load_schema
    from dbsvc.storage import Store, tenants

    module = compile_schema(load_schema(str(SCHEMA)))
    directory = tenants.create_tenant(str(data_dir), "default")
    store = Store.open(str(directory), module.MODELS, module.DESCRIPTION, sync="off")
    user, post = module.BY_NAME["User"], module.BY_NAME["BlogPost"]
    rng = random.Random(34)
    texts = iter(bodies(posts))
    store.insert_batch(
        [("User", user.validate_create({"email": f"u{i}@bench.io", "name": f"u{i}"})) for i in range(users)]
    )
    for start in range(0, posts, CHUNK):
        rows = []
        for _ in range(start, min(posts, start + CHUNK)):
            body = {
                "author_id": rng.randint(1, users),
                "title": "".join(rng.choices(string.ascii_lowercase, k=6)),
                "body": next(texts),
                "published": rng.random() < 0.5,
                "score": round(rng.random() * 100, 2),
            }
            rows.append(("BlogPost", post.validate_create(body)))
        store.insert_batch(rows)
    store.close()
    tenants.compact_tenant(str(data_dir), "default")


def seeded(data: Path, posts: int) -> Path:
    """`data` holding `posts` seeded posts: seeded now, or kept from a run that seeded the
    same count there (its `posts` marker file); a directory holding another tenant stops."""
    marker = data / "posts"
    if not (marker.exists() and marker.read_text() == str(posts)):
        if (data / "default").exists():
            raise SystemExit(f"{data} holds another tenant: remove it first")
        data.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        seed(data, posts)
        marker.write_text(str(posts))
        print(f"seeded {posts} posts in {time.perf_counter() - started:.1f} s")
    return data


def get_json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=600) as reply:
        return json.load(reply)


def sequential_ms(port: int, path: str, count: int = 15) -> float:
    """The median time of `count` requests one after another on one connection: what one
    client waits, where wrk's 2 s timeout drops a request slower than that."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        connection.request("GET", path)
        reply = connection.getresponse()
        reply.read()
        assert reply.status == 200, (path, reply.status)
        times.append((time.perf_counter() - start) * 1000)
    connection.close()
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--search-memory", action="store_true", help="measure the search index's memory, in process")
    parser.add_argument("--fresh", action="store_true", help="no kept list answers (SERVICE_LIST_CACHE_BYTES=0)")
    parser.add_argument(
        "--code",
        type=Path,
        default=None,
        help="the checkout whose server is measured (two runs at once: a before/after)",
    )
    args = parser.parse_args(argv)
    if args.search_memory:
        return search_memory(args.records)
    from dbsvc.cursors import encode_cursor

    data = seeded(args.data or Path(tempfile.mkdtemp(prefix="query-bench-")), args.records)
    env = {"SERVICE_DATA": str(data), "SERVICE_SYNC": "off", "RUST_LOG": "info"}
    if args.fresh:
        env["SERVICE_LIST_CACHE_BYTES"] = "0"  # every list made afresh (module docstring, 2)
    process, port, _log = start_dbsvc(env, timeout=600, code=args.code or ROOT)
    try:
        n = get_json(port, "/api/blog-post?limit=0")["total"]
        last = get_json(port, f"/api/blog-post?sort=-score&limit=1&offset={n - 21}")["data"][0]
        cursor = encode_cursor("BlogPost", (("score", True),), [last["score"]], last["id"])
        base = f"http://127.0.0.1:{port}/api/blog-post"
        urls = {
            "GET one record": f"{base}/{n // 2}",
            "score__gte=50&sort=-score&limit=20": f"{base}?score__gte=50&sort=-score&limit=20",
            "title__prefix=ab&limit=20": f"{base}?title__prefix=ab&limit=20",
            "score__gte=50&limit=20 (a range in id order)": f"{base}?score__gte=50&limit=20",
            "sort=-score&limit=20 (first page)": f"{base}?sort=-score&limit=20",
            "sort=-score&limit=20&cursor= (last page)": f"{base}?sort=-score&limit=20&cursor={cursor}",
            f"sort=-score&limit=20&offset={n - 20} (last page)": f"{base}?sort=-score&limit=20&offset={n - 20}",
            # expand (issue 34 item 4): the same page of 20 bare, with each author embedded, and projected
            "limit=20": f"{base}?limit=20",
            "limit=20&expand=author_id": f"{base}?limit=20&expand=author_id",
            "limit=20&expand=author_id:card": f"{base}?limit=20&expand=author_id:card",
        }
        words, _weights = vocabulary()
        two = f"{words[49]}%20{words[199]}"
        urls[f"search={words[49]} {words[199]}&limit=20"] = f"{base}?search={two}&limit=20"
        urls["search=(same)&sort=-score&limit=20"] = f"{base}?search={two}&sort=-score&limit=20"
        urls["search=ab&limit=20"] = f"{base}?search=ab&limit=20"
        for label in list(urls)[-3:]:
            found = get_json(port, urls[label][len(f"http://127.0.0.1:{port}") :])
            print(f"{label}: {found['total']} matches")
        check = get_json(port, urls["sort=-score&limit=20&cursor= (last page)"][len(f"http://127.0.0.1:{port}") :])
        assert len(check["data"]) == 20, check
        print(f"{n} posts; wrk -c{args.connections}, {args.duration:g} s each, server on core 0")
        print(f"{'figure':52} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50 / GET':>10} {'alone ms':>9} {'cpu us':>7}")
        yardstick = None
        for label, url in urls.items():
            alone = sequential_ms(port, url[len(f"http://127.0.0.1:{port}") :], 15 if "offset=" not in url else 3)
            if "offset=" in url:  # seconds a request: wrk's 2 s timeout would drop them all
                print(f"{label:52} {'-':>8} {'-':>8} {'-':>8} {'-':>10} {alone:9.2f}")
                continue
            result = measure(process, url, duration=args.duration, connections=args.connections)
            yardstick = yardstick or result["p50_ms"]
            print(
                f"{label:52} {result['rps']:8.0f} {result['p50_ms']:8.2f} {result['p99_ms']:8.2f} "
                f"{result['p50_ms'] / yardstick:10.2f} {alone:9.2f} {result['cpu_us_per_request']:7.0f}"
            )
    finally:
        stop_server(process)
    return 0


def search_memory(posts: int) -> int:
    """The bytes of the search index over `posts` posts (module docstring), per record,
    per distinct word and per posting."""
    import tracemalloc

    from dbsvc.storage.words import WordIndex

    rng = random.Random(34)
    rows = []
    for id_, body in enumerate(bodies(posts), 1):
        rng.randint(1, 1000)  # the seed's draws in its order: author, title, published, score
        title = "".join(rng.choices(string.ascii_lowercase, k=6))
        rng.random(), rng.random()
        rows.append((id_, (title, body)))
    index = WordIndex([0, 1])
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index.build(rows)
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    postings, words = index.postings_count(), len(index)
    print(f"{posts} posts: {words} distinct words, {postings} postings (word, record)")
    print(
        f"search index: {size / 2**20:.1f} MiB; {size / posts:.0f} B a record, {size / words:.0f} B a distinct word, "
        f"{size / postings:.1f} B a posting"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
