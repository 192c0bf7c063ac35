"""Cursors: a list page's opaque `cursor`, its decode, and the next page's `Link` values.

Apart from operators.py (the operators' bounds, prefixes and null tests) because it is a
job of its own, with its own format, its own per-list state and its own hot path: a
cursor page decodes its cursor on every request, and a page with a next one makes its
`Link` (docs/guide/queries.md, "Cursor pages"; docs/decisions.md). The two were one module
until it reached the 600-line cap; this one imports `sort_text` from operators.py (a
cursor carries its sort as that text), never the other way.

- `encode_cursor(model, sort, keys, id)` and `decode_cursor(text, model, sort, kinds,
  id_kind)`; `NextLinks`: one list's next-page `Link` values, each made from a page's last
  record (`link_prefix`, `next_link`: the same text composed). A cursor is base64url (no
  padding) of the JSON array `["c1", MODEL, SORT, [KEY, ...], ID]`: the model it was made
  for, the sort spec as text (`-score,title`, "" for id order), the page's last record's
  index keys (the form of `CompiledModel.keys`: a datetime's microseconds, a float as a
  float) and its id. It holds keys, never positions, so compaction leaves it valid.
  Anything else is MalformedCursor (a BadQuery: whatever the text, the decode raises
  nothing else), a cursor made for another model or another sort a BadQuery naming them.
  A cursor is not signed: a forged one only seeks somewhere else in the same list, under
  the same access rules. A text accepted is kept decoded for its own list, bounded
  (`kept_cursors`, `KEPT_CURSORS`, `KEPT_ALL`).
- What tests and probes ask of the decode without reaching into it: `decode_whole` (the
  decode of any text, every check, nothing kept), `kept_reader` (a list's `CursorReader`,
  if it has one), `readers_kept`, `forget_readers`, `kept_cursors`, `forget_cursors`; `SCAN`
  is the JSON scanner the readers call (a test swaps it to show a path never reaches it).

Imports errors, operators and the standard library only; storage never sees a cursor's
text, only the decoded `Query.cursor`.
"""

from __future__ import annotations

import binascii
import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _ascii  # type: ignore[attr-defined]
from typing import Any
from urllib.parse import quote, urlencode

from dbsvc.errors import BadQuery, MalformedCursor
from dbsvc.operators import sort_text
from dbsvc.strictjson import refuse_constant

CURSOR_VERSION = "c1"
MAX_CURSOR = 4096  # characters of a cursor parameter: a page's keys, never more


