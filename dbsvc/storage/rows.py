"""A stored record: its values in declaration order as one compact JSON array, in UTF-8.

    [1,42,"post number 1","lorem ipsum",true,12.5,["a","b"]]

Storage holds every live record, and every version `as_of` can still read, in this form
(`Stored`), and reads values back out of it only where it needs them: a record handed out
(`Table.shown`), the keys an update moves, a filter or sort that the indexes cannot answer.
Why bytes and not the values as Python objects: a 7-field record of the bench's shape is
211 bytes as one bytes object, 457 as a tuple of its values (an int is 28 bytes, a float
24, a str 49 plus its text, the tuple 96), and at 1,000,000 records that difference is
most of the memory per record (bench/README.md, "Memory per record"). The text is the
snapshot's row text byte for byte, so a snapshot writes stored records as they are and
reads them back by splitting its lines (snapshot.py), with no encoding either way.

Values are JSON-ready already (runtime.py, "Record form"), so `unpack(pack(values))`
equals `list(values)`. `unpack` is the json module's C scanner called directly, several
times cheaper than `json.loads` (which finds the encoding, decodes and skips whitespace on
every call; bench/README.md). A stored record always starts with "[" (the snapshot
reader keeps only such texts, and `pack` writes nothing else).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from dbsvc.runtime import compact_json

Stored = bytes
Values = Sequence[Any]  # a record's values in declaration order: CompiledModel.row, or unpack

# The json module's C scanner, called directly: (value, index after it) of the JSON value
# starting at an index of a str; StopIteration where none starts, JSONDecodeError if broken.
# (An attribute the decoder sets on itself; the type stubs do not list it.)
SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def pack(values: Values) -> Stored:
    """The stored form of a record's values (a tuple or a list). "surrogatepass": a lone
    surrogate, which only a file made by hand can hold, is kept as `unpack` reads it."""
    return compact_json(values).encode("utf-8", "surrogatepass")


def unpack(stored: Stored) -> list[Any]:
    """The values of a stored record, as a new list. "surrogatepass": the same decoding as
    the snapshot reader's, so a text it accepted never fails here."""
    return SCAN(stored.decode("utf-8", "surrogatepass"), 0)[0]  # type: ignore[no-any-return]
