"""The small, stable surface generated modules call and the rest of dbsvc reads.

A generated module (see `dbsvc.compiler`) exposes one `CompiledModel` per schema model;
storage, HTTP application and realtime feeds only ever talk to a model through it. Nothing
here walks the schema IR: every schema-specific decision was made when the module was
generated.

Record form: a record is a `dict` whose keys are the model's fields in declaration order
and whose values are already JSON-ready and canonical (datetime `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`
in UTC, date `YYYY-MM-DD`, uuid lower case, float as `float`). `json.dumps(record)` is the
wire form. Storage works on a record's values in declaration order instead
(`CompiledModel.row` makes them, `decode` turns them back into a record, `passes` is
`match` on them) and keeps them packed into one bytes object (storage/rows.py): the
model's field names are said once, not once per record.

Index keys: `CompiledModel.keys[field](value)` maps a stored value to a hashable key that
compares with the field's typed order (datetime -> integer microseconds since the epoch;
float -> float, so 3 and 3.0 are one key; everything else the value itself). `None` stays
`None`: sorted indexes order null after every value (PostgreSQL's ASC NULLS LAST).
Filter sets in a `Query` hold keys of exactly this form.

Value helpers (the second half of this module) are what generated validators and query
parsers call for the parts of a check that are not schema-specific: the strict RFC 3339
shape, calendar validity, uuid shape, and how a bad value is shown in a message. Parsers
return the canonical value, or `None` when the text is not acceptable; the generated code
owns the message, which names the field.

Request bodies are decoded by dbsvc/bodies.py (`decode_body`), which uses `show` from here.

Text values: every `str` field, str id and str filter value is stored and compared in
Unicode Normalization Form C (`nfc`), so the NFC and NFD spellings of one e-mail are one
value (docs/decisions.md, "Values"). `json` fields are stored as sent.

Datetimes, dates and uuids: `parse_datetime`, `parse_datetime_key`, `parse_date` and
`parse_uuid` are dbsvc/formats.py's, the parsers the schema's literals go through too, so a
`@default` or a rule's literal is taken exactly when a request's value would be; that module
says what is accepted.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
import uuid as _uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Protocol, TypeAlias

from dbsvc.errors import BadQuery
from dbsvc.formats import EPOCH, MICROSECOND, format_instant
from dbsvc.formats import parse_date as parse_date
from dbsvc.formats import parse_datetime as parse_datetime
from dbsvc.formats import parse_datetime_key as parse_datetime_key
from dbsvc.formats import parse_uuid as parse_uuid
from dbsvc.rules import Claims, ModelRules

# The shapes that cross every layer: a record as JSON gives it (field name -> value, in
# declaration order), and the filters of a query (field -> the index keys any of which matches).
Record: TypeAlias = dict[str, Any]
Filters: TypeAlias = Mapping[str, frozenset[Any]]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_FILTER_VALUES = 1000  # filter values in one query string, all fields together


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed, type-checked query string.

    `filters` maps a filterable field to the set of index keys it may take (OR inside a
    field, AND across fields). `sort` lists (field, descending) pairs; ties always break
    on the primary key ascending. `limit` is already clamped to MAX_LIMIT. `where_row`,
    set only by the app from an access rule's `Scope` (never parsed from a query string),
    is a test of a record's stored values that every listed record must also pass.
    `ranges` (one `(field, low, low inclusive, high, high inclusive)` per @sort field, None
    unbounded, never matching a null), `nulls` ((field, must be null) pairs) and `cursor`
    ((sort keys, id) of the record a page starts after) are the operators of
    dbsvc/operators.py and the cursor of dbsvc/cursors.py. `expand` lists the `@ref`
    fields whose records a get or a list embeds under `_expand`, each with the referenced
    model's projection (dbsvc/expand.py).
    `search` holds the folded words of `search=` (dbsvc/textsearch.py), each a prefix of
    some word of every matching record's `@search` fields.
    """

    filters: Filters = field(default_factory=dict)
    sort: tuple[tuple[str, bool], ...] = ()
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    projection: str | None = None
    as_of: int | None = None
    after: int | None = None
    where_row: Callable[[Sequence[Any]], bool] | None = None
    ranges: tuple[tuple[str, Any, bool, Any, bool], ...] = ()
    nulls: tuple[tuple[str, bool], ...] = ()
    cursor: tuple[tuple[Any, ...], Any] | None = None
    expand: tuple[tuple[str, str | None], ...] = ()  # (@ref field, projection or None), as asked
    search: tuple[str, ...] = ()


