"""A next page's `Link` cursor is the very text the maker before session 24 wrote
(cursors.py `NextLinks.after`, its keys and id now written by one bytes `%`): clients hold
cursors across a deploy, and a cursor is also a key of the kept pages (readcache.py), so not
one byte may move. Every key kind the maker writes on a path of its own (id order, an int or
datetime key, a finite float, a str, a null) and on the text made key by key (a bool, two
keys, a str id; model names with `%`):

- held to texts frozen from the maker of commit 6896775 (`FROZEN`, made by that tree);
- held to json.dumps' own writing of the same array, base64url without padding
  (docs/guide/queries.md, "Cursor pages"), for many keys made at random;
- and on a real server, a walk by the `Link`s of each sort reaches every record once, in the
  sort's order, each `Link` that same json.dumps text.
"""

from __future__ import annotations

import base64
import json
import math
import random
import struct
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.cursors import NextLinks, link_prefix
from dbsvc.operators import sort_text
from dbsvc.schema import parse_schema
from support.sortorder import ids_in_sort_order

SCHEMA = """
model Item {
  id    int       @id
  n     int?      @sort
  score float?    @sort
  title str?      @sort
  done  bool?     @sort
  at    datetime? @sort
}

model Tag {
  code  str       @id @max(40)
  score float     @sort
}
"""
MODULE = compile_schema(parse_schema(SCHEMA, "items.dbs"))
ITEM, TAG = MODULE.BY_NAME["Item"], MODULE.BY_NAME["Tag"]
PREFIX = link_prefix("/api/item", [("limit", "3")])


def sort_of(text: str) -> tuple[tuple[str, bool], ...]:
    return tuple((f.lstrip("-"), f.startswith("-")) for f in text.split(",") if f)


def dumped(model, sort, record) -> str:  # noqa: ANN001 (a CompiledModel)
    """The cursor as json.dumps writes it: the oracle, independent of cursors.py."""
    keys = [model.keys[f](record[f]) for f, _desc in sort]
    value = ["c1", model.name, sort_text(sort), keys, record[model.id_field]]
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def cursor_of(link: str) -> str:
    assert link.endswith('>; rel="next"'), link
    return parse_qs(urlsplit(link[1 : -len('>; rel="next"')]).query)["cursor"][0]


