"""A next page's `Link` cursor is base64url in its head too (cursors.py `NextLinks.__init__`:
the head's whole base64 groups are encoded once, then made URL-safe), so a cursor never holds
`+` or `/`, which a query string would read as a space or leave for a path.

A head's whole groups hold one of them only where a byte at a place 2 mod 3 is `>`, `?`
or `~` (its low six bits 62 or 63): no name the schema checks let through has one, so the
older tests' models never showed it (docs/mutation.md, session 24, wt-mpo15: `__init__` 17
left open). `NextLinks` takes the model's name as given; names holding those bytes at
each place are built here and the `Link` held to the very text `next_link(link_prefix(..),
encode_cursor(..))` writes, and to json.dumps' text in base64url without padding
(docs/guide/queries.md, "Cursor pages").
"""

from __future__ import annotations

import base64
import binascii
import json

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.cursors import NextLinks, encode_cursor, link_prefix, next_link
from dbsvc.operators import sort_text
from dbsvc.schema import parse_schema

SCHEMA = """
model Item {
  id    int       @id
  n     int?      @sort
  score float?    @sort
  title str?      @sort
}
"""
ITEM = compile_schema(parse_schema(SCHEMA, "items.dbs")).BY_NAME["Item"]
PREFIX = link_prefix("/api/item", [("limit", "3")])
HEAD_BEFORE_NAME = len('["c1","')  # the name's first byte sits at this place of the head
# names whose byte at a place 2 mod 3 of the head is `~` or `>` (base64 `+`) or `?` (`/`)
NAMES = ["a~", "a?", "a>", "x?", "ab~~~", "??", "a~bc?de>fg", "longer~name?with>them"]
RECORDS = [
    {"id": 1, "n": 7, "score": 0.5, "title": "t"},
    {"id": -42, "n": None, "score": -1e300, "title": "with \"quotes\" and \u00e9"},
    {"id": 9223372036854775807, "n": -3, "score": None, "title": None},
]


def _standard_whole_groups(name: str, sort: str) -> str:
    head = json.dumps(["c1", name, sort, []], separators=(",", ":"))[:-2].encode()  # up to `[`
    return binascii.b2a_base64(head[: len(head) - len(head) % 3], newline=False).decode()


def test_the_names_put_a_plus_or_a_slash_in_the_heads_whole_groups():
    # the inputs do what they are for: standard base64 of each head's whole groups holds
    # `+` or `/`, both among the names
    seen = set()
    for name in NAMES:
        for sort in ("", "n", "-score", "title,n"):
            text = _standard_whole_groups(name, sort)
            assert "+" in text or "/" in text, (name, sort, text)
            seen |= set(text) & {"+", "/"}
    assert seen == {"+", "/"}
    assert (HEAD_BEFORE_NAME + 1) % 3 == 2  # a name's second byte is at a place 2 mod 3


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sort", ["", "n", "-score", "title,n"])
def test_a_link_after_a_head_with_plus_or_slash_bytes_is_base64url(name, sort):
    order = tuple((f.lstrip("-"), f.startswith("-")) for f in sort.split(",") if f)
    made = NextLinks(PREFIX, name, order, ITEM.keys, ITEM.id_field)
    for record in RECORDS:
        keys = [ITEM.keys[f](record[f]) for f, _desc in order]
        link = made.after(record)
        assert link == next_link(PREFIX, encode_cursor(name, order, keys, record["id"]))
        cursor = link[len(PREFIX) : -len('>; rel="next"')]
        assert "+" not in cursor and "/" not in cursor and "=" not in cursor, cursor
        value = json.dumps(["c1", name, sort_text(order), keys, record["id"]], separators=(",", ":"))
        assert cursor == base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")
