"""The background JWKS refresher (`Guard.start`): how long it waits between fetches, on a
fake monotonic clock. After a good fetch it sleeps until the keys' max-age runs out; after
a failed one, `jwks_min_interval` from that attempt (also an attempt made on demand just
before it started); and `start()` twice runs one refresher, which `close()` stops.
Found by mutation testing (docs/mutation.md): the real-time tests only see that keys
change "within a few ticks", never the length of a wait.

`asyncio.sleep` is replaced by a recorder that moves the fake clock on by the delay asked
for and returns at once, until the wanted number of sleeps; then it parks for good."""

from __future__ import annotations

import asyncio
import socket

from dbsvc.auth import Guard
from support.authkit import jwk_of

REAL_SLEEP = asyncio.sleep


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/jwks.json"


class Clock:
    """A monotonic clock that moves only when the refresher sleeps."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self.wanted = 0
        self.reached = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float, result: object = None) -> object:
        self.sleeps.append(delay)
        self.now += delay
        if len(self.sleeps) >= self.wanted:
            self.reached.set()
            await REAL_SLEEP(3600)
        await REAL_SLEEP(0)
        return result


def _guard(make_guard, url: str, clock: Clock) -> Guard:
    config = make_guard("ES256", jwks_url=url, jwks_min_interval=10.0, jwks_timeout=5.0).config
    return Guard(config, monotonic=clock)


async def _sleeps_of(guard: Guard, clock: Clock, count: int) -> list[float]:
    clock.wanted = count
    await guard.start()
    await asyncio.wait_for(clock.reached.wait(), 60)
    guard.close()
    return clock.sleeps


def test_after_a_good_fetch_the_refresher_sleeps_until_the_keys_max_age(make_guard, keys, jwks_server, monkeypatch):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=300)
    clock = Clock()
    guard = _guard(make_guard, jwks_server.url(), clock)

    async def scenario() -> list[float]:
        monkeypatch.setattr(asyncio, "sleep", clock.sleep)
        return await _sleeps_of(guard, clock, 2)

    assert asyncio.run(scenario()) == [300.0, 300.0]
    assert jwks_server.hits["/jwks.json"] == 2
    assert guard.has_keys


def test_after_a_failed_fetch_the_refresher_retries_after_the_minimum_interval(make_guard, monkeypatch):
    clock = Clock()
    guard = _guard(make_guard, _closed_port_url(), clock)

    async def scenario() -> list[float]:
        monkeypatch.setattr(asyncio, "sleep", clock.sleep)
        return await _sleeps_of(guard, clock, 2)

    assert asyncio.run(scenario()) == [10.0, 10.0]
    assert guard.fetches == 2 and not guard.has_keys


def test_the_refresher_counts_the_interval_from_an_attempt_made_on_demand(make_guard, monkeypatch):
    clock = Clock()
    guard = _guard(make_guard, _closed_port_url(), clock)

    async def scenario() -> list[float]:
        await guard.refresh_keys()  # a request's fetch at 1000 s, refused
        clock.now = 1004.0  # the refresher starts 4 s later
        monkeypatch.setattr(asyncio, "sleep", clock.sleep)
        return await _sleeps_of(guard, clock, 2)

    # No fetch at 1004 (too soon), one at 1010, the next at 1020.
    assert asyncio.run(scenario()) == [6.0, 10.0]
    assert guard.fetches == 2


def test_start_twice_runs_one_refresher_and_close_stops_it(make_guard, keys, jwks_server, monkeypatch):
    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=300)
    clock = Clock()
    guard = _guard(make_guard, jwks_server.url(), clock)

    async def scenario() -> list[float]:
        monkeypatch.setattr(asyncio, "sleep", clock.sleep)
        clock.wanted = 1
        await guard.start()
        await guard.start()
        await asyncio.wait_for(clock.reached.wait(), 60)
        for _ in range(20):  # let a second refresher, if any, reach its sleep
            await REAL_SLEEP(0)
        guard.close()
        return clock.sleeps

    assert asyncio.run(scenario()) == [300.0]
    assert guard.fetches == 1


def test_with_a_refresher_running_fresh_keys_verify_new_tokens_at_once(make_guard, keys, jwks_server, monkeypatch):
    # The refresher fetches when the keys' max-age runs out; until then, a new token is
    # verified with the keys held, even once another fetch would be allowed.
    from support.authkit import mint

    jwks_server.serve_keys([jwk_of(keys["p256"], "ES256", "k1")], max_age=300)
    clock = Clock()
    guard = _guard(make_guard, jwks_server.url(), clock)

    async def scenario() -> dict:
        monkeypatch.setattr(asyncio, "sleep", clock.sleep)
        clock.wanted = 1
        await guard.start()
        await asyncio.wait_for(clock.reached.wait(), 60)
        clock.now = 1000.0 + 20  # past jwks_min_interval, within max-age
        claims = guard.verify(f"Bearer {mint(keys['p256'], 'ES256', kid='k1')}")
        guard.close()
        return claims

    assert asyncio.run(scenario())["tenant"] == "acme"
    assert guard.fetches == 1
