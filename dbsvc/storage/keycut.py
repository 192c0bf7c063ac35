"""A stored record's values at some fields, as their texts, cut out of it with no parse.

A snapshot's keys line (snapshot.py) holds, for each indexed field, that field's values of
the block's rows as a JSON array; its rows are stored records (rows.py): each exactly
`compact_json(record)`, its fields in declaration order. So the text of a field's value
inside a stored record is `compact_json(value)`, the same text the value has as an item
of the keys line's array (the C encoder writes an item as it writes the value alone), and
the keys line can be joined from the records' own bytes: no `json.loads` of the records,
no value made an object, no encoding. Parsing 2,048 posts to encode back five of their
seven values was most of an online compaction's snapshot step (bench/README.md, "The
snapshot step's keys cut out of the stored records", session 28).

The cut is one regular expression a model and a set of fields (`cutter`): the record's
opening `{`, then each field up to the last one asked, as `"name":VALUE` joined by `,`,
the asked ones captured, then a lookahead for the `,` or `}` that ends the last. VALUE is
a flat JSON value as the compact encoder writes it:

    string   "..." with no raw `"`, `\\` or control character, escapes only \\" \\\\ \\b \\f
             \\n \\r \\t and \\u00XX (the encoder's own: RFC 8259 §7, `ensure_ascii` off)
    number   -?(0|[1-9][0-9]*)(.[0-9]+)?(e[-+][0-9]+)?   (an int, or a float's repr)
    literal  true, false or null

An indexed field is never a `json` field (docs/guide/schema.md: json is neither filterable nor
sortable), so an asked value is always flat. A field before the last asked one may be a
`json` field holding an array or an object: that record does not match, and neither does
anything but a record in the stored form (spaces, escapes the encoder never writes, another
field order): `key_texts` parses such a record whole and encodes each asked value
(`compact_json`), which is what the keys line held before the cut. For a record in the
stored form the two are the same bytes: tests/storage/test_storage_snapshot_key_cut.py
holds them equal over every kind of value, lone surrogates included (the cut never
decodes: a text holding UTF-8 0xED is bytes like any other here).

A `"` byte, a `\\` byte or a byte under 0x20 never occurs inside a UTF-8 sequence of
several bytes, so the byte pattern reads UTF-8 text as the str one would.

Imports runtime's encoder only; no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from dbsvc.runtime import compact_json

# A flat JSON value as the compact encoder writes it (module docstring): possessive, so a
# long string is one run of its bytes, with no backtracking into it.
_STRING = rb'"(?:[^"\\\x00-\x1f]++|\\["\\bfnrt]|\\u00[01][0-9a-f])*+"'
_NUMBER = rb"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:e[-+][0-9]++)?+"
_VALUE = rb"(?:" + _STRING + rb"|" + _NUMBER + rb"|true|false|null)"
_INT = re.compile(rb"-?(?:0|[1-9][0-9]*)")
_CUTTERS: dict[tuple[tuple[str, ...], tuple[int, ...]], re.Pattern[bytes]] = {}


def cutter(fields: Sequence[str], positions: Sequence[int]) -> re.Pattern[bytes]:
    """The pattern of a stored record of `fields` whose groups are the texts of its values
    at `positions` (ascending, distinct), in that order (module docstring)."""
    key = (tuple(fields), tuple(positions))
    pattern = _CUTTERS.get(key)
    if pattern is None:
        asked = set(positions)
        parts = [rb"\{"]
        for i, name in enumerate(fields[: max(positions) + 1]):
            value = rb"(" + _VALUE + rb")" if i in asked else _VALUE
            parts.append((rb"," if i else rb"") + re.escape(compact_json(name).encode("utf-8")) + rb":" + value)
        parts.append(rb"(?=[,}])")
        pattern = re.compile(b"".join(parts))
        if len(_CUTTERS) < 1024:  # the models of the schemas served; never more in one process
            _CUTTERS[key] = pattern
    return pattern


def key_texts(pattern: re.Pattern[bytes], positions: Sequence[int], texts: Sequence[bytes]) -> list[tuple[bytes, ...]]:
    """For each stored record of `texts`, the texts of its values at `positions` (the
    ascending positions `pattern` was made for, `cutter`): cut out of it where it matches
    (every record in the stored form), else each value parsed out and encoded again."""
    found = list(map(pattern.match, texts))
    if None not in found:
        return list(map(re.Match.groups, found))  # type: ignore[arg-type]  # no None: checked above
    return [_parsed(text, positions) if match is None else match.groups() for match, text in zip(found, texts)]


def _parsed(text: bytes, positions: Sequence[int]) -> tuple[bytes, ...]:
    """The texts of a record's values at `positions`, parsed out of it and encoded again:
    a record the cut does not take (module docstring). "surrogatepass" both ways, as
    json.loads(bytes) decodes and the keys line is encoded."""
    values = list(json.loads(text.decode("utf-8", "surrogatepass")).values())
    return tuple(compact_json(values[p]).encode("utf-8", "surrogatepass") for p in positions)


def column_text(texts: Sequence[bytes]) -> bytes:
    """The keys line's column of these value texts: `compact_json(snapshot._column(values))`
    of the values they are, byte for byte: {"first":a,"count":n} where they are the ints
    a, a+1, ..., a+n-1 (a block of ids without gaps), else the JSON array of them. Only a
    column whose first and last texts are ints that far apart is parsed to tell."""
    first, last = texts[0], texts[-1]
    if _INT.fullmatch(first) and _INT.fullmatch(last) and int(last) - int(first) == len(texts) - 1:
        values: list[Any] = json.loads(b"[" + b",".join(texts) + b"]")
        start = values[0]
        if type(values[-1]) is int and values == list(range(start, start + len(values))):
            return compact_json({"first": start, "count": len(values)}).encode("ascii")
    return b"[" + b",".join(texts) + b"]"
