"""The outside yardstick for durable writes: FastAPI + SQLite serving the blog schema's BlogPost.

`bench/fastapi_bench.py` loads it beside `dbsvc serve schemas/blog.dbs` (issue 13, item 5:
"a single-connection durable POST should cost little more than its fsync ... FastAPI +
SQLite async answers in 0.6 ms"). It is written as a FastAPI user would write it, and does
the work dbsvc does for the same request, with the same durability:

- `POST /api/blog-post`: a JSON body validated by pydantic with the rules of
  schemas/blog.dbs (unknown fields refused, no coercion of "3" to 3 or true to 1, an int
  accepted for a float, title 1-200 characters, published defaults to false, tags any JSON
  or null, id optional), one INSERT + COMMIT, 201 with `{"id": n}` (what dbsvc answers,
  docs/guide/rest.md).
- `GET /api/blog-post/{id}`: the record or 404.
- `GET /api/blog-post?author_id=N&sort=-score&limit=20&offset=0`: a page of posts, every
  parameter optional: `author_id` filters, `sort` is `score`, `-score` or absent (id order),
  ties broken by id ascending as dbsvc breaks them (docs/guide/queries.md, "Sorting and
  pages"); `limit` defaults to 20 and is clamped to 1..100, `offset` must be >= 0. The
  answer is dbsvc's envelope, `{"data": [...], "total": n, "limit": l, "offset": o}`, with
  `total` from a COUNT(*) under the same filter (two statements, as a FastAPI user would
  write them, not one snapshot: a write between them can make the two disagree).
- SQLite in WAL mode with `PRAGMA synchronous=FULL`: every acknowledged commit is fsynced,
  as with dbsvc's SERVICE_SYNC=full. `PRAGMA foreign_keys=ON` and a `user` table, so
  author_id is checked like dbsvc's `@ref(User)`; indexes on author_id, published, score
  and title, the fields dbsvc indexes (`@filter`, `@sort`), and one on (author_id, score
  DESC) that serves the list above: SQLite appends the rowid (id) ascending to every index
  entry, so `WHERE author_id = ? ORDER BY score DESC, id` is a walk of that index, stopped
  after the page (EXPLAIN QUERY PLAN shows no temp b-tree; with (author_id, score) it sorts
  the ties' right part). dbsvc keeps the same pair per record (the filter's matches in the
  sort field's order).

Two variants, chosen by FASTAPI_BENCH_VARIANT:
- `async` (default): `async def` endpoints over one aiosqlite connection (its own thread).
  An asyncio.Lock holds each POST's INSERT and COMMIT together, so every POST is its own
  transaction and its own fsync (without it, coroutines sharing the connection would
  commit each other's rows).
- `sync`: `def` endpoints (Starlette runs them in its thread pool) over plain sqlite3, one
  connection per pool thread; a threading.Lock serializes the writers (SQLite takes one
  writer at a time, and its busy handler would otherwise sleep whole milliseconds).

uvicorn runs with its defaults (uvloop and httptools when installed, one worker) except the
access log, which is off: it writes to stdout, which nobody reads after `PORT <n>`.

    FASTAPI_BENCH_DB=/tmp/x/blog.sqlite python bench/fastapi_sqlite_app.py [--port 0]

creates the tables when missing (`create_schema` does the same for the bench's seeding),
prints `PORT <n>` on stdout once it accepts connections (http_bench.start_server reads it)
and one line on stderr naming the variant, event loop and HTTP protocol; SIGTERM stops it.
"""

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sqlite3
import sys
import threading
from typing import Annotated, Any

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS user (
    id      INTEGER PRIMARY KEY,
    email   TEXT NOT NULL UNIQUE,
    name    TEXT NOT NULL,
    age     INTEGER,
    role    TEXT NOT NULL DEFAULT 'reader',
    joined  TEXT NOT NULL,
    profile TEXT
);
CREATE TABLE IF NOT EXISTS blog_post (
    id        INTEGER PRIMARY KEY,
    author_id INTEGER NOT NULL REFERENCES user(id),
    title     TEXT NOT NULL,
    body      TEXT NOT NULL,
    published INTEGER NOT NULL DEFAULT 0,
    score     REAL NOT NULL,
    tags      TEXT
);
CREATE INDEX IF NOT EXISTS blog_post_author ON blog_post(author_id);
CREATE INDEX IF NOT EXISTS blog_post_published ON blog_post(published);
CREATE INDEX IF NOT EXISTS blog_post_score ON blog_post(score);
CREATE INDEX IF NOT EXISTS blog_post_title ON blog_post(title);
CREATE INDEX IF NOT EXISTS blog_post_author_score ON blog_post(author_id, score DESC);
"""

PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON")

INSERT = (
    "INSERT INTO blog_post (id, author_id, title, body, published, score, tags) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id"
)
COLUMNS = "id, author_id, title, body, published, score, tags"
SELECT = f"SELECT {COLUMNS} FROM blog_post WHERE id = ?"

# The list's `sort` -> ORDER BY: ties broken by id ascending whichever way the field goes,
# dbsvc's rule, so the two servers answer the same page.
ORDER_BY = {None: "id", "score": "score, id", "-score": "score DESC, id"}
LIST_LIMIT, LIST_LIMIT_MAX = 20, 100


def list_sql(author_id: int | None, sort: str | None) -> tuple[str, str, tuple]:
    """The page's SELECT (its parameters end with LIMIT and OFFSET), its COUNT(*) and the
    filter's parameters, for `GET /api/blog-post` (fastapi_bench prints the page's plan)."""
    where, where_args = ("WHERE author_id = ?", (author_id,)) if author_id is not None else ("", ())
    select = f"SELECT {COLUMNS} FROM blog_post {where} ORDER BY {ORDER_BY[sort]} LIMIT ? OFFSET ?"
    return select, f"SELECT count(*) FROM blog_post {where}", where_args


def create_schema(path: str) -> None:
    """The tables and indexes, in WAL mode (the journal mode is kept in the file)."""
    conn = sqlite3.connect(path)
    try:
        for pragma in PRAGMAS:
            conn.execute(pragma)
        conn.executescript(SCHEMA_SQL)
        conn.commit()
    finally:
        conn.close()


def build_app(path: str, variant: str):  # type: ignore[no-untyped-def]
    from typing import Literal

    from fastapi import FastAPI, HTTPException, Query
    from pydantic import BaseModel, ConfigDict, Field

    class BlogPostIn(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        id: int | None = None
        author_id: int
        title: Annotated[str, Field(min_length=1, max_length=200)]
        body: str
        published: bool = False
        score: float
        tags: Any = None

    class Created(BaseModel):
        id: int

    class BlogPost(BaseModel):
        id: int
        author_id: int
        title: str
        body: str
        published: bool
        score: float
        tags: Any = None

    class Page(BaseModel):
        data: list[BlogPost]
        total: int
        limit: int
        offset: int

    Sort = Literal["score", "-score"] | None
    Offset = Annotated[int, Query(ge=0)]

    def clamped(limit: int) -> int:
        return min(max(limit, 1), LIST_LIMIT_MAX)

    def params(post: BlogPostIn) -> tuple:
        tags = None if post.tags is None else json.dumps(post.tags, separators=(",", ":"))
        return (post.id, post.author_id, post.title, post.body, post.published, post.score, tags)

    def stored(post: BlogPostIn, new_id: int) -> dict:
        return {"id": new_id}

    def from_row(row: Any) -> dict:
        return {
            "id": row[0],
            "author_id": row[1],
            "title": row[2],
            "body": row[3],
            "published": bool(row[4]),
            "score": row[5],
            "tags": None if row[6] is None else json.loads(row[6]),
        }

    def refused(exc: sqlite3.IntegrityError) -> HTTPException:
        return HTTPException(status_code=409, detail=str(exc))

    if variant == "async":
        import aiosqlite

        state: dict[str, Any] = {}

        @contextlib.asynccontextmanager
        async def lifespan(_app):  # type: ignore[no-untyped-def]
            db = await aiosqlite.connect(path)
            for pragma in PRAGMAS:
                await db.execute(pragma)
            state["db"], state["lock"] = db, asyncio.Lock()
            try:
                yield
            finally:
                await db.close()

        app = FastAPI(lifespan=lifespan)

        @app.post("/api/blog-post", status_code=201, response_model=Created)
        async def create(post: BlogPostIn) -> dict:
            db = state["db"]
            async with state["lock"]:
                try:
                    cursor = await db.execute(INSERT, params(post))
                    (new_id,) = await cursor.fetchone()
                    await cursor.close()
                    await db.commit()
                except sqlite3.IntegrityError as exc:
                    await db.rollback()
                    raise refused(exc) from None
            return stored(post, new_id)

        @app.get("/api/blog-post/{post_id}", response_model=BlogPost)
        async def read(post_id: int) -> dict:
            async with state["db"].execute(SELECT, (post_id,)) as cursor:
                row = await cursor.fetchone()
            if row is None:
                raise HTTPException(status_code=404, detail="not found")
            return from_row(row)

        @app.get("/api/blog-post", response_model=Page)
        async def list_posts(
            author_id: int | None = None, sort: Sort = None, limit: int = LIST_LIMIT, offset: Offset = 0
        ) -> dict:
            select, count, where_args = list_sql(author_id, sort)
            limit = clamped(limit)
            async with state["db"].execute(select, (*where_args, limit, offset)) as cursor:
                rows = await cursor.fetchall()
            async with state["db"].execute(count, where_args) as cursor:
                (total,) = await cursor.fetchone()
            return {"data": [from_row(row) for row in rows], "total": total, "limit": limit, "offset": offset}

        return app

    if variant != "sync":
        raise SystemExit(f"FASTAPI_BENCH_VARIANT must be async or sync, not {variant!r}")

    local = threading.local()
    write_lock = threading.Lock()

    def connection() -> sqlite3.Connection:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(path)
            for pragma in PRAGMAS:
                conn.execute(pragma)
            local.conn = conn
        return conn

    app = FastAPI()

    @app.post("/api/blog-post", status_code=201, response_model=Created)
    def create_sync(post: BlogPostIn) -> dict:
        conn = connection()
        with write_lock:
            try:
                (new_id,) = conn.execute(INSERT, params(post)).fetchone()
                conn.commit()
            except sqlite3.IntegrityError as exc:
                conn.rollback()
                raise refused(exc) from None
        return stored(post, new_id)

    @app.get("/api/blog-post/{post_id}", response_model=BlogPost)
    def read_sync(post_id: int) -> dict:
        row = connection().execute(SELECT, (post_id,)).fetchone()
        if row is None:
            raise HTTPException(status_code=404, detail="not found")
        return from_row(row)

    @app.get("/api/blog-post", response_model=Page)
    def list_posts_sync(
        author_id: int | None = None, sort: Sort = None, limit: int = LIST_LIMIT, offset: Offset = 0
    ) -> dict:
        conn = connection()
        select, count, where_args = list_sql(author_id, sort)
        limit = clamped(limit)
        rows = conn.execute(select, (*where_args, limit, offset)).fetchall()
        (total,) = conn.execute(count, where_args).fetchone()
        return {"data": [from_row(row) for row in rows], "total": total, "limit": limit, "offset": offset}

    return app


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="FastAPI + SQLite BlogPost service (bench yardstick)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    path = os.environ.get("FASTAPI_BENCH_DB")
    if not path:
        parser.error("FASTAPI_BENCH_DB must name the SQLite file, e.g. FASTAPI_BENCH_DB=/tmp/x/blog.sqlite")

    import uvicorn  # after the arguments: --help and a usage error need no server package

    variant = os.environ.get("FASTAPI_BENCH_VARIANT", "async")
    create_schema(path)
    app = build_app(path, variant)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, access_log=False, log_level="warning")  # loop, http: "auto"

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.should_exit:
                return
            protocol = getattr(self.config, "http_protocol_class", None)
            print(
                f"fastapi_sqlite_app: variant {variant}, loop "
                f"{type(asyncio.get_running_loop()).__module__}, http "
                f"{getattr(protocol, '__name__', protocol)}",
                file=sys.stderr,
                flush=True,
            )
            sys.stdout.write(f"PORT {port}\n")
            sys.stdout.flush()

    Server(config).run(sockets=[listener])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
