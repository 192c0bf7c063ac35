"""A stored record: the record itself as compact JSON, in UTF-8, exactly `compact_json(record)`.

    {"id":1,"author_id":42,"title":"post number 1","body":"lorem ipsum","published":true,...}

Storage holds every live record, and every version `as_of` can still read, in this form
(`Stored`: the record form of runtime.py, every field in declaration order), and reads
values back out of it only where it needs them: a record handed out as a dict
(`Table.shown`), the keys an update moves, a filter or sort that the indexes cannot answer.
Why bytes and not the values as Python objects: a 7-field record of the bench's shape is
270 bytes as one bytes object, 457 as a tuple of its values (an int is 28 bytes, a float
24, a str 49 plus its text, the tuple 96), and at 1,000,000 records that difference is
most of the memory per record (bench/README.md, "Memory per record").

Why the object and not the array of its values (`[1,42,...]`, the form until session 27):
a record is mostly read to be sent, and its JSON is then the stored text as it is: a list
page is its records' texts joined (shown.py), with no cut, no decode and no encode, and a
write's stored form is the text its response and its log payload carry. The field names
cost ~59 bytes a record of the blog's post (bench/README.md, "A page's records held in
their object form", session 26 and 27). Snapshot format 4 writes these texts as its rows
(snapshot.py); formats 1-3 hold arrays, made objects on read (`row_object`).

Values are JSON-ready already (runtime.py, "Record form"), so `unpack(pack(fields, values))`
equals `list(values)` and `pack(fields, values)` is `compact_json(decode(values))` byte for
byte (`decode` is the dict of the fields in order: tests/storage/test_storage_record_json.py).
`unpack` is the json module's C scanner called directly, several times cheaper than
`json.loads` (which finds the encoding, decodes and skips whitespace on every call),
the values being the scanned dict's. A stored record always starts with "{".

A write makes its stored form and its values' texts from one encoding (`pack_parts`):
the values are encoded with NUL as the item separator, which compact JSON never holds
elsewhere (RFC 8259 §7: a control character inside a string is escaped), the text is split
at its NULs, and the model's layout (`{"id":%s,...}`) is filled with the parts. A value
that is itself a list or an object (a `json` field) holds NULs of its own, so the split
finds more parts than fields: then, and for a dict that is not in the record form, the
record is encoded on its own. Either way the bytes are `compact_json(record)`'s
(tests/storage/test_storage_shared_encoding.py). A write keeps the parts: its log payload
is its model's template filled with them (events.py `payload_templates`).

An array row of an older snapshot made an object (`row_object`): every value's text in
the array is `compact_json` of that value, the same text it has inside the record object,
so the object is the model's layout filled with the array's values cut out of the bytes,
with no decode and no encode. The cut is one `split` at the commas: each value gives at
least one piece, and more than one exactly when it holds a comma (inside a string, or
between an array's or an object's items), so the pieces are the values exactly when there
are as many as fields. When there are more, and no bracket follows the array's own, every
value is flat and one regular expression cuts them (`_flat`): a string runs to its first
`"` not escaped (compact JSON escapes every `"` inside a string; a `"`, `\\` or `,` byte
never occurs inside a UTF-8 sequence of several bytes), a number or a literal to the next
comma. With a bracket (an array or an object among the values, or a bracket inside a
string) the JSON scanner finds where each value ends (`_scanned`).

A replica's run of inserts keeps its records' texts as the frames carried them
(`stored_from_texts`) when each is exactly `pack` of its values: a primary wrote it with
`compact_json`, so it always is unless the frame was spelled by hand. The check builds
that text without the encoder: the run's values a field at a time, each field's texts
by its one type (`%d` for ints and `%r` for floats, what the encoder calls; a str between
quotes as it is when no text of the run holds a backslash, since a value the encoder
would escape holds a `"`, a `\\` or a control character, which a strictly scanned text
can hold only escaped; `null`; else the C encoder over the column, cut at its NULs),
filled into the model's layout, every record at once with NULs between them (neither
side can hold one: RFC 8259 §7), and compared with the texts joined the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from itertools import chain, repeat
from typing import Any

from dbsvc.runtime import c_encoder, compact_json

Stored = bytes
Values = Sequence[Any]  # a record's values in declaration order: CompiledModel.row, or unpack

# The json module's C scanner, called directly: (value, index after it) of the JSON value
# starting at an index of a str; StopIteration where none starts, JSONDecodeError if broken.
# (An attribute the decoder sets on itself; the type stubs do not list it.)
SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def pack(fields: Sequence[str], values: Values) -> Stored:
    """The stored form of a record's values (a tuple or a list) of the model whose fields
    are `fields`: `compact_json` of the record, as UTF-8. "surrogatepass": a lone
    surrogate, which only a file made by hand can hold, is kept as `unpack` reads it."""
    return compact_json(dict(zip(fields, values))).encode("utf-8", "surrogatepass")


def unpack(stored: Stored) -> list[Any]:
    """The values of a stored record in declaration order, as a new list. "surrogatepass":
    the same decoding as the snapshot reader's, so a text it accepted never fails here."""
    return list(SCAN(stored.decode("utf-8", "surrogatepass"), 0)[0].values())


