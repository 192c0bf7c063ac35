"""SQLite as the oracle of `expand` over the REST API (issue 34 item 4): a LEFT JOIN.

Hypothesis makes authors (unicode names, null teams) and books pointing to them (`author`
always, `editor` often null, both often at the same author), and list queries (a filter, a
sort, limit, offset, which fields to expand in which order, with or without projections on
either side). The records go to one real server (a child process on 127.0.0.1, port 0, for
the whole module) and into in-memory `sqlite3` tables; for every answer:

- the same request without `expand` answers the same page and total, record for record,
  once each record's `_expand` is taken off (expand changes nothing else), and `_expand`
  is each record's last member;
- each record's `_expand` holds, in the order asked, exactly the entries the LEFT JOIN of
  its references gives a row for (a null reference: no entry), each the referenced author,
  projected as asked, as SQL selects it (names in NFC, the form str values are stored in).

The default run makes 15 examples (about 3 s); `-m slow` runs 300.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.server import start_server

SCHEMA = """
model Author {
  id    int   @id
  name  str   @sort
  team  str?  @filter
  @projection(card, id, name)
}

model Book {
  id      int   @id
  author  int   @ref(Author) @filter
  editor  int?  @ref(Author)
  title   str   @sort
  @projection(short, id, title)
}
"""
NAMES = st.lists(st.sampled_from(["a", "é", "e\u0301", "Z", "😀", " ", '"', "\\"]), min_size=1, max_size=3).map("".join)
FIELDS = {"author": ["author", "author:card"], "editor": ["editor", "editor:card"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("expand-oracle")
    schema = root / "books.dbs"
    schema.write_text(SCHEMA)
    server = start_server(schema, root / "data", env={"SERVICE_SYNC": "off"})
    server.loaded = {"Book": [], "Author": []}
    yield server
    server.stop()


@st.composite
def library(draw):
    authors = draw(st.lists(st.tuples(NAMES, st.none() | st.sampled_from(["x", "y"])), min_size=1, max_size=5))
    refs = st.integers(0, len(authors) - 1)
    books = draw(st.lists(st.tuples(refs, st.none() | refs, NAMES), max_size=12))
    return authors, books


@st.composite
def queries(draw):
    fields = draw(st.permutations(["author", "editor"]))[: draw(st.integers(1, 2))]
    expand = ",".join(draw(st.sampled_from(FIELDS[f])) for f in fields)
    params = [("expand", expand)]
    if draw(st.booleans()):
        params.append(("projection", "short"))
    if draw(st.booleans()):
        params.append(("sort", draw(st.sampled_from(["title", "-title"]))))
    params += [("limit", str(draw(st.integers(0, 6)))), ("offset", str(draw(st.integers(0, 3))))]
    return params


def load(server, authors, books) -> tuple[list[int], sqlite3.Connection]:
    """The library on the server and in SQLite; what the last example left is deleted first."""
    for model in ("Book", "Author"):  # children first: a referenced author is 409
        for id_ in server.loaded[model]:
            assert server.request("DELETE", f"/api/{model.lower()}/{id_}").status == 204
        server.loaded[model] = []
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE author (id INTEGER PRIMARY KEY, name TEXT, team TEXT)")
    db.execute("CREATE TABLE book (id INTEGER PRIMARY KEY, author INTEGER, editor INTEGER, title TEXT)")
    author_ids = []
    for name, team in authors:
        reply = server.post("/api/author", {"name": name, "team": team})
        assert reply.status == 201, reply
        author_ids.append(reply.json["id"])
        db.execute("INSERT INTO author VALUES (?, ?, ?)", (author_ids[-1], unicodedata.normalize("NFC", name), team))
    server.loaded["Author"] = author_ids
    for author, editor, title in books:
        body = {"author": author_ids[author], "editor": None if editor is None else author_ids[editor], "title": title}
        reply = server.post("/api/book", body)
        assert reply.status == 201, reply
        server.loaded["Book"].append(reply.json["id"])
        db.execute("INSERT INTO book VALUES (?, ?, ?, ?)", (reply.json["id"], body["author"], body["editor"], title))
    return author_ids, db


def joined(db: sqlite3.Connection, book: int, expand: str) -> dict:
    """The `_expand` SQL gives: one entry per asked field whose LEFT JOIN finds an author."""
    out = {}
    for part in expand.split(","):
        field, _colon, projection = part.partition(":")
        row = db.execute(
            f"SELECT a.id, a.name, a.team FROM book b LEFT JOIN author a ON a.id = b.{field} WHERE b.id = ?", (book,)
        ).fetchone()
        if row[0] is None:
            continue
        out[field] = {"id": row[0], "name": row[1]} if projection else {"id": row[0], "name": row[1], "team": row[2]}
    return out


PROPERTY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings(max_examples=15, **PROPERTY)
@given(data=library(), params=queries())
def test_expand_is_the_plain_page_plus_the_left_join(server, data, params):
    check(server, data, params)


@pytest.mark.slow
@settings(max_examples=300, **PROPERTY)
@given(data=library(), params=queries())
def test_expand_is_the_plain_page_plus_the_left_join_long(server, data, params):
    check(server, data, params)


def check(server, data, params) -> None:
    _ids, db = load(server, *data)
    expand = params[0][1]
    reply = server.get("/api/book?" + urlencode(params, quote_via=quote))
    plain = server.get("/api/book?" + urlencode(params[1:], quote_via=quote))
    assert reply.status == plain.status == 200, reply
    page, bare = reply.json, plain.json
    assert {k: v for k, v in page.items() if k != "data"} == {k: v for k, v in bare.items() if k != "data"}
    assert len(page["data"]) == len(bare["data"])
    for record, plain_record in zip(page["data"], bare["data"]):
        assert list(record)[-1] == "_expand"
        got = record.pop("_expand")
        assert record == plain_record
        assert got == joined(db, record["id"], expand)
        assert list(got) == [f for f in (p.partition(":")[0] for p in expand.split(",")) if f in got]
