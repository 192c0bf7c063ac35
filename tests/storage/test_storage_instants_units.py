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
        # a json field holding the key "model" puts the bytes `"model":"` again later in the
        # payload (a string value's quotes are escaped, a key's are not): the first is the head's
        run(store.insert("User", user(1, name='"model":"Comment"', profile={"model": "BlogPost"})))
        run(store.insert("BlogPost", post(1, author=1)))
        run(store.replace("User", 1, user(1, profile={"model": "Comment", "x": {"model": "BlogPost"}})))
        frames = list(store.frames_after(store.epoch_state.log_base))
        assert frames[0].count(b'"model":"') == 2
        assert [frame_model(f) for f in frames] == ["User", "BlogPost", "User"]
    finally:
        store.close()


def test_each_rule_at_its_edges(tmp_path):
    tenant = create_tenant(str(tmp_path), "t")
    store = open_store(tenant, sync="off")
    try:
        # rule 1 with nothing written: every model at 0, the present
        assert store.watermarks_at("User", 0) == {"User": 0, "BlogPost": 0, "Comment": 0}
        run(store.insert("User", user(1)))  # row 1 of the log
        run(store.insert("User", user(2)))
        run(store.insert("BlogPost", post(1, author=1)))
        run(store.insert("User", user(3)))
        run(store.insert("BlogPost", post(2, author=2)))
        # rule 3, row n + 1 the log's first frame: nothing before it counted
        assert store.watermarks_at("User", 0) == {"User": 0, "BlogPost": 0, "Comment": 0}
        # rule 3, the frames of other models before row n + 1 counted, the ones after not
        assert store.watermarks_at("User", 2) == {"User": 2, "BlogPost": 1, "Comment": 0}
        assert store.watermarks_at("BlogPost", 1) == {"User": 3, "BlogPost": 1, "Comment": 0}
        # rule 1 at exactly the watermark and past it: the present
        present = {"User": 3, "BlogPost": 2, "Comment": 0}
        assert store.watermarks_at("User", 3) == store.watermarks_at("User", 9) == present
        assert store.watermarks_at("Comment", 0) == present
    finally:
        store.close()
    compact_tenant(str(tmp_path), "t")
    store = open_store(tenant, sync="off")
    try:
        run(store.insert("BlogPost", post(3, author=1)))  # the log's first frame after the snapshot
        run(store.insert("User", user(4)))
        base = {"User": 3, "BlogPost": 2, "Comment": 0}
        # rule 2 below the snapshot's count, rule 3 at it (the log read from its start)
        assert store.watermarks_at("User", 2) == base
        assert store.watermarks_at("User", 3) == {"User": 3, "BlogPost": 3, "Comment": 0}
        assert store.watermarks_at("BlogPost", 2) == base
        assert store.watermarks_at("BlogPost", 1) == base
    finally:
        store.close()
