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

A write needs its record twice in JSON: stored (this array) and as the record object its
log payload, its event and a PUT's or PATCH's response carry (`{"id":1,"author_id":42,...}`,
runtime.py's record form: every field, in declaration order). `pack_parts` and
`record_text` make both from one encoding: the values are encoded with NUL as the item separator, which compact JSON
never holds elsewhere (RFC 8259 §7: a control character inside a string is escaped), so
the array is that text with each NUL made a comma and the object is the model's layout
(`{"id":%s,...}`) filled with the text split at its NULs. A value that is itself a list or
an object (a `json` field) holds NULs of its own, so the split finds more parts than fields:
then, and for a dict that is not in the record form, the object is encoded on its own.
Either way the bytes are `pack(values)` and `compact_json(record)`'s, byte for byte
(tests/storage/test_storage_shared_encoding.py). A write keeps the parts: its log payload
is its model's template filled with them (events.py `payload_templates`), and its JSON is
made from them only when asked (writes.py `written_json`).

A record's JSON from its stored text (`record_json`): every value's text in the array is
`compact_json` of that value, the same text it has inside the record object, so a record
read only to be sent (a list page's record whose dict is not kept, shown.py) is the
model's layout filled with the array's values cut out of the bytes, with no decode and no
encode. The cut is one `split` at the commas: each value gives at least one piece, and more
than one exactly when it holds a comma (inside a string, or between an array's or an
object's items), so the pieces are the values exactly when there are as many as fields.
When there are more, and no bracket follows the array's own, every value is flat and one
regular expression cuts them (`_flat`): a string runs to its first `"` not escaped
(compact JSON escapes every `"` inside a string; a `"`, `\\` or `,` byte never occurs
inside a UTF-8 sequence of several bytes), a number or a literal to the next comma. With a
bracket (an array or an object among the values, or a bracket inside a string) the JSON
scanner finds where each value ends (`_scanned`), still with no dict and no encode.
Byte for byte `compact_json(decode(unpack(stored)))` because every stored text is
`pack`'s (tests/storage/test_storage_record_json.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from dbsvc.runtime import c_encoder, compact_json

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


def record_json(layout_bytes: bytes, count: int, stored: Stored) -> bytes | None:
    """`compact_json` of the record whose stored form is `stored`, as UTF-8: `layout_bytes`
    (`layout` of the model's `count` fields, encoded) filled with the stored values' texts
    (module docstring): cut at the array's commas when that gives `count` pieces, else
    matched by `_flat(count)` when no bracket follows the first (a comma inside a string),
    else found by the JSON scanner (an array or an object among the values, or a bracket
    inside a string). None where a lone surrogate may be held (its UTF-8
    starts with 0xED, which `json_bytes` refuses to encode; Hangul U+D000-U+D7FF also
    starts so and is merely decoded): the caller decodes that record instead."""
    if b"\xed" in stored:
        return None
    values = stored[1:-1].split(b",")
    if len(values) == count:
        return layout_bytes % tuple(values)
    if stored.find(b"[", 1) < 0 and b"{" not in stored:  # flat values: one match in C
        match = _flat(count).fullmatch(stored)
        if match is not None:  # always, for a stored text (every one is `pack`'s)
            return layout_bytes % match.groups()
    return layout_bytes % _scanned(stored.decode("utf-8"), count)


_FLATS: dict[int, re.Pattern[bytes]] = {}


def _flat(count: int) -> re.Pattern[bytes]:
    """The stored array of `count` flat values, each a group: a string runs to its first
    `"` not escaped (escapes taken two bytes at once), whatever commas it holds; a number
    or a literal to the next comma. Possessive: no backtracking into a value."""
    pattern = _FLATS.get(count)
    if pattern is None:
        value = rb'("[^"\\]*+(?:\\.[^"\\]*+)*+"|[^,"\[\]{}]++)'
        pattern = _FLATS[count] = re.compile(rb"\[" + b",".join([value] * count) + rb"\]")
    return pattern


def _scanned(text: str, count: int) -> tuple[bytes, ...]:
    """The texts of the `count` values of the stored array `text`, each where the JSON
    scanner ends it: the general cut, for a value holding an array or an object."""
    values, at = [], 1
    for _ in range(count):
        end = SCAN(text, at)[1]
        values.append(text[at:end].encode("utf-8"))
        at = end + 1
    return tuple(values)


# The C encoder of `compact_json` but for its item separator, NUL (module docstring).
_SPLIT = c_encoder("\0")
_LAYOUTS: dict[tuple[str, ...], str] = {}


def layout(fields: tuple[str, ...]) -> str:
    """`{"f1":%s,"f2":%s,...}`: a record of `fields` as JSON, its values' texts to fill in."""
    text = _LAYOUTS.get(fields)
    if text is None:
        text = "{" + ",".join(compact_json(f).replace("%", "%%") + ":%s" for f in fields) + "}"
        if len(_LAYOUTS) < 1024:  # models of the schemas served; never more in one process
            _LAYOUTS[fields] = text
    return text


def record_text(fields: tuple[str, ...], record: dict[str, Any], parts: list[str] | None) -> str:
    """`compact_json(record)`, from `parts` (`pack_parts`' texts of its values) when it has
    them: the record form's layout filled, no encoding."""
    return compact_json(record) if parts is None else layout(fields) % tuple(parts)


def in_form(fields: tuple[str, ...], record: dict[str, Any]) -> bool:
    """Whether `record` is in the record form of `fields`: those keys, in that order."""
    return len(record) == len(fields) and tuple(record) == fields


def previous_parts(parts: list[str], was: Values, values: Values) -> list[str]:
    """The text of each of `was`, the values an update replaces, given `parts`, the texts of
    its new `values`: a value the update left alone has the text the new record's encoding
    gave it, so only the changed values are encoded again (a PATCH of one field encodes
    that field's old value, not the whole old record). The same text: the same object, or
    an equal str or int (an equal float may not be: 0.0 == -0.0; nor an equal value of
    another type: 1 == 1.0 == True)."""
    return [
        part if a is b or (type(a) is type(b) and (type(a) is str or type(a) is int) and a == b) else compact_json(a)
        for part, a, b in zip(parts, was, values)
    ]


def pack_parts(fields: tuple[str, ...], record: dict[str, Any], values: Values) -> tuple[Stored, list[str] | None]:
    """`pack(values)`, and the compact JSON text of each value when `record` is in the record
    form of `fields` and no value is a list or an object (module docstring): the record's
    JSON is then `layout(fields) % tuple(parts)`, and a log payload's template takes the
    parts as they are (events.py `payload_templates`). None: encode the record on its own."""
    if _SPLIT is None or not in_form(fields, record):
        return pack(values), None
    try:
        text = "".join(_SPLIT(values, 0))
    except (TypeError, ValueError):  # not JSON: `pack` raises as it always did
        return pack(values), None
    parts = text[1:-1].split("\0")
    stored = text.replace("\0", ",").encode("utf-8", "surrogatepass")
    if len(parts) != len(fields):  # a list or an object among the values
        return stored, None
    return stored, parts