class Matcher(Protocol):
    """`match_m(record, filters, ranges=(), nulls=(), search=())`: whether a record passes a
    query's filters, operators (`Query.ranges`, `Query.nulls`) and, on a model with `@search`
    fields only, its search words (`Query.search`): the test of every feed event."""

    def __call__(
        self, record: Record, filters: Filters, ranges: tuple = (), nulls: tuple = (), search: tuple = (), /
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class CompiledModel:
    """Everything the runtime knows about one model, all of it generated code or constants."""

    name: str  # declared name, "BlogPost"
    kebab: str  # route segment, "blog-post"
    fields: tuple[str, ...]  # declaration order
    id_field: str
    id_type: str  # "int" | "str" | "uuid"
    unique_fields: tuple[str, ...]  # @unique fields, the id excluded
    filter_fields: tuple[str, ...]
    sort_fields: tuple[str, ...]
    refs: tuple[tuple[str, str], ...]  # (field, parent model name)
    projections: Mapping[str, tuple[str, ...]]
    keys: Mapping[str, Callable[[Any], Any]]  # index key of every id/unique/filter/sort/ref field
    validate_create: Callable[[Any], Record]  # body -> record; raises BadRequest/ConstraintViolation
    validate_replace: Callable[[Any, Any], Record]  # (body, path id) -> record
    validate_patch: Callable[[Any, Record], Record]  # (body, current record) -> record
    parse_id: Callable[[str], Any]  # path segment -> id value; raises BadRequest
    parse_list_query: Callable[[list[tuple[str, str]]], Query]  # raises BadQuery
    parse_get_query: Callable[[list[tuple[str, str]]], Query]  # projection, as_of only
    parse_feed_query: Callable[[list[tuple[str, str]]], Query]  # filters, projection, after
    match: Matcher  # record passes every filter and operator
    project: Mapping[str, Callable[[Record], Record]]  # projection name -> encoder
    decode: Callable[[Sequence[Any]], Record]  # values in field order -> record
    row: Callable[[Record], tuple[Any, ...]]  # record -> its values in field order (stored packed)
    passes: Callable[[Sequence[Any], Filters], bool]  # `match` on a record's values
    # position -> {member: member} of each enum field: the str objects index keys share
    shared_values: Mapping[int, Mapping[Any, Any]] = field(default_factory=dict)
    # sort field -> array typecode of its index keys ("d", "q"), where they are numbers
    key_arrays: Mapping[str, str] = field(default_factory=dict)
    # the model's compiled `@allow` rules (dbsvc/rules.py); None: the model has none, and
    # every valid token may do everything
    rules: ModelRules | None = None
    # fills the fields declared `@default(token.CLAIM)` of a create body from the claims
    fill_from_token: Callable[[dict[str, Any], Claims], None] | None = None
    # the `@search` fields, whose words `search=` matches (dbsvc/textsearch.py)
    search_fields: tuple[str, ...] = ()
    # (cursor text, sort) -> (sort keys, id): the list parser's decoding of `cursor`, alone;
    # raises BadQuery (compiler/operators.py `build_decode_cursor`)
    decode_cursor: Callable[[str, tuple[tuple[str, bool], ...]], tuple[tuple[Any, ...], Any]] | None = None


# ---------------------------------------------------------------------------------------
# Value helpers called by generated code.
# ---------------------------------------------------------------------------------------

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
NO_FILTERS: Filters = MappingProxyType({})
DEFAULT_QUERY = Query(filters=NO_FILTERS)  # what every parser answers for an empty query string

_INT_TEXT_RE = re.compile(r"[+-]?[0-9]+")
_NUMBER_TEXT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
SHOW_LIMIT = 60  # the characters of a value a message shows (`show`, bodies.py)
SURROGATE_RE = re.compile("[\ud800-\udfff]")  # a lone surrogate: no UTF-8 form (bodies.py refuses it)


class _Invalid:
    """The type of `INVALID`: what a generated field check returns after recording a violation."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Any = _Invalid()


def shared(members: Mapping[Any, Any], value: Any) -> Any:
    """The model's own string for an enum member (`members_m__f` of the generated module),
    so stored rows share one object per member; `value` itself when it is not a member
    (replay and migrations store what the log holds, unchecked, even a list)."""
    try:
        return members.get(value, value)
    except TypeError:
        return value


def identity(value: Any) -> Any:
    """Index key of a field whose stored value already orders correctly (int, str, bool,
    enum, uuid, date)."""
    return value


def datetime_key(value: str | None) -> int | None:
    """Index key of a stored canonical datetime: integer microseconds since the epoch."""
    if value is None:
        return None
    # A stored value is canonical (checked on the way in), so the fast C parser is safe
    # here: `fromisoformat` reads `YYYY-MM-DDTHH:MM:SS[.ffffff]` once the `Z` is cut off.
    return (datetime.fromisoformat(value[:-1]) - EPOCH) // MICROSECOND


def parse_int_text(text: str) -> int | None:
    """Query text -> int within the signed 64-bit range, or None. Integral decimal forms
    (`3.0`, `3e2`) are accepted: a filter compares values, not spellings."""
    if _INT_TEXT_RE.fullmatch(text) is not None:
        if len(text) > 24:
            return None
        number = int(text)
    elif _NUMBER_TEXT_RE.fullmatch(text) is not None:
        value = float(text)
        if not math.isfinite(value) or not value.is_integer():
            return None
        number = int(value)
    else:
        return None
    if number < INT64_MIN or number > INT64_MAX:
        return None
    return number


def parse_float_text(text: str) -> float | None:
    """Query text -> finite float, or None. Only JSON-like numbers: no `nan`, `inf`, `1_0`."""
    if _NUMBER_TEXT_RE.fullmatch(text) is None:
        return None
    value = float(text)
    if not math.isfinite(value):
        return None
    return value


def parse_count(text: str) -> int | None:
    """Query text of `limit`, `offset`, `as_of`, `after` -> non-negative int, or None.
    Plain ASCII digits only (no sign, no spaces)."""
    if not text.isdigit() or not text.isascii() or len(text) > 4000:
        return None
    return int(text)


def parse_int_id(segment: str) -> int | None:
    """A path segment naming an int primary key -> int, or None (negative ids are allowed).
    Integral spellings (`-925.0`, `1e3`) name that integer, as in a filter and a body: the
    OpenAPI document's `"type": "integer"` admits them (docs/decisions.md); `+1` does not."""
    if segment.startswith("+") or len(segment) > 24:
        return None
    return parse_int_text(segment)


def finite_float(value: int | float) -> float | None:
    """A JSON number -> finite float, or None (NaN, infinities, ints too large for a float)."""
    try:
        result = float(value)
    except OverflowError:
        return None
    if not math.isfinite(result):
        return None
    return result


def now() -> str:
    """The current instant in canonical form (`@default(now)` of a datetime)."""
    return format_instant(datetime.now(UTC).replace(tzinfo=None))


def new_uuid() -> str:
    """A fresh random uuid (version 4), lower case (`@default(uuid)`)."""
    return str(_uuid.uuid4())


def got(value: Any) -> str:
    """How a bad JSON value is shown in a message: its JSON kind and a short JSON rendering.

    >>> got(True), got("12"), got(None)
    ('the boolean true', 'the string "12"', 'null')
    """
    if value is None:
        return "null"
    if value is True or value is False:
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, str):
        kind = "the string"
    elif isinstance(value, (int, float)):
        kind = "the number"
    elif isinstance(value, list):
        kind = "an array"
    elif isinstance(value, dict):
        kind = "an object"
    else:
        kind = "a value of type " + type(value).__name__
    return f"{kind} {show(value)}"


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def c_encoder(item_separator: str) -> Callable[[Any, int], Any] | None:
    """The C encoder `json.dumps` builds on every call, built once, with `item_separator`
    between items: "," for `compact_json`, NUL for storage/rows.py's `pack_parts`, which cuts
    a record's values' texts at it. Built once because json.JSONEncoder.iterencode makes a
    closure and an encoder each time, a measurable saving on every small object
    (bench/README.md, "Figures that were in docstrings", has the figure). None where this
    interpreter's json module has no C encoder: the caller falls back to the Python one."""
    try:
        from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

        if c_make_encoder is None:
            return None
        # markers, default, encoder, indent, key separator, item separator, sort_keys,
        # skipkeys, allow_nan: what JSONEncoder(separators=(item_separator, ":"),
        # ensure_ascii=False, allow_nan=False, check_circular=False) passes.
        encoder: Callable[[Any, int], Any] = c_make_encoder(
            None, _not_json, encode_basestring, None, ":", item_separator, False, False, False
        )
        return encoder
    except (ImportError, TypeError):  # another interpreter's json internals
        return None


