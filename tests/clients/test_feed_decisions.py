"""The generated Python client's feed decisions that tests/clients/test_feed_state.py went
around (hand mutations of docs/mutation.md, "dbsvc/clients/..." section, session 6).

Sans-IO like test_feed_state.py: the state machines of a generated client, fed frames shaped
as the server sends them (docs/realtime.md).
"""

from __future__ import annotations

import pytest

from support.client_kit import SCHEMAS, client_module


@pytest.fixture(scope="module")
def blog(tmp_path_factory):
    return client_module(SCHEMAS / "blog.dbs", tmp_path_factory.mktemp("feed_decisions"), "feed_decisions_blog")


def test_a_live_query_takes_a_delta_at_its_own_offset_as_a_replay(blog):
    """After a reconnect the server may send again the delta the set is already at (`after=`
    is the set's offset, and the Init itself is as of its offset): no change, no on_change."""
    state = blog.LiveState("id")
    state.take({"type": "Init", "records": [{"id": 1, "v": 2}], "offset": 5})
    assert not state.take({"type": "Updated", "offset": 5, "record": {"id": 1, "v": 1}})
    assert state.records == {1: {"id": 1, "v": 2}}
    assert state.take({"type": "Updated", "offset": 6, "record": {"id": 1, "v": 3}})
    assert not state.take({"type": "Removed", "offset": 6, "id": 1})
    assert state.records == {1: {"id": 1, "v": 3}} and state.offset == 6
