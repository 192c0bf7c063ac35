"""The application's header values are checked as h11 would check them (message.py
`response_headers`): printable ASCII is decided without the regex (bench/README.md, "A page
of 20 made afresh"), and every value, of any character, is accepted or refused exactly as
RFC 9110 §5.5's field-value grammar (the regex h11 uses) says."""

from __future__ import annotations

import re

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.http.message import response_headers
from dbsvc.http.types import Response

FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[ \t\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")


def accepted(value: str) -> bytes | None:
    """The raw value `response_headers` sends for an `X-Test` header, or None if refused."""
    try:
        headers = response_headers(Response(200, b"", [("X-Test", value)]), "rid", None, False)
    except (h11.LocalProtocolError, UnicodeEncodeError):  # the connection answers 500 for either
        return None
    return dict(headers)[b"X-Test"]


def grammar(value: str) -> bytes | None:
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return None
    return raw if FIELD_VALUE.fullmatch(raw) else None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0",
        "20500",
        '"123"',
        "a b",
        " a",
        "a ",
        " ",
        "a\tb",
        "\ta",
        "a\r\nb",
        "\x7f",
        "caf\u00e9",
        "\u20ac",
        '</api/blog-post?sort=-score&limit=20&cursor=WyJjMSJd>; rel="next"',
    ],
)
def test_each_edge_value_is_decided_as_the_grammar_says(value):
    assert accepted(value) == grammar(value)


@given(st.text(alphabet=st.characters(max_codepoint=0x17F), max_size=8))
@settings(max_examples=300, deadline=None)
def test_any_value_is_decided_as_the_grammar_says(value):
    assert accepted(value) == grammar(value)
