"""The string formats both sides of the house parse: date-time, date and uuid (OpenAPI's
`format` names), each text in, its canonical form out, by one parser apiece.

The schema reads a value written by someone else as a `@default` or a rule's literal
(dbsvc/schema/values.py, dbsvc/schema/rules.py), the runtime as a request's body, filter, path
id or claim (dbsvc/runtime.py, called by generated code). A schema literal is a value a request
could send, so the two must take exactly the same texts and give exactly the same canonical
form. Schema may not import runtime, so each once had parsers of its own, held to one answer by
a test (datetime, session 18) or by nothing (date, uuid). Now both import this module, which
sits below both (tests/test_layers.py: it imports nothing from dbsvc). Generated code calls
these parsers through runtime.py, its one surface, which takes them from here.

## date-time

Accepted (RFC 3339 §5.6)::

    YYYY-MM-DD T HH:MM:SS [.frac] ( Z | +HH:MM | -HH:MM )

- ASCII digits only; per the note in §5.6 the separator may also be `t` or a space, and `Z`
  may be `z`; `-00:00` is read as UTC.
- A fraction of any length, truncated to microseconds (never rounded, so a value never moves
  into the next second).
- Refused: a day or a time that does not exist (`2023-02-29`, `24:00:00`), a leap second
  (`:60`: Python cannot represent it), an offset of 24 hours or more or of 60 minutes or
  more, and an instant that is before year 1 or after year 9999 once in UTC.

Canonical form: `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` in UTC, the year always four digits, the
microseconds only when there are any. This is the stored and the wire form.

Python's `datetime.fromisoformat` does the calendar work in C, but it accepts far more than
RFC 3339 (week dates, `+0100`, no seconds, a comma before the fraction), so the shape is
checked with a regular expression first; it refuses a lower-case `z` (3.11), hence `upper()`.

## date

`YYYY-MM-DD` (RFC 3339 §5.6 full-date), ASCII digits only, naming a day that exists in years
0001-9999; the canonical form is the text itself. Nothing else: no week or ordinal dates, no
`YYYYMMDD`, no sign, no whitespace.

## uuid

The hyphenated 8-4-4-4-12 hex form (RFC 9562 §4), letters in either case; the canonical form
is lower case. Refused: the 32 digits without hyphens, braces, the `urn:uuid:` prefix,
whitespace (Python's `uuid.UUID` takes all four).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

# The shape alone: fromisoformat checks the calendar, the clock and the offset's hours.
_SHAPE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-5][0-9])"
)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # the shape alone: fromisoformat checks the calendar
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
EPOCH = datetime(1970, 1, 1)  # naive UTC, as `parse_instant` answers
MICROSECOND = timedelta(microseconds=1)


def parse_instant(text: str) -> datetime | None:
    """RFC 3339 text -> the instant as a naive UTC datetime, or None when it is not one."""
    if _SHAPE.fullmatch(text) is None:
        return None
    try:
        return datetime.fromisoformat(text.upper()).astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):  # no such day, time or offset; before year 1 or after 9999 in UTC
        return None


def format_instant(instant: datetime) -> str:
    """A naive UTC datetime -> its canonical text.

    `isoformat` writes the year with four digits (strftime's `%Y` writes year 5 as "5" on
    glibc) and the microseconds only when there are any."""
    return instant.isoformat() + "Z"


def parse_datetime(text: str) -> str | None:
    """RFC 3339 text in any offset -> its canonical UTC text, or None.

    >>> parse_datetime("2024-05-01T14:00:00.5+02:00")
    '2024-05-01T12:00:00.500000Z'
    """
    instant = parse_instant(text)
    return None if instant is None else format_instant(instant)


def parse_datetime_key(text: str) -> int | None:
    """RFC 3339 text -> integer microseconds since the epoch (the datetime index key), or None."""
    instant = parse_instant(text)
    return None if instant is None else (instant - EPOCH) // MICROSECOND


def parse_date(text: str) -> str | None:
    """`YYYY-MM-DD` naming a real calendar day -> the same text (it is canonical), or None.

    >>> parse_date("2024-02-29"), parse_date("2023-02-29")
    ('2024-02-29', None)
    """
    # `[0-9]`, not `\d`: `\d` matches any script's digits (fromisoformat refuses them after it,
    # but the shape should say what it means), and fromisoformat alone takes `20240229`.
    if _DAY.fullmatch(text) is None:
        return None
    try:
        date.fromisoformat(text)
    except ValueError:  # no such month or day, or year 0000
        return None
    return text


def parse_uuid(text: str) -> str | None:
    """A uuid in the 8-4-4-4-12 hex shape, any letter case -> lower case, or None."""
    if _UUID.fullmatch(text) is None:
        return None
    return text.lower()