def scan(stored: Stored) -> dict[str, Any]:
    """The record a stored text holds, as a new dict of its JSON values (its fields in
    declaration order, datetimes as their text): for readers that want a few fields'
    values and keep no dict (words.py's index at open); a record handed out is
    `decode(unpack(stored))` (shown.py), whose keys are the model's shared strings."""
    return SCAN(stored.decode("utf-8", "surrogatepass"), 0)[0]  # type: ignore[no-any-return]


def sent(stored: Stored) -> bytes | None:
    """The bytes a stored record goes out as (`json_bytes(record)`): the stored text itself;
    None where a lone surrogate may be held (its UTF-8 starts with 0xED, which `json_bytes`
    refuses to encode; Hangul U+D000-U+D7FF also starts so and is merely decoded): the
    caller hands out the record's dict instead, as for any record."""
    return None if b"\xed" in stored else stored


def row_object(layout_bytes: bytes, count: int, row: bytes) -> bytes | None:
    """The stored form (the object) of a record whose array row text (snapshot formats 1-3,
    `compact_json` of its values) is `row`: `layout_bytes` (`layout` of the model's `count`
    fields, encoded) filled with the row's values' texts (module docstring): cut at the
    array's commas when that gives `count` pieces, else matched by `_flat(count)` when no
    bracket follows the first (a comma inside a string), else found by the JSON scanner
    (an array or an object among the values, or a bracket inside a string). None where a
    lone surrogate may be held (UTF-8 0xED, which the cut's `%` cannot carry through a
    decode): the caller packs that row's parsed values instead."""
    if b"\xed" in row:
        return None
    values = row[1:-1].split(b",")
    if len(values) == count:
        return layout_bytes % tuple(values)
    if row.find(b"[", 1) < 0 and b"{" not in row:  # flat values: one match in C
        match = _flat(count).fullmatch(row)
        if match is not None:  # always, for a row a writer made (compact JSON)
            return layout_bytes % match.groups()
    return layout_bytes % _scanned(row.decode("utf-8"), count)


_FLATS: dict[int, re.Pattern[bytes]] = {}


def _flat(count: int) -> re.Pattern[bytes]:
    """The array row of `count` flat values, each a group: a string runs to its first
    `"` not escaped (escapes taken two bytes at once), whatever commas it holds; a number
    or a literal to the next comma. Possessive: no backtracking into a value."""
    pattern = _FLATS.get(count)
    if pattern is None:
        value = rb'("[^"\\]*+(?:\\.[^"\\]*+)*+"|[^,"\[\]{}]++)'
        pattern = _FLATS[count] = re.compile(rb"\[" + b",".join([value] * count) + rb"\]")
    return pattern