# (model, sort, record, cursor the maker of commit 6896775 wrote for it)
FROZEN = [
    ('Item', '', {'id': 1}, 'WyJjMSIsIkl0ZW0iLCIiLFtdLDFd'),
    ('Item', '', {'id': 9223372036854775807}, 'WyJjMSIsIkl0ZW0iLCIiLFtdLDkyMjMzNzIwMzY4NTQ3NzU4MDdd'),
    ('Item', '', {'id': -9223372036854775808}, 'WyJjMSIsIkl0ZW0iLCIiLFtdLC05MjIzMzcyMDM2ODU0Nzc1ODA4XQ'),
    ('Item', '', {'id': 0}, 'WyJjMSIsIkl0ZW0iLCIiLFtdLDBd'),
    ('Item', 'n', {'id': 5, 'n': 42}, 'WyJjMSIsIkl0ZW0iLCJuIixbNDJdLDVd'),
    ('Item', '-n', {'id': 6, 'n': -9223372036854775808}, 'WyJjMSIsIkl0ZW0iLCItbiIsWy05MjIzMzcyMDM2ODU0Nzc1ODA4XSw2XQ'),
    ('Item', 'n', {'id': 7, 'n': None}, 'WyJjMSIsIkl0ZW0iLCJuIixbbnVsbF0sN10'),
    ('Item', '-score', {'id': 8, 'score': 57.25}, 'WyJjMSIsIkl0ZW0iLCItc2NvcmUiLFs1Ny4yNV0sOF0'),
    ('Item', '-score', {'id': 9, 'score': 1e300}, 'WyJjMSIsIkl0ZW0iLCItc2NvcmUiLFsxZSszMDBdLDld'),
    ('Item', '-score', {'id': 10, 'score': -0.0}, 'WyJjMSIsIkl0ZW0iLCItc2NvcmUiLFstMC4wXSwxMF0'),
    ('Item', 'score', {'id': 11, 'score': 0.0}, 'WyJjMSIsIkl0ZW0iLCJzY29yZSIsWzAuMF0sMTFd'),
    ('Item', 'score', {'id': 12, 'score': 5e-324}, 'WyJjMSIsIkl0ZW0iLCJzY29yZSIsWzVlLTMyNF0sMTJd'),
    (
        'Item',
        'score',
        {'id': 13, 'score': 0.30000000000000004},
        'WyJjMSIsIkl0ZW0iLCJzY29yZSIsWzAuMzAwMDAwMDAwMDAwMDAwMDRdLDEzXQ',
    ),
    ('Item', 'score', {'id': 14, 'score': 1e16}, 'WyJjMSIsIkl0ZW0iLCJzY29yZSIsWzFlKzE2XSwxNF0'),
    ('Item', 'score', {'id': 15, 'score': 3}, 'WyJjMSIsIkl0ZW0iLCJzY29yZSIsWzMuMF0sMTVd'),
    (
        'Item',
        'score',
        {'id': 16, 'score': -1.7976931348623157e308},
        'WyJjMSIsIkl0ZW0iLCJzY29yZSIsWy0xLjc5NzY5MzEzNDg2MjMxNTdlKzMwOF0sMTZd',
    ),
    ('Item', '-score', {'id': 17, 'score': None}, 'WyJjMSIsIkl0ZW0iLCItc2NvcmUiLFtudWxsXSwxN10'),
    (
        'Item',
        'title',
        {'id': 18, 'title': 'café "quoted" \\ ☃ 😀'},
        'WyJjMSIsIkl0ZW0iLCJ0aXRsZSIsWyJjYWZcdTAwZTkgXCJxdW90ZWRcIiBcXCBcdTI2MDMgXHVkODNkXHVkZTAwIl0sMThd',
    ),
    ('Item', 'title', {'id': 19, 'title': '%d%s%a%%'}, 'WyJjMSIsIkl0ZW0iLCJ0aXRsZSIsWyIlZCVzJWElJSJdLDE5XQ'),
    ('Item', '-title', {'id': 20, 'title': ''}, 'WyJjMSIsIkl0ZW0iLCItdGl0bGUiLFsiIl0sMjBd'),
    (
        'Item',
        'title',
        {'id': 21, 'title': 'a\nb\t\x00\x7f</>'},
        'WyJjMSIsIkl0ZW0iLCJ0aXRsZSIsWyJhXG5iXHRcdTAwMDBcdTAwN2Y8Lz4iXSwyMV0',
    ),
    ('Item', 'title', {'id': 22, 'title': None}, 'WyJjMSIsIkl0ZW0iLCJ0aXRsZSIsW251bGxdLDIyXQ'),
    ('Item', 'done', {'id': 23, 'done': True}, 'WyJjMSIsIkl0ZW0iLCJkb25lIixbdHJ1ZV0sMjNd'),
    ('Item', '-done', {'id': 24, 'done': False}, 'WyJjMSIsIkl0ZW0iLCItZG9uZSIsW2ZhbHNlXSwyNF0'),
    ('Item', 'done', {'id': 25, 'done': None}, 'WyJjMSIsIkl0ZW0iLCJkb25lIixbbnVsbF0sMjVd'),
    (
        'Item',
        'at',
        {'id': 26, 'at': '2026-11-30T21:20:00.123456Z'},
        'WyJjMSIsIkl0ZW0iLCJhdCIsWzE3OTYwNzM2MDAxMjM0NTZdLDI2XQ',
    ),
    ('Item', '-at', {'id': 27, 'at': '1970-01-01T00:00:00Z'}, 'WyJjMSIsIkl0ZW0iLCItYXQiLFswXSwyN10'),
    (
        'Item',
        'at',
        {'id': 28, 'at': '0001-01-01T00:00:00Z'},
        'WyJjMSIsIkl0ZW0iLCJhdCIsWy02MjEzNTU5NjgwMDAwMDAwMF0sMjhd',
    ),
    ('Item', 'at', {'id': 29, 'at': None}, 'WyJjMSIsIkl0ZW0iLCJhdCIsW251bGxdLDI5XQ'),
    (
        'Item',
        'score,title',
        {'id': 30, 'score': 57.25, 'title': 'été'},
        'WyJjMSIsIkl0ZW0iLCJzY29yZSx0aXRsZSIsWzU3LjI1LCJcdTAwZTl0XHUwMGU5Il0sMzBd',
    ),
    (
        'Item',
        '-n,-at,done',
        {'id': 31, 'n': None, 'at': '2026-11-30T21:20:00Z', 'done': True},
        'WyJjMSIsIkl0ZW0iLCItbiwtYXQsZG9uZSIsW251bGwsMTc5NjA3MzYwMDAwMDAwMCx0cnVlXSwzMV0',
    ),
    (
        'Item',
        'title,score',
        {'id': 32, 'title': None, 'score': -0.0},
        'WyJjMSIsIkl0ZW0iLCJ0aXRsZSxzY29yZSIsW251bGwsLTAuMF0sMzJd',
    ),
    ('Tag', '', {'code': 'xé "q"', 'score': 1.5}, 'WyJjMSIsIlRhZyIsIiIsW10sInhcdTAwZTkgXCJxXCIiXQ'),
    ('Tag', '-score', {'code': 'abc', 'score': 57.25}, 'WyJjMSIsIlRhZyIsIi1zY29yZSIsWzU3LjI1XSwiYWJjIl0'),
]


