"""`watermarks_at`'s three rules and `frame_model` one by one (dbsvc/storage/instants.py),
on a real store's log and snapshot: the edges of each rule (a watermark equal to the
model's, one below it, the snapshot's own count), and the model name read from a frame's
fixed head whatever the payload holds after it."""

from __future__ import annotations

from dbsvc.storage.instants import frame_model
from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.storage import open_store, post, run, user


def test_frame_model_reads_the_model_of_each_frame_of_the_log(tmp_path):
    tenant = create_tenant(str(tmp_path), "t")
    store = open_store(tenant, sync="off")
    try:
        run(store.insert("User", user(1, name='"model":"BlogPost"')))  # the same bytes later on
        run(store.insert("BlogPost", post(1, author=1)))
        frames = list(store.frames_after(store.epoch_state.log_base))
        assert [frame_model(f) for f in frames] == ["User", "BlogPost"]
    finally:
        store.close()
