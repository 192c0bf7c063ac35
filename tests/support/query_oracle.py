"""SQLite as an oracle of list queries: the records and queries hypothesis makes, and their SQL.

Shared by tests/app/test_query_oracle.py (over the REST API) and
tests/storage/test_storage_seek.py (over `Store.list_page`, with more records). The SQL
is written from the query independently of dbsvc's code: prefixes are `substr`, datetimes
are the instants Python's `datetime` makes of them, text is compared in code point order
(SQLite's BINARY collation on UTF-8), nulls last ascending and first descending, ties on
the id ascending.

Text search (`search=`) is asked of SQLite's FTS5 (`tokenize="unicode61 remove_diacritics 2"`,
each query word a prefix query `"word"*`, the words ANDed), a tokenizer written apart from
dbsvc's (dbsvc/textsearch.py). The two agree on every character `SEARCH_LETTERS`,
`SEARCH_SEPARATORS` and `TEXTS` draw from: ASCII letters and digits, precomposed and
decomposed Latin accents, Greek sigma in its three forms, a CJK ideograph, and as
separators space, punctuation, an apostrophe (straight and curly) and an emoji. They
differ where unicode61 does not apply compatibility decomposition or full case folding
(`ß` is `ss` for dbsvc only; `ﬁ`, `²`, `½`, `ª`, `ĳ`, `ǆ` are decomposed by dbsvc's NFKD
only): those are left out of the alphabet, and docs/decisions.md ("Text search") says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import strategies as st

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.tenants import create_tenant

SCHEMA = """
model Item {
  id    int        @id
  n     int?       @filter @sort
  f     float?     @sort
  s     str?       @filter @sort
  t     str        @sort @search
  b     bool       @filter
  dt    datetime?  @sort
  g     int?       @filter
  w     str?       @search
}
"""
SORTABLE = ("n", "f", "s", "t", "dt")
NULLABLE = ("n", "f", "s", "dt", "g")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Few distinct values, so equal keys are common; extremes among them.
INTS = st.sampled_from([0, 1, 2, -1, 7, 2**53, -(2**63), 2**63 - 1])
FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, -2.5, 1e308, -1e308, 5e-324, 3.0])
TEXTS = st.lists(st.sampled_from(["a", "b", "ab", "é", "e\u0301", "Z", "😀", "\u00ff", " "]), max_size=3).map("".join)
INSTANTS = st.sampled_from([0, 1, 86_400_000_000, 1_700_000_000_500_000, -1_000_000])
OFFSETS = st.sampled_from([0, 60, -330, 840])
# Text search's alphabet: where FTS5's unicode61 and dbsvc's tokenizer agree (module docstring).
SEARCH_LETTERS = ["a", "b", "ab", "ba", "Z", "é", "e\u0301", "É", "ñ", "ö", "ø", "7", "σ", "Σ", "ς", "東"]
SEARCH_SEPARATORS = [" ", " ", "-", "'", "\u2019", ", ", "😀"]
WORDS = st.lists(st.sampled_from(SEARCH_LETTERS), min_size=1, max_size=3).map("".join)
PROSE = st.lists(st.tuples(WORDS, st.sampled_from(SEARCH_SEPARATORS)), max_size=4).map(
    lambda pairs: "".join(w + s for w, s in pairs)
)


def instant_text(micros: int, offset_minutes: int) -> str:
    """An RFC 3339 text of the instant, written in the given offset."""
    zone = timezone(timedelta(minutes=offset_minutes))
    local = (EPOCH + timedelta(microseconds=micros)).astimezone(zone)
    return local.isoformat()


@st.composite
def records(draw, most: int = 14):
    out = []
    for _ in range(draw(st.integers(0, most))):
        dt = draw(st.none() | st.tuples(INSTANTS, OFFSETS))
        out.append(
            {
                "n": draw(st.none() | INTS),
                "f": draw(st.none() | FLOATS | st.integers(-3, 3)),
                "s": draw(st.none() | TEXTS),
                "t": draw(TEXTS),
                "b": draw(st.booleans()),
                "dt": dt,
                "g": draw(st.none() | st.integers(0, 2)),
                "w": draw(st.none() | PROSE),
            }
        )
    return out


def bound_value(draw, field):
    """(query text, oracle value) of a bound on `field`."""
    if field == "n":
        v = draw(INTS)
        return str(v), v
    if field == "f":
        v = draw(FLOATS | st.integers(-3, 3))
        return repr(v) if isinstance(v, float) else str(v), float(v)
    if field in ("s", "t"):
        v = draw(TEXTS)
        return v, unicodedata.normalize("NFC", v)
    micros, offset = draw(INSTANTS), draw(OFFSETS)
    return instant_text(micros, offset), micros


def _filter(draw, field: str, params: list, where: list, args: list) -> None:
    """An exact filter, a repeated value meaning "any of" (`null` too, on a nullable field)."""
    texts, oracle, null = [], [], False
    for _ in range(draw(st.integers(1, 3))):
        if field != "b" and draw(st.integers(0, 4)) == 0:
            texts.append("null")
            null = True
        elif field == "b":
            v = draw(st.booleans())
            texts.append("true" if v else "false")
            oracle.append(int(v))
        elif field in ("n", "g"):
            v = draw(INTS if field == "n" else st.integers(0, 2))
            texts.append(str(v))
            oracle.append(v)
        else:
            v = draw(TEXTS.filter(lambda text: text != "null"))
            texts.append(v)
            oracle.append(unicodedata.normalize("NFC", v))
    params += [(field, text) for text in texts]
    tests = [f"{field} IN ({', '.join('?' * len(oracle))})"] if oracle else []
    tests += [f"{field} IS NULL"] if null else []
    where.append("(" + " OR ".join(tests) + ")")
    args += oracle


def _range(draw, field: str, params: list, where: list, args: list) -> None:
    op = draw(st.sampled_from(["gt", "gte", "lt", "lte"] + (["prefix"] if field in ("s", "t") else [])))
    text, value = bound_value(draw, field)
    params.append((f"{field}__{op}", text))
    if op == "prefix":
        where.append(f"substr({field}, 1, length(?)) = ?")
        args += [value, value]
    else:
        where.append(f"{field} {dict(gt='>', gte='>=', lt='<', lte='<=')[op]} ?")
        args.append(value)


def _search(draw, params: list, where: list, args: list) -> None:
    """`search=` of one to three words (with separators around them), and its FTS5 query."""
    words = draw(st.lists(WORDS, min_size=1, max_size=3))
    seps = draw(st.lists(st.sampled_from(SEARCH_SEPARATORS), min_size=len(words) + 1, max_size=len(words) + 1))
    params.append(("search", seps[0] + "".join(w + s for w, s in zip(words, seps[1:]))))
    where.append("id IN (SELECT rowid FROM item_text WHERE item_text MATCH ?)")
    args.append(" AND ".join(f'"{w}"*' for w in words))


@st.composite
def queries(draw, search: bool = False):
    """(params, SQL where, its args, SQL order): a sort of up to three keys, then up to
    three conditions, ranges on the first sort key (what a seek serves) drawn most often;
    with `search`, always a `search=` among them."""
    params: list[tuple[str, str]] = []
    where: list[str] = []
    args: list = []
    if search:
        _search(draw, params, where, args)
    sort = draw(st.lists(st.sampled_from(SORTABLE), unique=True, max_size=3))
    sort_spec = [(f, draw(st.booleans())) for f in sort]
    nulls_tested: set[str] = set()
    filtered: set[str] = set()
    searched = search
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["first", "first", "range", "filter", "null", "search"]))
        if kind == "search":
            if searched:
                continue
            searched = True
            _search(draw, params, where, args)
        elif kind == "first" and sort:
            _range(draw, sort[0], params, where, args)
        elif kind in ("first", "range"):
            _range(draw, draw(st.sampled_from(SORTABLE)), params, where, args)
        elif kind == "filter":
            field = draw(st.sampled_from(["n", "s", "b", "g"]))
            if field in filtered:  # repeated values of one field are ORed: one draw makes them all
                continue
            filtered.add(field)
            _filter(draw, field, params, where, args)
        else:
            field = draw(st.sampled_from(NULLABLE))
            if field in nulls_tested:
                continue
            nulls_tested.add(field)
            wanted = draw(st.booleans())
            params.append((f"{field}__null", "true" if wanted else "false"))
            where.append(f"{field} IS {'' if wanted else 'NOT '}NULL")
    if sort_spec:
        params.append(("sort", ",".join(("-" if d else "") + f for f, d in sort_spec)))
    order = [f"{f} {'DESC NULLS FIRST' if d else 'ASC NULLS LAST'}" for f, d in sort_spec] + ["id ASC"]
    draw(st.randoms()).shuffle(params)
    return params, " AND ".join(where) or "1", args, ", ".join(order)


def nfc(value):
    return None if value is None else unicodedata.normalize("NFC", value)


def body(row: dict) -> dict:
    """A record of `records()` as a create body."""
    out = dict(row)
    out["dt"] = None if row["dt"] is None else instant_text(*row["dt"])
    return out


class Twin:
    """The SQLite table of the records: `fill` them with their ids, ask `expected`."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")

    def fill(self, rows: list[tuple[int, dict]]) -> None:
        self.db.execute("DROP TABLE IF EXISTS item")
        self.db.execute("DROP TABLE IF EXISTS item_text")
        self.db.execute(
            "CREATE TABLE item (id INTEGER PRIMARY KEY, n INTEGER, f REAL, s TEXT, t TEXT, b INTEGER, dt INTEGER, g INTEGER)"
        )
        self.db.execute('CREATE VIRTUAL TABLE item_text USING fts5(t, w, tokenize="unicode61 remove_diacritics 2")')
        for id_, row in rows:
            f = None if row["f"] is None else float(row["f"])
            dt = None if row["dt"] is None else row["dt"][0]
            values = (id_, row["n"], f, nfc(row["s"]), nfc(row["t"]), int(row["b"]), dt, row["g"])
            self.db.execute("INSERT INTO item VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
            self.db.execute("INSERT INTO item_text (rowid, t, w) VALUES (?, ?, ?)", (id_, nfc(row["t"]), nfc(row["w"])))

    def expected(self, where: str, args: list, order: str) -> list[int]:
        return [r[0] for r in self.db.execute(f"SELECT id FROM item WHERE {where} ORDER BY {order}", args)]


MODULE = compile_schema(parse_schema(SCHEMA, "items.dbs"))
ITEM = MODULE.BY_NAME["Item"]


async def fill(store: Store, rows: list[dict]) -> list[int]:
    """The rows inserted as Items, in order: their ids."""
    return [(await store.insert("Item", ITEM.validate_create(body(row))))["id"] for row in rows]


@contextlib.contextmanager
def filled_store(rows: list[dict]) -> Iterator[tuple[Store, list[int], Twin]]:
    """A store of `rows` in a throwaway tenant and the SQLite twin holding the same records:
    (store, their ids, twin); the store is closed after the block."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(create_tenant(tmp, "t"), MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:
            ids = asyncio.run(fill(store, rows))
            twin = Twin()
            twin.fill(list(zip(ids, rows)))
            yield store, ids, twin
        finally:
            store.close()
