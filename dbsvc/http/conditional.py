"""Conditional requests (RFC 9110 §13): ETags, If-Match and If-None-Match.

Job: the entity tag of a record version and the evaluation of a request's preconditions
against it. A version is an int, the log offset of the record's last write (storage's
versions.py), 0 when there is no current record; this module knows nothing else of
storage (docs/architecture.md). The application (app.py) reads the version and asks here,
in the same synchronous call as the write it guards, so the check and the write are
atomic under the single writer.

Rules:
1. The ETag of version n is the strong tag `"n"` (RFC 9110 §8.8.3), the same for every
   representation of the record (a projection, a read through an access rule): it names
   the record version, and a cache keys it with the URI, which differs (docs/decisions.md,
   "ETags are log offsets").
2. If-Match (§13.1.1), on PUT, PATCH and DELETE: `*` is true when the record exists; a
   list is true when one of its tags equals the current ETag under strong comparison
   (§8.8.3.2: a weak tag `W/"n"` never matches). False: 412 `precondition_failed`, nothing
   changes. A missing record (or one the token may not read) has no current
   representation, so If-Match is false there: 412, not 404 (§13.1.1 step 3).
3. If-None-Match (§13.1.2), weak comparison: on GET and HEAD a match is 304 Not Modified
   (no body; the ETag and the read's headers); on a write a match, or `*` with a record
   there, is 412.
4. Both headers may arrive on several lines: the lines are one comma-separated list
   (RFC 9110 §5.3). A value that is not `*` or a list of entity tags is 400 `bad_request`
   naming the header, the value and what was expected; `*` inside a list is malformed.
   Empty list elements are allowed, and so is an empty list (§5.6.1): no tag matches it,
   so an empty If-Match fails (412) and an empty If-None-Match holds.

Imports errors and http.types only; no h11.
"""

from __future__ import annotations

import re

from dbsvc.errors import BadRequest, PreconditionFailed
from dbsvc.http.types import Request

__all__ = ["Conditions", "etag", "preconditions"]

IF_MATCH = "if-match"
IF_NONE_MATCH = "if-none-match"
ANY = "*"

Tag = tuple[bool, str]  # (weak, opaque-tag with its quotes)


def etag(version: int) -> tuple[str, str]:
    """The `ETag` header of record version `version` (rule 1)."""
    return ("ETag", f'"{version}"')


# RFC 9110 §8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE, etagc = %x21 / %x23-7E /
# obs-text; a list (§5.6.1) is its elements separated by commas, empty elements and OWS
# allowed. One regular expression checks a whole value (OWS stripped), another takes its
# tags out. Possessive quantifiers: a failing value is refused in linear time (16 KiB of
# commas and spaces must not cost seconds of backtracking; tested).
_TAG = r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*+"'
_LIST = re.compile(rf"(?:{_TAG})?(?:[ \t]*+,[ \t]*+(?:{_TAG})?)*+")
_TAGS = re.compile(r'(W/)?("[\x21\x23-\x7e\x80-\xff]*")')
_ONE = re.compile(r'"[\x21\x23-\x7e\x80-\xff]*+"')


def parse_tags(name: str, value: str) -> tuple[Tag, ...] | None:
    """The entity tags of an If-Match / If-None-Match value, None for `*` (rule 4); an
    empty list for an empty value (RFC 9110 §5.6.1: `#entity-tag` may have no element)."""
    text = value.strip(" \t")
    if text == ANY:
        return None
    if _ONE.fullmatch(text) is not None:  # the common case: one strong tag, as a client sends it
        return ((False, text),)
    if _LIST.fullmatch(text) is None:
        raise _malformed(name, value)
    return tuple([(weak == "W/", opaque) for weak, opaque in _TAGS.findall(text)])


def _malformed(name: str, value: str) -> BadRequest:
    header = "If-Match" if name == IF_MATCH else "If-None-Match"
    return BadRequest(
        f"{header} header {value!r} is malformed: expected '*' or a comma-separated list of "
        f'entity tags such as "12" or W/"12" (RFC 9110 §8.8.3)'
    )


def _field(request: Request, name: str) -> str | None:
    """The value of header `name`, its lines joined into one list (rule 4)."""
    values = [v for k, v in request.headers if k == name]
    if not values:
        return None
    return values[0] if len(values) == 1 else ", ".join(values)


class Conditions:
    """A request's If-Match and If-None-Match, parsed: `None` for an absent header, `ANY`
    for `*`, else the tags (maybe none)."""

    __slots__ = ("if_match", "if_none_match")

    def __init__(self, if_match: tuple[Tag, ...] | str | None, if_none_match: tuple[Tag, ...] | str | None) -> None:
        self.if_match = if_match
        self.if_none_match = if_none_match

    def matches(self, version: int) -> bool:
        """If-Match holds for the current `version` (rule 2: strong comparison)."""
        tags = self.if_match
        if tags is None:
            return True
        if not version:
            return False
        if isinstance(tags, str):  # *
            return True
        current = f'"{version}"'
        return any(not weak and opaque == current for weak, opaque in tags)

    def none_match(self, version: int) -> bool:
        """If-None-Match holds for the current `version` (rule 3: weak comparison)."""
        tags = self.if_none_match
        if tags is None or not version:
            return True
        if isinstance(tags, str):  # *
            return False
        current = f'"{version}"'
        return not any(opaque == current for _weak, opaque in tags)

    def check_write(self, version: int, what: str) -> None:
        """Rules 2-3 for a write to `what` ("Post 3") at its current `version` (0: none):
        PreconditionFailed unless both conditions hold."""
        if not self.matches(version):
            now = f'is at version "{version}"; read it again and retry with its ETag' if version else "does not exist"
            raise PreconditionFailed(f"If-Match {_shown(self.if_match)} does not match: {what} {now}", version)
        if not self.none_match(version):
            raise PreconditionFailed(
                f'If-None-Match {_shown(self.if_none_match)} matches: {what} is at version "{version}"', version
            )


def _shown(tags: tuple[Tag, ...] | str | None) -> str:
    if isinstance(tags, str) or tags is None:
        return "*"
    if not tags:
        return "(empty)"
    return ", ".join(("W/" if weak else "") + opaque for weak, opaque in tags)


def preconditions(request: Request) -> Conditions | None:
    """The request's conditions, or None when it has neither header (the common case: one
    header scan and nothing else). 400 for a malformed one (rule 4)."""
    for name, _value in request.headers:
        if name == IF_MATCH or name == IF_NONE_MATCH:
            break
    else:
        return None
    return Conditions(_tags(IF_MATCH, _field(request, IF_MATCH)), _tags(IF_NONE_MATCH, _field(request, IF_NONE_MATCH)))


def _tags(name: str, value: str | None) -> tuple[Tag, ...] | str | None:
    if value is None:
        return None
    tags = parse_tags(name, value)
    return ANY if tags is None else tags