@pytest.mark.parametrize("model, sort, record, frozen", FROZEN, ids=[f"{s or 'id'} {r}" for _m, s, r, _c in FROZEN])
def test_a_link_cursor_is_the_text_the_maker_before_wrote(model, sort, record, frozen):
    model = MODULE.BY_NAME[model]
    made = NextLinks(PREFIX, model.name, sort_of(sort), model.keys, model.id_field)
    link = made.after(record)
    assert link == f'{PREFIX}{frozen}>; rel="next"'
    assert cursor_of(link) == frozen == dumped(model, sort_of(sort), record)
    assert made.after(record) is link  # the same record object again: the kept text
    assert made.after(dict(record)) == link  # an equal record anew: the same text made again


def random_float(rng: random.Random) -> float:
    """Any finite double, by its bits (subnormals, both zeros, integral ones, huge ones)."""
    while True:
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            return value


def random_text(rng: random.Random) -> str:
    alphabet = 'a%"\\/\n\t\x00\x7f\u00e9\u2603\U0001f600 <>?&=+-_'
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))


def random_record(rng: random.Random) -> dict:
    return {
        "id": rng.choice([0, 1, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**63), 2**63)]),
        "n": rng.choice([None, 0, -7, 2**63 - 1, rng.randrange(-(2**63), 2**63)]),
        "score": rng.choice(
            [None, 57.25, -0.0, 1e300, 3, math.inf, -math.inf, math.nan, random_float(rng), random_float(rng)]
        ),
        "title": rng.choice([None, "", random_text(rng)]),
        "done": rng.choice([None, True, False]),
        "at": rng.choice([None, "1970-01-01T00:00:00Z", "2026-11-30T21:20:00.123456Z", "0001-01-01T00:00:00Z"]),
    }


SORTS = ["", "n", "-score", "title", "-done", "at", "score,title", "-n,-at,done"]


def test_link_cursors_of_keys_at_random_are_json_dumps_text():
    rng = random.Random(24)
    for sort in SORTS:
        made = NextLinks(PREFIX, ITEM.name, sort_of(sort), ITEM.keys, ITEM.id_field)
        for _ in range(2000):
            record = random_record(rng)
            assert cursor_of(made.after(record)) == dumped(ITEM, sort_of(sort), record), (sort, record)


