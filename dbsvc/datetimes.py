"""The `datetime` field type's one parser and one formatter: RFC 3339 text in, canonical UTC out.

Both sides of the house read a datetime written by someone else: the schema a `@default` or
a rule's literal (dbsvc/schema/values.py, dbsvc/schema/rules.py), the runtime a request's
body, filter or claim (dbsvc/runtime.py, called by generated code). A schema literal is a
value a request could send, so the two must take exactly the same texts and give exactly the
same canonical form; they did, by a test holding two parsers to one answer (session 18),
because schema may not import runtime. Now both import this module, the one parser, which
sits below both (tests/test_layers.py: it imports nothing from dbsvc). Generated code calls
`parse_datetime` and `parse_datetime_key` through runtime.py, its one surface, which takes
them from here.

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
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

# The shape alone: fromisoformat checks the calendar, the clock and the offset's hours.
_SHAPE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-5][0-9])"
)
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
