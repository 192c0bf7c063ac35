"""`Store.watermarks_at(model, n)`: every model's watermark at the last moment `model`'s was n.

What `as_of=n` with `expand=` reads the referenced models at (storage/instants.py). Users
and posts are written interleaved; the test keeps every model's watermarks after each row
and checks the answer for every watermark of BlogPost and of User, on the open store, after
a restart (the same epoch, read back from the log) and after a compaction (rule 2: a
watermark inside the snapshot is the snapshot's moment).
"""

from __future__ import annotations

from dbsvc.storage.tenants import compact_tenant, create_tenant
from support.storage import open_store, post, run, user

# The rows written, in order: (model, action, id).
SCRIPT = [
    ("User", "insert", 1),
    ("User", "insert", 2),
    ("BlogPost", "insert", 1),
    ("User", "replace", 1),
    ("User", "replace", 1),
    ("BlogPost", "insert", 2),
    ("BlogPost", "replace", 1),
    ("User", "insert", 3),
    ("Comment", "insert", 1),
    ("User", "replace", 2),
]


def write(store, model: str, action: str, i: int) -> None:
    if model == "User":
        rec = user(i, name=f"name {len(store.table('User').rows)}")
    elif model == "BlogPost":
        rec = post(i, author=1, title=f"title {len(store.table('BlogPost').rows)}")
    else:
        rec = {"id": i, "post_id": 1, "author_id": 2, "body": "hi", "created": "2026-01-01T00:00:00Z"}
    if action == "insert":
        run(store.insert(model, rec))
    else:
        run(store.replace(model, i, rec))


def expected_moments(after_each: list[dict[str, int]], model: str) -> dict[int, dict[str, int]]:
    """n -> the watermarks just before `model`'s row n + 1 (the last moment at n)."""
    moments: dict[int, dict[str, int]] = {}
    for marks in after_each:  # later moments at the same n overwrite earlier ones
        moments[marks[model]] = marks
    return moments


def check(store, after_each: list[dict[str, int]]) -> None:
    for model in ("User", "BlogPost", "Comment"):
        for n, marks in expected_moments(after_each, model).items():
            assert store.watermarks_at(model, n) == marks, (model, n)


def test_watermarks_at_names_the_last_moment_of_a_watermark_open_and_after_a_restart(tmp_path):
    tenant = create_tenant(str(tmp_path), "t")
    store = open_store(tenant, sync="off")
    after_each = [store.watermarks()]
    for step in SCRIPT:
        write(store, *step)
        after_each.append(store.watermarks())
    try:
        # BlogPost at 1: after its first row, up to (not with) its second: users 1, 2 and
        # the two replaces of user 1
        assert store.watermarks_at("BlogPost", 1) == {"User": 4, "BlogPost": 1, "Comment": 0}
        assert store.watermarks_at("BlogPost", 0) == {"User": 2, "BlogPost": 0, "Comment": 0}
        assert store.watermarks_at("BlogPost", 3) == store.watermarks()  # the present
        check(store, after_each)
    finally:
        store.close()
    store = open_store(tenant, sync="off")
    try:
        check(store, after_each)  # the same answers, read back from the log
    finally:
        store.close()


def test_a_watermark_inside_the_snapshot_is_the_snapshots_moment(tmp_path, stores):
    tenant = create_tenant(str(tmp_path), "t")
    store = stores(tenant, sync="off")
    for step in SCRIPT:
        write(store, *step)
    store.close()
    compact_tenant(str(tmp_path), "t")
    store = stores(tenant, sync="off")
    try:
        base = {"User": 3, "BlogPost": 2, "Comment": 1}  # live records: one row each
        assert store.watermarks() == base
        assert store.watermarks_at("BlogPost", 1) == base
        assert store.watermarks_at("User", 0) == base
        write(store, "User", "replace", 3)
        write(store, "BlogPost", "replace", 2)
        write(store, "User", "replace", 1)
        assert store.watermarks_at("BlogPost", 2) == {"User": 4, "BlogPost": 2, "Comment": 1}
        assert store.watermarks_at("User", 4) == {"User": 4, "BlogPost": 3, "Comment": 1}
        assert store.watermarks_at("User", 2) == base
    finally:
        store.close()
