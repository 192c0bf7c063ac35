"""Issue 30 item 4: the import measures each record against the record size limit only when
its longest line could hold a record near it (datatools/load.py, "Speed").

The bound must hold for any line: a record that validation builds from a line the bound
calls safe is never near the limit (its compact JSON, 4 bytes a character at most, twice
over for an update's frame, fits). Numbers are where a record grows most (`1e15` is
written `1000000000000000.0`), then defaults and normalised datetimes.
"""

from __future__ import annotations

import bisect
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dbsvc.datatools.load import may_be_near_the_record_limit
from dbsvc.runtime import compact_json
from dbsvc.storage.events import HEAD_RESERVE
from dbsvc.storage.logfile import MAX_PAYLOAD
from support.blog import BLOG

MODULE = BLOG  # compiled once per process (tests/support/blog.py)
VALIDATE = {m.name: m.validate_create for m in MODULE.MODELS}

growing = st.one_of(
    st.sampled_from([1e15, 9e15, 1e5, 0.1, -1e15, 123456789012345678]), st.text(max_size=20), st.booleans(), st.none()
)
json_values = st.recursive(
    growing,
    lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=5), inner, max_size=10),
    max_leaves=200,
)


def line_of(model: str, record: dict, compact_numbers: bool) -> bytes:
    text = json.dumps({"model": model, "record": record}, separators=(",", ":"), ensure_ascii=False)
    if compact_numbers:  # the shortest spelling of the floats the strategy picks: the largest growth
        text = text.replace("1000000000000000.0", "1e15").replace("9000000000000000.0", "9e15")
    return (text + "\n").encode("utf-8")


@settings(max_examples=100, deadline=None)
@given(
    profile=json_values,
    name=st.text(min_size=1, max_size=100),
    joined=st.sampled_from(["2025-01-01T00:00:00.1Z", "2025-01-01T00:00:00+05:00", None]),
    compact_numbers=st.booleans(),
)
def test_a_record_from_a_line_the_bound_calls_safe_is_never_near_the_limit(profile, name, joined, compact_numbers):
    body = {"email": "a@b.c", "name": name, "profile": profile}
    if joined is not None:
        body["joined"] = joined
    line = line_of("User", body, compact_numbers)
    record = VALIDATE["User"](json.loads(line)["record"])
    text = compact_json(record)
    # The smallest limit under which the bound still calls this line safe:
    limit = bisect.bisect_left(
        range(MAX_PAYLOAD), True, key=lambda p: not may_be_near_the_record_limit(len(line), MODULE, p)
    )
    assert not may_be_near_the_record_limit(len(line), MODULE, limit)
    assert 8 * len(text) + HEAD_RESERVE <= limit


def test_ordinary_lines_are_not_measured_and_a_long_one_is():
    assert not may_be_near_the_record_limit(1_000_000, MODULE)
    assert may_be_near_the_record_limit(2_000_000, MODULE)