def _scanned(text: str, count: int) -> tuple[bytes, ...]:
    """The texts of the `count` values of the array row `text`, each where the JSON
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
    """`pack(fields, values)`, and the compact JSON text of each value when `record` is in
    the record form of `fields` and no value is a list or an object (module docstring):
    the stored text is then `layout(fields) % tuple(parts)`, and a log payload's template
    takes the parts as they are (events.py `payload_templates`). None: encode the record on
    its own."""
    if _SPLIT is None or not in_form(fields, record):
        return pack(fields, values), None
    try:
        text = "".join(_SPLIT(values, 0))
    except (TypeError, ValueError):  # not JSON: `pack` raises as it always did
        return pack(fields, values), None
    parts = text[1:-1].split("\0")
    if len(parts) != len(fields):  # a list or an object among the values
        return pack(fields, values), None
    return (layout(fields) % tuple(parts)).encode("utf-8", "surrogatepass"), parts


def pack_many(fields: tuple[str, ...], batch: Sequence[Values]) -> list[Stored]:
    """`pack(fields, values)` of each record of a run (a replica's group, a batch), with one
    call of the C encoder for the run: its records as one JSON array of objects, cut at
    their "},{" (a record's own text holding "},{", a string or an object in a list, makes
    more pieces than records: then `pack` of each)."""
    if len(batch) < 2:
        return [pack(fields, values) for values in batch]
    text = compact_json(list(map(dict, map(zip, repeat(fields), batch))))
    inner = text[1:-1]
    if inner.count("},{") != len(batch) - 1:
        return [pack(fields, values) for values in batch]
    # NUL, which compact JSON never holds (RFC 8259 §7: control characters are escaped),
    # marks the cuts, so one encode and one split make every record's bytes.
    return inner.replace("},{", "}\0{").encode("utf-8", "surrogatepass").split(b"\0")


_BOOLS = {True: "true", False: "false"}
_NULL = type(None)


def _field_texts(column: Sequence[Any], plain: bool) -> tuple[str, Sequence[Any] | None]:
    """How one field of a run is written into its records' layout: the format of its
    value (`%d`, `"%s"`, `%r`, `null`, or `%s`) and what fills it (None: nothing), each
    value's text exactly as `compact_json` writes it. `plain`: no str of the run needs
    an escape (`stored_from_texts`)."""
    kinds = set(map(type, column))
    if len(kinds) == 1:
        kind = kinds.pop()
        if kind is int:
            return "%d", column
        if kind is str and plain:
            return '"%s"', column
        if kind is float:
            return "%r", column
        if kind is _NULL:
            return "null", None
        if kind is bool:
            return "%s", list(map(_BOOLS.__getitem__, column))
    if _SPLIT is not None:
        parts = "".join(_SPLIT(list(column), 0))[1:-1].split("\0")
        if len(parts) == len(column):  # no list or object among them (module docstring)
            return "%s", parts
    return "%s", list(map(compact_json, column))


def stored_from_texts(
    fields: tuple[str, ...], columns: Sequence[Sequence[Any]], texts: list[str]
) -> list[Stored] | None:
    """`texts` as the stored records of a run (each text's UTF-8) when each text is
    exactly `pack(fields, values)` of its record's values, `columns` (the values a field
    at a time, read from those very texts by the strict JSON scanner); else None, and the
    caller packs the values (`pack_many`). The expected texts are built a field at a time
    (module docstring): no dict and no encoder call a record."""
    joined = "\0".join(texts)
    plain = "\\" not in joined
    template = []
    fills = []
    try:
        for field, column in zip(fields, columns):
            spec, fill = _field_texts(column, plain)
            template.append(compact_json(field).replace("%", "%%") + ":" + spec)
            if fill is not None:
                fills.append(fill)
        expected = (("{" + ",".join(template) + "}\0") * len(texts))[:-1] % tuple(chain.from_iterable(zip(*fills)))
    except ValueError:  # a value the encoder refuses (1e400 scans as inf): `pack_many` raises as before
        return None
    if expected != joined:
        return None
    return joined.encode("utf-8", "surrogatepass").split(b"\0")