def encode_cursor(model: str, sort: Sequence[tuple[str, bool]], keys: Sequence[Any], id_: Any) -> str:
    """The opaque `cursor` of the page that ends on the record with these sort keys and id:
    base64url, unpadded, of `["c1",MODEL,SORT,[KEY,...],ID]` exactly as json.dumps writes it
    with separators `,` and `:`, from the parts `NextLinks` uses (`_cursor_head`, `_json_key`).
    A served page's `Link` is `NextLinks.after`'s, made from the page's last record; this is
    for cursors with keys and no record (the tests' and benches', a wrong key or another
    model's among them) and is the text `NextLinks` is held to (tests/app/test_cursor_head.py).
    Off the served path: one plain composition."""
    text = _cursor_head(model, tuple(sort)) + ",".join(map(_json_key, keys)) + "]," + _json_key(id_) + "]"
    return binascii.b2a_base64(text.encode("ascii"), newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


_URLSAFE = bytes.maketrans(b"+/", b"-_")


@functools.lru_cache(maxsize=1024)
def _cursor_head(model: str, sort: tuple[tuple[str, bool], ...]) -> str:
    """`["c1",MODEL,SORT,[` as json.dumps writes it (ASCII: non-ASCII escaped)."""
    return f"[{_ascii(CURSOR_VERSION)},{_ascii(model)},{_ascii(sort_text(sort))},["


def _json_key(value: Any) -> str:
    """One index key (int, float, str, bool or None) as json.dumps writes it, ASCII."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if kind is str:
        return _ascii(value)
    return json.dumps(value)  # None, bool, a non-finite float: json's own words


def decode_cursor(
    text: str, model: str, sort: Sequence[tuple[str, bool]], kinds: Mapping[str, str], id_kind: str
) -> tuple[tuple[Any, ...], Any]:
    """`cursor` text -> (the sort keys, the id) to seek after, for a list of `model` sorted
    by `sort`. `kinds` maps each sort field, and `id_kind` names the id, to the letter of
    its index keys: `i` int, `f` float, `s` str, `b` bool.

    A cursor this module made for this list starts, once decoded from base64, with the
    very bytes of `_cursor_head(model, sort)`: those are checked by one `startswith`, and
    only the keys and the id after them are parsed (`CursorReader`), where the whole
    decode parsed the head's three strings and made `sort_text(sort)` again on every page.
    Any other text, a refusal included, takes the whole decode (`decode_whole`), so what is
    accepted and every refusal's words are the whole decode's.

    A text accepted is kept on its list's reader with its answer (`CursorReader.keep`): a
    client paging or polling sends the same cursor texts again (a page asked at one of a
    few thousand cursors, a followed `Link` asked again), and the base64, the pattern or
    the scanner and the float parsing of each request were a measurable part of a page's
    request side (bench/README.md, "Cursor texts kept decoded per list"). The reader is its
    list's alone (model, sort, key kinds, id kind), so a text kept answers only for the
    list it was accepted for; a refusal is never kept (its whole decode and its error each
    time)."""
    reader = _READERS.get((model, sort, id_kind))
    if reader is None or (reader.given is not kinds and reader.kinds != kinds):
        reader = _reader(model, sort, kinds, id_kind)
    found = reader.decoded.get(text)
    if found is not None:
        return found
    found = reader.read(text)
    if found is None:
        found = decode_whole(text, model, sort, kinds, id_kind)  # raises a refusal
    reader.keep(text, found)
    return found


KEPT_CURSOR = 128  # characters of the longest cursor text a reader keeps decoded
KEPT_CURSORS = 8192  # cursor texts a reader keeps decoded: emptied when it holds as many
KEPT_ALL = 65536  # texts kept by all readers (up to READERS of them): all emptied past it
_kept_since = 0  # texts kept by any reader since every reader's were last emptied


def kept_cursors(model: str, sort: Sequence[tuple[str, bool]], id_kind: str) -> int:
    """How many cursor texts the reader of this list (`model` sorted by `sort`, ids of
    `id_kind`) keeps decoded now (0 when the list has no reader): what a test or a probe
    asks of `decode_cursor`'s kept texts without reading them."""
    reader = _READERS.get((model, tuple(sort), id_kind))
    return 0 if reader is None else len(reader.decoded)


def forget_cursors() -> None:
    """Empty every reader's kept texts, and start the count towards `KEPT_ALL` again: done
    when that many were kept, and what a test calls to start from none."""
    global _kept_since
    for reader in _READERS.values():
        reader.decoded.clear()
    _kept_since = 0


class CursorReader:
    """The decoding of the cursors this module makes for one list (model, sort, key kinds):
    the head they start with, as bytes, and each sort key's kind in order; and the texts
    accepted for this list lately, with their answers (`decoded`, `keep`)."""

    __slots__ = ("decoded", "floats", "given", "head", "id_kind", "kinds", "numbers", "width", "wanted")

    def __init__(self, model: str, sort: Sequence[tuple[str, bool]], kinds: Mapping[str, str], id_kind: str) -> None:
        self.head = _cursor_head(model, tuple(sort)).encode("ascii")
        # The generated code passes one module constant per model (`cursor_kinds_m`, never
        # changed), so that very object is taken as this reader's kinds without a look (a
        # caller must not change a mapping it passed); any other mapping is compared with
        # the copy, and a different one gets a reader of its own kinds.
        self.given = kinds
        self.kinds = dict(kinds)
        self.wanted = tuple(kinds[field] for field, _desc in sort)
        self.width = len(self.wanted)
        self.id_kind = id_kind
        # cursor text accepted for this list -> its (keys, id), immutable: handed out again
        self.decoded: dict[str, tuple[tuple[Any, ...], Any]] = {}
        # the whole decoded text of a cursor we write for a list whose keys are numbers and
        # whose id is an int (`_numbers`), or None for any other list
        self.numbers: re.Pattern[bytes] | None = None
        self.floats = tuple(kind == "f" for kind in self.wanted)
        if id_kind == "i" and all(kind in "fi" for kind in self.wanted):
            keys = b",".join(_FLOAT_TEXT if kind == "f" else _INT_TEXT for kind in self.wanted)
            self.numbers = re.compile(re.escape(self.head) + keys + rb"\]," + _INT_TEXT + rb"\]")

    def keep(self, text: str, found: tuple[tuple[Any, ...], Any]) -> None:
        """Keep `text`, accepted for this list as `found`, unless it is over `KEPT_CURSOR`
        characters (ours are ~40-100), emptying the kept texts first when they are
        `KEPT_CURSORS`: a client sending ever new cursors costs a dict insertion a request
        and a clear now and then, no eviction order kept. The readers are up to `READERS`
        (a model and sort each), so all are emptied each time `KEPT_ALL` texts were kept
        since the last time: never more are kept in all (docs/decisions.md)."""
        global _kept_since
        if len(text) > KEPT_CURSOR:
            return
        if _kept_since >= KEPT_ALL:
            forget_cursors()
        decoded = self.decoded
        if len(decoded) >= KEPT_CURSORS:
            decoded.clear()
        decoded[text] = found
        _kept_since += 1

    def read(self, text: str) -> tuple[tuple[Any, ...], Any] | None:
        """(keys, id) of a cursor made for this list, or None for any other text (the
        whole decode then accepts or refuses it). The rest after the head, `K,...],ID]`,
        parses as `[[K,...],ID]` exactly when the whole text parses, to the same keys and
        id (the array's first three items are the head's)."""
        if len(text) > MAX_CURSOR:
            return None
        try:
            raw = binascii.a2b_base64((text + "=" * (-len(text) % 4)).encode("ascii").translate(_FROM_URLSAFE))
            numbers = self.numbers
            if numbers is not None:
                found = _numbers(numbers.fullmatch(raw), self.floats)
                if found is not None:
                    return found
            if not raw.startswith(self.head):
                return None
            rest = "[[" + raw[len(self.head) :].decode("utf-8")
            value, end = SCAN(rest, 0)  # the decoder's C scanner: nothing after the array
        except (binascii.Error, ValueError, UnicodeDecodeError, StopIteration, RecursionError):
            return None
        if end != len(rest) or type(value) is not list or len(value) != 2:
            return None
        keys, id_ = value
        if type(keys) is not list or len(keys) != self.width:
            return None
        decoded = []
        for key, kind in zip(keys, self.wanted):
            checked = _key(key, kind, nullable=True)
            if checked is _BAD:
                return None
            decoded.append(checked)
        checked_id = _key(id_, self.id_kind, nullable=False)
        if checked_id is _BAD:
            return None
        return tuple(decoded), checked_id


# A JSON int, and a JSON float as `float.__repr__` writes a finite one (a fraction or an
# exponent: never an int's text, so `float()` of it is the very float json's scanner makes of
# it, -0.0 included), as bytes (RFC 8259 §6: no leading zeros, no `+`, digits on both sides
# of the point)
_INT_TEXT = rb"(-?(?:0|[1-9][0-9]*))"
_FLOAT_TEXT = rb"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+))"


def _numbers(match: re.Match[bytes] | None, floats: tuple[bool, ...]) -> tuple[tuple[Any, ...], Any] | None:
    """(keys, id) of a cursor `CursorReader.numbers` matched whole, read straight from its
    number texts, where the JSON scanner made a list of lists of them and each was checked
    by `_key` (a -score cursor page's decode, bench/README.md wt-score5); or None when it
    did not match, or a float is not finite or an int past 64 bits, which the reader's
    other path then takes (and refuses) as before. One float key (a -score page) is read
    without the loop, id order (no keys) passes it untaken."""
    if match is None:
        return None
    texts = match.groups()
    id_ = int(texts[-1])
    if not _INT_LOW <= id_ <= _INT_HIGH:
        return None
    if floats == _ONE_FLOAT:
        key = float(texts[0])
        if key - key != 0.0:  # inf - inf and NaN - NaN are NaN: not finite
            return None
        return (key,), id_
    keys = []
    for text, is_float in zip(texts, floats):
        key = float(text) if is_float else int(text)
        if (key - key != 0.0) if is_float else not _INT_LOW <= key <= _INT_HIGH:
            return None
        keys.append(key)
    return tuple(keys), id_


_ONE_FLOAT = (True,)


# (model, sort, id kind) -> its reader; a schema declares finitely many models and sorts,
# and a client may ask any order of a model's sort fields: emptied past READERS entries
_READERS: dict[tuple[str, Sequence[tuple[str, bool]], str], CursorReader] = {}
READERS = 1024


def _reader(model: str, sort: Sequence[tuple[str, bool]], kinds: Mapping[str, str], id_kind: str) -> CursorReader:
    """The reader of this list's cursors, made now and kept."""
    if len(_READERS) >= READERS:
        _READERS.clear()
    reader = _READERS[(model, sort, id_kind)] = CursorReader(model, sort, kinds, id_kind)
    return reader


def kept_reader(model: str, sort: Sequence[tuple[str, bool]], id_kind: str) -> CursorReader | None:
    """The reader this list (`model` sorted by `sort`, ids of `id_kind`) has now, or None:
    what a test asks to see that a decode found its list's reader rather than made one,
    and how that reader reads a text (`CursorReader.read`, `CursorReader.numbers`),
    without making a reader itself."""
    return _READERS.get((model, tuple(sort), id_kind))


def readers_kept() -> int:
    """How many lists have a reader now: never more than `READERS`."""
    return len(_READERS)


def forget_readers() -> None:
    """Drop every list's reader, and its kept texts with it, and start the count towards
    `KEPT_ALL` again: the next decode of each list makes its reader anew. What a test calls
    so that a text is read by a reader made now (a mutation run is one process, and a
    reader a mutant made would otherwise answer the next mutant's cases)."""
    global _kept_since
    _READERS.clear()
    _kept_since = 0


def decode_whole(
    text: str, model: str, sort: Sequence[tuple[str, bool]], kinds: Mapping[str, str], id_kind: str
) -> tuple[tuple[Any, ...], Any]:
    """`decode_cursor` of any text: every check, in the order its refusals are raised, and
    nothing kept (no reader asked or made). `decode_cursor` takes it for every text its
    list's reader does not read, and its answers are the ones a reader's are held to
    (tests/app/test_cursor_head.py, test_cursor_numbers.py)."""
    if len(text) > MAX_CURSOR:
        raise _malformed(text)
    try:
        # base64.urlsafe_b64decode's own steps, without its wrappers' calls
        raw = binascii.a2b_base64((text + "=" * (-len(text) % 4)).encode("ascii").translate(_FROM_URLSAFE))
        value = _CURSOR_JSON.decode(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: arrays nested past the C scanner's depth (~1,000 `[`, within
        # MAX_CURSOR), which left the decode uncaught (a 500) before session 23
        raise _malformed(text) from None
    if not (type(value) is list and len(value) == 5 and value[0] == CURSOR_VERSION):
        raise _malformed(text)
    _version, made_for, made_sort, keys, id_ = value
    if made_for != model:
        raise BadQuery(f"cursor {_shown(text)!r} was made for a list of {made_for!r}, not {model!r}")
    wanted = sort_text(sort)
    if made_sort != wanted:
        raise BadQuery(
            f"cursor {_shown(text)!r} was made for sort={made_sort!r}, and this request sorts by {wanted!r}: "
            "a cursor continues the list it came from, with the same sort"
        )
    if type(keys) is not list or len(keys) != len(sort):
        raise _malformed(text)
    decoded = []
    for key, (field, _desc) in zip(keys, sort):
        checked = _key(key, kinds[field], nullable=True)
        if checked is _BAD:
            raise _malformed(text)
        decoded.append(checked)
    checked_id = _key(id_, id_kind, nullable=False)
    if checked_id is _BAD:
        raise _malformed(text)
    return tuple(decoded), checked_id


def link_prefix(path: str, pairs: Sequence[tuple[str, str]]) -> str:
    """What comes before the cursor in the RFC 8288 `Link` value of a list's next page: the
    request's own path and parameters, `offset` and `cursor` left out. A cursor is
    base64url, which percent-encoding leaves as it is, so this depends on the request alone
    and parsedlists.py's `ParsedQueries` keeps it per distinct list (quoting it on every page
    was a quarter of a list's CPU)."""
    kept = urlencode([(k, v) for k, v in pairs if k not in ("offset", "cursor")], quote_via=quote)
    return f"<{quote(path)}?{kept}{'&' if kept else ''}cursor="


def next_link(prefix: str, cursor: str) -> str:
    """The `Link` value of the next page: `link_prefix`'s text, then the next `cursor`."""
    return f'{prefix}{cursor}>; rel="next"'


class NextLinks:
    """The `Link` values of one list's next pages, each made from the page's last record.

    Made once per distinct list (parsedlists.py `ParsedQueries.link_after` keeps it): the text
    before the cursor (`link_prefix`), the cursor's head (`_cursor_head`) and the index key
    function of each sort field are found here once, so a page with a next one costs the
    keys of one record and one base64 (bench/README.md, "A page of 20 made afresh"). The
    value is the very text `next_link(link_prefix(...), encode_cursor(...))` gives (a test
    holds the two to each other).

    The last value is kept with the record object it was made from: the store hands out one
    object per record version and never mutates it (storage/shown.py), so a page ending on
    the same object ends on the same keys and id, and its `Link` is that text again (a list
    asked again while its last record is unchanged, written or not elsewhere). Holding
    that one record is the whole cost.
    """

    __slots__ = (
        "_by_float",
        "_by_id",
        "_by_int",
        "_by_null",
        "_by_str",
        "_id",
        "_keys",
        "_last",
        "_link",
        "_rest",
        "_start",
    )

    def __init__(
        self,
        prefix: str,
        model: str,
        sort: Sequence[tuple[str, bool]],
        keys: Mapping[str, Callable[[Any], Any]],
        id_field: str,
    ) -> None:
        # base64 turns each 3 bytes into 4 characters on their own: the head's whole groups
        # of 3 are encoded here once, after the prefix; a page encodes only the 0-2 bytes
        # left of the head, its keys and its id
        head = _cursor_head(model, tuple(sort)).encode("ascii")
        whole = len(head) - len(head) % 3
        self._start = prefix + binascii.b2a_base64(head[:whole], newline=False).translate(_URLSAFE).decode("ascii")
        self._rest = head[whole:]
        self._keys = tuple((field, keys[field]) for field, _desc in sort)
        self._id = id_field
        self._last: Mapping[str, Any] | None = None
        self._link = ""
        # the bytes after the head's whole groups of a cursor with an int id, written by one
        # bytes `%` (the key's and the id's text, the joins and the ASCII encode in one C
        # call): id order, one int key (a datetime's too), one finite float key, a str key
        # (json's own C escape first), a null. `%d` is int.__repr__ and `%a` of a float is
        # float.__repr__, json.dumps' own words for both (tests/app/test_link_cursor_bytes.py
        # holds the text to json.dumps'). The head's rest is 0-2 bytes of its end, `",[`:
        # never a `%` the format would read.
        rest = self._rest
        assert b"%" not in rest, rest
        self._by_id = rest + b"],%d]"
        self._by_int = rest + b"%d],%d]"
        self._by_float = rest + b"%a],%d]"
        self._by_str = rest + b"%s],%d]"
        self._by_null = rest + b"null],%d]"

    def after(self, record: Mapping[str, Any], sort_keys: Sequence[Any] | None = None) -> str:
        """The next page's `Link` value, after `record` (the page's last). `sort_keys`: the
        record's index keys of the sort's fields, in its order, when the store read them from
        its key columns (storage/shown.py `SentRecord`): then `record` holds its id alone."""
        if record is self._last:
            return self._link
        id_ = record[self._id]
        keys = self._keys
        # an int id in id order or under one int, finite float, str or null key (every
        # cursor row of the matrix): one bytes `%`, where the key's and the id's reprs, the
        # joins and the encode were ~0.4 us of a float key's ~1.8 (bench/README.md, wt-link);
        # a float's repr itself (~0.3 us) stays. Any other key (a bool, a non-finite float,
        # several keys) or id (a str) takes the text made key by key.
        if type(id_) is int and len(keys) < 2:
            if not keys:
                data = self._by_id % id_
            else:
                if sort_keys is None:
                    field, key = keys[0]
                    value = key(record[field])
                else:
                    value = sort_keys[0]
                kind = type(value)
                if kind is float and value - value == 0.0:  # finite: inf - inf and NaN are NaN
                    data = self._by_float % (value, id_)
                elif kind is int:
                    data = self._by_int % (value, id_)
                elif kind is str:
                    data = self._by_str % (_ascii(value).encode("ascii"), id_)
                elif value is None:
                    data = self._by_null % id_
                else:
                    data = self._rest + (_json_key(value) + "]," + int.__repr__(id_) + "]").encode("ascii")
        else:
            text = "]," + (int.__repr__(id_) if type(id_) is int else _json_key(id_)) + "]"
            if sort_keys is not None:
                text = ",".join([_json_key(value) for value in sort_keys]) + text
            elif keys:
                text = ",".join([_json_key(key(record[field])) for field, key in keys]) + text
            data = self._rest + text.encode("ascii")
        # base64url without its padding: `=` is only ever padding, deleted by the translate
        cursor = binascii.b2a_base64(data, newline=False).translate(_URLSAFE, b"=")
        self._last = record
        self._link = f'{self._start}{cursor.decode("ascii")}>; rel="next"'
        return self._link


_BAD = object()


def _shown(text: str) -> str:
    """A cursor as an error message quotes it: at most 40 characters."""
    return text if len(text) <= 40 else text[:39] + "…"


def _malformed(text: str) -> MalformedCursor:
    """The refusal of a cursor that is not one of ours; made only when it is raised (a
    cursor page decodes its cursor on every request)."""
    return MalformedCursor(
        f"malformed cursor {_shown(text)!r}: expected the cursor of a Link rel=\"next\" header of this list"
    )


# `json.loads(text, parse_constant=...)` made a decoder on every call (a cursor page
# decodes its cursor on every request); this is that decoder, made once. NaN and Infinity
# are refused by the decoder; a float key past the doubles (`1e400`, read as inf) by `_key`
# (no parse_float: a cursor's float keys are checked there anyway, and a call a float
# would cost every -score page)
_CURSOR_JSON = json.JSONDecoder(parse_constant=refuse_constant)
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")  # base64url -> base64 (RFC 4648 §5)
# its C scanner, called directly (storage/rows.py `SCAN`): (value, index after it); an
# attribute the decoder sets on itself, which the type stubs do not list. A module global
# the readers look up on each call, so a test may swap it to show a cursor is read
# without it (tests/app/test_cursor_numbers.py)
SCAN: Callable[[str, int], tuple[Any, int]] = _CURSOR_JSON.scan_once  # type: ignore[attr-defined]


_INT_LOW, _INT_HIGH = -(1 << 63), (1 << 63) - 1


def _key(value: Any, kind: str, nullable: bool) -> Any:
    """`value` as an index key of `kind`, or _BAD."""
    if value is None:
        return None if nullable else _BAD
    if kind == "i":
        # an index's ints are signed 64-bit (docs/guide/schema.md): one past them is no key
        # of ours, refused here rather than met by a store's int64 arrays
        return value if type(value) is int and _INT_LOW <= value <= _INT_HIGH else _BAD
    if kind == "f":
        if type(value) is int:
            value = _float_of(value)  # an int past the floats' range is no key (not an OverflowError)
        if type(value) is float and math.isfinite(value):
            return value
        return _BAD
    if kind == "s":
        return value if type(value) is str else _BAD
    if kind == "b":
        return value if type(value) is bool else _BAD
    return _BAD


def _float_of(value: int) -> Any:
    """An int made a float key, or _BAD past the floats' range: JSON has ints of any
    length, and a cursor whose float key is `1` and 400 zeros is malformed (`math.isfinite` of it
    raised OverflowError out of the decode, a 500, before session 22)."""
    try:
        return float(value)
    except OverflowError:
        return _BAD
