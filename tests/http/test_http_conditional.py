"""If-Match and If-None-Match evaluated without a server (dbsvc/http/conditional.py; RFC
9110 §8.8.3, §13.1.1, §13.1.2): the entity-tag list grammar, strong and weak comparison, a
missing record, several header lines, and the 412 each failure raises."""

from __future__ import annotations

import pytest

from dbsvc.errors import BadRequest, PreconditionFailed
from dbsvc.http.conditional import etag, parse_tags, preconditions
from dbsvc.http.types import Request


def request(*headers: tuple[str, str]) -> Request:
    return Request("PUT", "/api/user/1", "/api/user/1", [], [(k.lower(), v) for k, v in headers])


@pytest.mark.parametrize(
    "value, tags",
    [
        ('"1"', ((False, '"1"'),)),
        ('W/"1"', ((True, '"1"'),)),
        (' "1" , W/"2",,"" ', ((False, '"1"'), (True, '"2"'), (False, '""'))),
        ('"a,b"', ((False, '"a,b"'),)),  # a comma is an etagc
        ('"\x80\xff"', ((False, '"\x80\xff"'),)),  # obs-text (latin-1 decoded)
        ("*", None),
        (" * ", None),
        ("", ()),  # an empty list (RFC 9110 §5.6.1)
        (" , ,", ()),
    ],
)
def test_entity_tag_lists_parse(value, tags):
    assert parse_tags("if-match", value) == tags


@pytest.mark.parametrize(
    "value",
    [
        "12",
        '"12',
        'W/12',
        "w/\"1\"",
        '"1" "2"',
        '"1";"2"',
        '*, "1"',
        '"1", *',
        '"a"b',
        '"tab\there"',
        '"sp ace"',
        '"quo"te"',
    ],
)
def test_anything_else_is_400_naming_the_header_and_the_value(value):
    with pytest.raises(BadRequest) as info:
        parse_tags("if-none-match", value)
    assert str(info.value) == (
        f"If-None-Match header {value!r} is malformed: expected '*' or a comma-separated list of "
        'entity tags such as "12" or W/"12" (RFC 9110 §8.8.3)'
    )


def test_no_header_is_no_conditions():
    assert preconditions(request(("content-type", "application/json"))) is None


@pytest.mark.parametrize(
    "value, version, holds",
    [
        ('"7"', 7, True),
        ('"7"', 8, False),
        ('W/"7"', 7, False),  # strong comparison: a weak tag never matches (§8.8.3.2)
        ('"1", "7"', 7, True),
        ("*", 7, True),
        ("*", 0, False),  # no current record: If-Match is false, 412 not 404 (§13.1.1)
        ('"0"', 0, False),
        ("", 7, False),  # an empty list: no tag matches
    ],
)
def test_if_match_compares_strongly_and_fails_without_a_record(value, version, holds):
    conditions = preconditions(request(("If-Match", value)))
    assert conditions is not None and conditions.matches(version) is holds
    if holds:
        conditions.check_write(version, "User 1")
    else:
        with pytest.raises(PreconditionFailed) as info:
            conditions.check_write(version, "User 1")
        assert (info.value.status, info.value.code) == (412, "precondition_failed")
        assert info.value.headers == ([etag(version)] if version else [])


@pytest.mark.parametrize(
    "value, version, holds",
    [
        ('"7"', 7, False),
        ('W/"7"', 7, False),  # weak comparison
        ('"8"', 7, True),
        ("*", 7, False),
        ("*", 0, True),
        ('"7"', 0, True),
        ("", 7, True),
    ],
)
def test_if_none_match_compares_weakly(value, version, holds):
    conditions = preconditions(request(("If-None-Match", value)))
    assert conditions is not None and conditions.none_match(version) is holds


def test_several_lines_are_one_list():
    conditions = preconditions(request(("If-Match", '"1"'), ("If-Match", '"7"')))
    assert conditions is not None and conditions.matches(7) and conditions.matches(1) and not conditions.matches(2)


def test_the_412_details_say_what_failed():
    with pytest.raises(PreconditionFailed) as info:
        preconditions(request(("If-Match", 'W/"3", "4"'))).check_write(5, "User 1")  # type: ignore[union-attr]
    assert info.value.detail == (
        'If-Match W/"3", "4" does not match: User 1 is at version "5"; read it again and retry with its ETag'
    )
    with pytest.raises(PreconditionFailed) as info:
        preconditions(request(("If-Match", "*"))).check_write(0, "User 9")  # type: ignore[union-attr]
    assert info.value.detail == "If-Match * does not match: User 9 does not exist"
    with pytest.raises(PreconditionFailed) as info:
        preconditions(request(("If-None-Match", "*"))).check_write(5, "User 1")  # type: ignore[union-attr]
    assert info.value.detail == 'If-None-Match * matches: User 1 is at version "5"'


@pytest.mark.parametrize(
    "value", ["," * 160000 + "x", " ," * 80000 + "x", ", " * 80000 + "x", '"a" ,' * 30000 + " x", '"' + "a" * 160000]
)
def test_a_hostile_value_is_refused_without_backtracking(value):
    """160 KiB of list separators before a bad byte (ten times a head's limit) is refused.
    This is a hang guard, not a speed goal: a backtracking pattern took 1.7-3.4 s at 16 KiB,
    so at ten times the length it would take minutes, and the alarm below ends it at 30 s;
    the possessive pattern answers in milliseconds."""
    import signal

    def hung(signum, frame):
        raise AssertionError(f"parse_tags backtracks: no answer in 30 s for {len(value)} characters")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        with pytest.raises(BadRequest):
            parse_tags("if-match", value)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("value", ['"1"\x0b', '\xa0"1"', '\x0c"1"\x0c', 'X"1"X', "X*X"])
def test_only_spaces_and_tabs_around_a_value_are_stripped(value):
    """OWS is SP / HTAB (RFC 9110 §5.6.3): no other white space, and nothing else, is taken
    off a value before it is parsed."""
    assert parse_tags("if-match", ' \t"1"\t ') == ((False, '"1"'),)
    with pytest.raises(BadRequest):
        parse_tags("if-match", value)


@pytest.mark.parametrize(
    "header, shown", [("If-Match", "If-Match"), ("If-None-Match", "If-None-Match"), ("if-match", "If-Match")]
)
def test_a_malformed_header_is_named_as_the_rfc_spells_it(header, shown):
    with pytest.raises(BadRequest) as info:
        preconditions(request(("Content-Type", "application/json"), (header, '"1" x')))
    assert str(info.value) == (
        f"{shown} header '\"1\" x' is malformed: expected '*' or a comma-separated list of "
        'entity tags such as "12" or W/"12" (RFC 9110 §8.8.3)'
    )


def test_the_412_of_an_empty_if_match_and_of_a_matching_if_none_match_say_so():
    with pytest.raises(PreconditionFailed) as info:
        preconditions(request(("If-Match", " , "))).check_write(5, "User 1")  # type: ignore[union-attr]
    assert info.value.detail == (
        'If-Match (empty) does not match: User 1 is at version "5"; read it again and retry with its ETag'
    )
    assert info.value.headers == [("ETag", '"5"')]
    with pytest.raises(PreconditionFailed) as info:
        preconditions(request(("If-None-Match", '"4", W/"5"'))).check_write(5, "User 1")  # type: ignore[union-attr]
    assert info.value.detail == 'If-None-Match "4", W/"5" matches: User 1 is at version "5"'
    assert info.value.headers == [("ETag", '"5"')]  # the current tag rides along