def test_a_str_id_and_heads_whose_last_bytes_hold_a_percent_are_json_dumps_text():
    rng = random.Random(8)
    for _ in range(500):
        record = {"code": random_text(rng), "score": random_float(rng)}
        for sort in ("", "-score"):
            made = NextLinks(PREFIX, TAG.name, sort_of(sort), TAG.keys, TAG.id_field)
            assert cursor_of(made.after(record)) == dumped(TAG, sort_of(sort), record)
    # model names with `%` of every length mod 3: the bytes left after the head's whole
    # groups (0-2 of its end, `",[`) and the keys after them are written by a bytes `%`
    for name in ("%", "%%", "a%%", "%d%s", "x%a%"):
        for sort in ("", "n", "score", "title"):
            made = NextLinks(PREFIX, name, sort_of(sort), ITEM.keys, ITEM.id_field)
            for _ in range(50):
                record = random_record(rng)
                keys = [ITEM.keys[f](record[f]) for f, _d in sort_of(sort)]
                value = json.dumps(["c1", name, sort, keys, record["id"]], separators=(",", ":"))
                text = base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")
                assert cursor_of(made.after(record)) == text, (name, sort, record)


# -- served: a walk by the Links ---------------------------------------------------------

ROWS = [
    {"n": 2**63 - 1, "score": 57.25, "title": 'caf\u00e9 "quoted" \\ \u2603 \U0001f600', "done": True},
    {"n": -(2**63), "score": 1e300, "title": "%d%s%a", "done": False, "at": "2026-11-30T21:20:00.123456Z"},
    {"n": 0, "score": -0.0, "title": "", "done": None, "at": "1970-01-01T00:00:00Z"},
    {"n": None, "score": 0.0, "title": None, "at": "2001-02-03T04:05:06Z"},
    {"n": 7, "score": 5e-324, "title": "a\nb\tc", "done": True, "at": "2001-02-03T04:05:06Z"},
    {"n": 7, "score": 0.1 + 0.2, "title": "t", "done": False},
    {"n": -1, "score": None, "title": "t", "done": True, "at": "1999-12-31T23:59:59.999999Z"},
    {"n": 7, "score": 57.25, "title": "\u00e9", "done": None, "at": "2026-11-30T21:20:00.123456Z"},
    {"n": None, "score": -1e-300, "title": "z", "done": False, "at": None},
    {"n": 3, "score": 3.0, "title": "t", "done": True, "at": "2026-11-30T21:20:00Z"},
    {"n": 3, "score": 57.25, "title": "t", "done": False, "at": "2026-11-30T21:20:00Z"},
]


def test_a_walk_by_the_links_of_each_sort_reaches_every_record_once_in_order(serve, tmp_path):
    schema = Path(tmp_path / "items.dbs")
    schema.write_text(SCHEMA)
    server = serve(schema=schema)
    for row in ROWS * 2:  # every key twice: ties broken by the id across pages
        reply = server.post("/api/item", row)
        assert reply.status == 201, reply
    stored = server.get("/api/item?limit=100").json["data"]
    assert len(stored) == 2 * len(ROWS)
    for sort in SORTS:
        target = f"/api/item?limit=3{'&sort=' + sort if sort else ''}"
        seen, pages = [], 0
        while target is not None and pages < 20:
            reply = server.get(target)
            assert reply.status == 200, (target, reply)
            data = reply.json["data"]
            seen += [r["id"] for r in data]
            pages += 1
            link = reply.headers.get("link")
            if link is None:
                break
            assert cursor_of(link) == dumped(ITEM, sort_of(sort), data[-1]), (sort, data[-1])
            target = link[1 : -len('>; rel="next"')]
        assert seen == ids_in_sort_order(stored, sort_of(sort), ITEM.keys), sort
        assert sorted(seen) == sorted(r["id"] for r in stored)  # every record, once
