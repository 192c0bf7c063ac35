"""A store opened and closed again and again in one process keeps the collector's permanent
generation the same size: each open freezes what it loaded (recovery.py), and the garbage a
closed and dropped store left (its commit queue's cycles) is collected before that freeze,
not frozen with it. A store still referenced while the next one opens is frozen with it (the
power-loss harness drops its stores' frozen state between seeds: support/powerloss_run.py). Before: ~412 objects (~90 KB) more frozen for good each open, and the slow run of
the power-loss seeds (10,000 opens in one worker) grew to 10 GB."""

from __future__ import annotations

import gc
import os

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