_C_ENCODER = c_encoder(",")

# `compact_json` where this interpreter's json module has no C encoder: the same text, the
# same refusals. Public so that a test holds it to the C encoder's answers on an interpreter
# that has one.
compact_json_in_python: Callable[[Any], str] = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False, default=_not_json
).encode


def compact_json(value: Any) -> str:
    """`value` as compact JSON text: no spaces, UTF-8 characters as they are, and ValueError
    for NaN or infinity (not JSON). Records, events and responses are all written with it.
    No cycle check: values here come from JSON or from validators, which cannot make one."""
    if _C_ENCODER is not None:
        return "".join(_C_ENCODER(value, 0))
    return compact_json_in_python(value)


def json_bytes(value: Any) -> bytes:
    """`compact_json` as UTF-8: the bytes a record, an event or a response body goes out as."""
    return compact_json(value).encode("utf-8")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def show(value: Any) -> str:
    """A JSON rendering of `value` cut to a readable length (`"abc…"` for long strings).
    A lone surrogate is shown escaped (`"\\ud800"`): a message must always encode as UTF-8."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except ValueError:
        text = repr(value)
    if SURROGATE_RE.search(text) is not None:
        text = SURROGATE_RE.sub(_escaped, text)
    if len(text) > SHOW_LIMIT:
        text = text[: SHOW_LIMIT - 1] + "…"
    return text


def nfc(text: str) -> str:
    """`text` in Unicode Normalization Form C, the form every str value is stored and
    compared in: `"cafe\\u0301"` (NFD) and `"caf\\u00e9"` are one value. ASCII is its
    own NFC, and `normalize` returns an already normalized string itself, so the common
    cases cost a flag test or a quick check, never a copy."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", text)


def filter_sets(filters: dict[str, list[Any]]) -> Filters:
    """The filter keys a query parser collected per field -> `Query.filters` (one
    frozenset per field: any of its values matches). More than MAX_FILTER_VALUES values
    in all, repeats counted, is BadQuery: each value costs work on every matched event."""
    if not filters:
        return NO_FILTERS
    given = 0
    out: dict[str, frozenset[Any]] = {}
    for name, keys in filters.items():
        given += len(keys)
        out[name] = frozenset(keys)
    if given > MAX_FILTER_VALUES:
        raise BadQuery(f"{given} filter values given: at most {MAX_FILTER_VALUES} are allowed in one query")
    return out
