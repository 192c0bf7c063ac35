"""The generated Python client's feed decisions that tests/clients/test_feed_state.py went
around (hand mutations of docs/mutation.md, "dbsvc/clients/..." section, session 6).

Sans-IO like test_feed_state.py: a generated client's LiveState fed frames shaped as the
server sends them (docs/realtime.md), and its FeedRunner's loop (backoff, 410, a refused
token) run for real over scripted handshakes in place of the `websockets` connect function,
with its stop event recording the backoff waits instead of sleeping them.
"""

from __future__ import annotations

import json
import threading

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


class Handshakes:
    """A scripted stand-in for the `websockets` connect function a FeedRunner calls: each
    connection attempt takes the next step, a list of messages (a socket that delivers
    them and closes) or an HTTP refusal (status, problem). The runner's own decisions (the
    backoff, 410, a refused token) run for real; only the network is scripted."""

    def __init__(self, steps, runner_box):
        self.steps = list(steps)
        self.urls = []
        self.runner_box = runner_box

    def __call__(self, url, **_options):
        self.urls.append(url)
        if not self.steps:
            self.runner_box[0].stopping.set()
            raise OSError("script over")
        step = self.steps.pop(0)
        if isinstance(step, tuple):
            status, problem = step
            error = Exception(f"refused {status}")
            error.response = type("Response", (), {"status_code": status, "body": json.dumps(problem).encode()})()
            raise error
        return Socket(step)


class Socket:
    def __init__(self, messages):
        self.messages = [json.dumps(m) for m in messages]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(self.messages)

    def close(self):
        pass


class Waits(threading.Event):
    """The runner's stop event, recording each backoff wait instead of sleeping it."""

    def __init__(self):
        super().__init__()
        self.waits = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return self.is_set()


def runner(blog, steps, token="fixed"):
    box = []
    frames, gone, errors = [], [], []
    feed = blog.FeedRunner(
        blog.Transport("http://127.0.0.1:9", token),
        "/subscribe/user",
        [],
        lambda: 7,
        frames.append,
        gone.append,
        errors.append,
    )
    box.append(feed)
    feed.connect = Handshakes(steps, box)
    feed.stopping = Waits()
    feed.run()
    return feed, frames, gone, errors


def test_the_backoff_starts_over_after_a_connection_that_brought_frames(blog):
    away = {"code": "unavailable", "status": 503}
    feed, frames, _, errors = runner(blog, [(503, away), (503, away), [{"offset": 8}], (503, away)])
    assert frames == [{"offset": 8}] and errors == []
    first, second, after_frames, last = feed.stopping.waits[:4]
    assert 0.025 <= first <= 0.05 and 0.05 <= second <= 0.1  # 50 ms doubling, jittered down to half
    assert 0.025 <= after_frames <= 0.05 and 0.05 <= last <= 0.1  # frames came: 50 ms again


def test_offset_gone_restarts_the_feed_at_once_and_says_so(blog):
    gone_problem = {"code": "offset_gone", "status": 410, "detail": "offset 7 is gone"}
    feed, frames, gone, errors = runner(blog, [(410, gone_problem), [{"offset": 9}]])
    assert [type(g).__name__ for g in gone] == ["OffsetGoneError"] and errors == []
    assert frames == [{"offset": 9}] and feed.connects == 1
    assert len(feed.stopping.waits) == 2  # after the frames and after the script's end: none before the retry
    assert len(feed.connect.urls) == 3 and feed.error is None


def test_a_refused_fixed_token_ends_the_feed_and_a_token_function_is_asked_again(blog):
    refused = {"code": "unauthorized", "status": 401, "detail": "token expired"}
    feed, frames, _, errors = runner(blog, [(401, refused), [{"offset": 8}]])
    assert [type(e).__name__ for e in errors] == ["UnauthorizedError"] and frames == []
    assert feed.error is errors[0] and len(feed.connect.urls) == 1
    feed, frames, _, errors = runner(blog, [(401, refused), [{"offset": 8}]], token=lambda: "fresh")
    assert errors == [] and frames == [{"offset": 8}] and len(feed.connect.urls) == 3
