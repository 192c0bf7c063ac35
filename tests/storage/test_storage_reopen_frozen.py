"""What the collector's permanent generation keeps (gc.freeze): only what was alive.

A store opened and closed again and again in one process keeps the permanent generation
the same size: each open freezes what it loaded (recovery.py), and the garbage a closed and
dropped store left (its commit queue's cycles) is collected before that freeze, not frozen
with it, even once it has aged into the oldest generation (hence a full collection). A store still referenced while the next one opens is frozen with it (the
power-loss harness drops its stores' frozen state between seeds: support/powerloss_run.py).
Before: ~412 objects (~90 KB) more frozen for good each open, and the slow run of the
power-loss seeds (10,000 opens in one worker) grew to 10 GB.

An online compaction freezes twice (compactor.py, at its cut and after its switch): the
cyclic garbage of the moment in the young generations (a served request's objects, tasks,
connections) is collected first, not frozen for good at every compaction (wt-gcf: ~380
objects more a compaction in a served primary before)."""

from __future__ import annotations

import asyncio
import gc
import os
import weakref

from dbsvc.storage.tenants import create_tenant
from support.storage import open_store, run, user


def test_opening_a_closed_store_again_freezes_nothing_more(tmp_path):
    tenant = create_tenant(os.path.join(tmp_path, "data"), "t")
    store = open_store(tenant)
    for i in range(20):
        run(store.insert("User", user(None, email=f"u{i}@x.io")))
    store.close()
    del store  # dropped before the next open, as a store's last user does
    counts = []
    for _ in range(12):
        again = open_store(tenant)
        assert again.live_counts()["User"] == 20  # the records are all there each time
        again.close()
        del again
        counts.append(gc.get_freeze_count())
    assert counts[-1] - counts[1] < 100, counts  # before: +412 an open


def test_an_open_collects_a_closed_store_whose_cycles_aged_into_the_oldest_generation(tmp_path):
    # Why the open's collection is a full one (recovery.py `load`): a store that lived a while
    # (a follower before its rebootstrap) has its commit queue's cycles in the oldest
    # generation; a young-only collection left them, and the freeze kept the whole closed
    # store for good (1,000,000 posts: RSS 394 -> 734 MB after the second open; session 18, wt-tidy).
    tenant = create_tenant(os.path.join(tmp_path, "data"), "t")
    store = open_store(tenant)
    run(store.insert("User", user(None, email="u@x.io")))
    gone = weakref.ref(store)
    gc.collect()
    gc.collect()  # what the store made after its open's freeze now sits in the oldest generation
    store.close()
    del store
    again = open_store(tenant)
    try:
        assert gone() is None, "the closed store was frozen with the new one"
    finally:
        again.close()


class Cycle:
    """A cycle no one refers to: garbage only the cyclic collector frees."""

    def __init__(self) -> None:
        self.me = self


def test_an_online_compaction_freezes_none_of_the_garbage_made_around_it(tmp_path):
    tenant = create_tenant(os.path.join(tmp_path, "data"), "t")
    store = open_store(tenant)
    gone: list[weakref.ref[Cycle]] = []

    def garbage() -> None:
        made = Cycle()
        gone.append(weakref.ref(made))

    async def go() -> None:
        for i in range(1, 21):
            await store.insert("User", user(i))
        for round_ in range(3):
            garbage()  # in the young generation at the cut's freeze
            task = store.compact_now()
            n = 0
            while not task.done():  # and while the compaction runs, up to the switch's freeze
                n += 1
                garbage()
                await store.replace("User", 1 + n % 20, user(1 + n % 20, name=f"r{round_}-{n}"))
                await asyncio.sleep(0.001)
            await task
        assert store.stats()["compactions"] == 3

    # The collector runs only when asked (a young collection may otherwise come first by
    # chance): what the compaction's own collections leave is frozen for good.
    was = gc.isenabled()
    gc.disable()
    try:
        run(go())
    finally:
        if was:
            gc.enable()
    store.close()
    gc.collect()
    kept = sum(ref() is not None for ref in gone)
    assert kept == 0, f"{kept} of {len(gone)} garbage cycles frozen for good"
