"""SQLite as the oracle of list queries over the REST API (issue 34, "Show": the differential test).

Hypothesis makes records (nulls, equal keys, unicode, extreme numbers) and list queries
(exact filters with repeated values, every operator, sorts on several keys, limit, offset,
cursor walks to the end). The records go to one real server (a child process on 127.0.0.1,
port 0, for the whole module) through POST, and into an in-memory `sqlite3` table; every
answer must hold the ids, in order, and the total of the equivalent SQL: nulls last
ascending and first descending (docs/decisions.md), ties on the id ascending. The SQL is
written from the query independently of dbsvc's code: prefixes are `substr`, datetimes are
compared as the instants Python's `datetime` makes of them, text in code point order (SQLite's
BINARY collation on UTF-8).

Text search (`search=`) is checked against SQLite's FTS5 with prefix queries, on an alphabet
where its tokenizer and dbsvc's agree (tests/support/query_oracle.py).

The default run makes a few dozen examples (a few seconds); `-m slow` runs the larger profile.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.query_oracle import SCHEMA, Twin, body, queries, records
from support.server import start_server


@pytest.fixture(scope="module")
def oracle_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle")
    schema = root / "items.dbs"
    schema.write_text(SCHEMA)
    server = start_server(schema, root / "data", env={"SERVICE_SYNC": "off"})
    yield server
    server.stop()


class Oracle:
    """The server's Item table and its SQLite twin, refilled per example."""

    _shared: dict[int, Oracle] = {}

    def __init__(self, server) -> None:
        self.server = server
        self.ids: list[int] = []
        self.twin = Twin()

    @classmethod
    def shared(cls, server) -> Oracle:
        """One oracle per server: the records one example left are deleted by the next."""
        if id(server) not in cls._shared:
            cls._shared = {id(server): cls(server)}
        return cls._shared[id(server)]

    def load(self, rows: list[dict]) -> None:
        for id_ in self.ids:
            assert self.server.request("DELETE", f"/api/item/{id_}").status == 204
        self.ids = []
        for row in rows:
            reply = self.server.request("POST", "/api/item", body(row))
            assert reply.status == 201, reply
            self.ids.append(reply.json["id"])
        self.twin.fill(list(zip(self.ids, rows)))

    def expected(self, where: str, args: list, order: str) -> list[int]:
        return self.twin.expected(where, args, order)

    def get(self, params: list[tuple[str, str]]):
        return self.server.get("/api/item?" + urlencode(params, quote_via=quote))


def next_path(reply) -> str | None:
    link = reply.headers.get("link")
    if link is None:
        return None
    assert link.endswith('>; rel="next"'), link
    return link[1 : link.index(">")]


def check(oracle: Oracle, rows, query, page) -> None:
    params, where, args, order = query
    oracle.load(rows)
    want = oracle.expected(where, args, order)
    limit, offset = page
    reply = oracle.get(params + [("limit", str(limit)), ("offset", str(offset))])
    assert reply.status == 200, (params, reply)
    got = [r["id"] for r in reply.json["data"]]
    assert (got, reply.json["total"]) == (want[offset : offset + limit], len(want)), (params, where, args)
    assert (next_path(reply) is not None) == (limit > 0 and offset + limit < len(want)), (params, reply.headers)
    # a cursor walk from the first page to the last holds the whole list, in order
    if limit == 0:
        return
    walked, path, pages = [], "/api/item?" + urlencode(params + [("limit", str(limit))], quote_via=quote), 0
    while path is not None:
        reply = oracle.server.get(path)
        assert reply.status == 200, (path, reply)
        assert reply.json["total"] == len(want)
        walked += [r["id"] for r in reply.json["data"]]
        path = next_path(reply)
        pages += 1
        assert pages <= len(want) + 1, "a cursor walk that does not end"
    assert walked == want, (params, where, args)


PROPERTY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings(max_examples=40, **PROPERTY)
@given(rows=records(), query=queries(), page=st.tuples(st.integers(0, 6), st.integers(0, 4)))
def test_lists_agree_with_sqlite(oracle_server, rows, query, page):
    check(Oracle.shared(oracle_server), rows, query, page)


@settings(max_examples=15, **PROPERTY)
@given(rows=records(), query=queries(search=True), page=st.tuples(st.integers(0, 6), st.integers(0, 4)))
def test_text_searches_agree_with_sqlite_fts5(oracle_server, rows, query, page):
    """Every query holds a `search=` (FTS5 is the oracle: tests/support/query_oracle.py)."""
    check(Oracle.shared(oracle_server), rows, query, page)


@pytest.mark.slow
@settings(max_examples=600, **PROPERTY)
@given(rows=records(), query=queries(), page=st.tuples(st.integers(0, 8), st.integers(0, 6)))
def test_lists_agree_with_sqlite_long(oracle_server, rows, query, page):
    check(Oracle.shared(oracle_server), rows, query, page)
