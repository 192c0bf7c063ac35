"""storage/tenants.py's older operations at the unit, over real directories: the name rule
and its refusal word for word, `create_tenant` (its mode, a hidden `.dropping-*` left by an
interrupted drop cleaned up, "already exists"), `list_tenants` (only tenant-named
directories, sizes to the byte, the lock's holder), and `compact_tenant` (a missing tenant,
one never opened, one held by a writer, the retention default and an explicit budget).

No fixture: the mutation runner (`bench/mutation_inprocess.py`, docs/mutation.md "config.py,
storage/tenants.py, workers/run.py") calls these functions directly; each makes its own
temporary directory, removed when the test ends (`with TemporaryDirectory`: an `atexit`
cleanup never ran in a killed run, and /tmp gathered them).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

import pytest

from dbsvc.errors import TenantError, TenantLocked
from dbsvc.storage import files
from dbsvc.storage.files import FileOps
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.snapshotreader import decode_snapshot
from dbsvc.storage.tenants import compact_tenant, create_tenant, list_tenants, tenant_dir, validate_name
from support.storage import open_store, run, user

REFUSAL = "expected 1 to 63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"


class SyncedDirectories(FileOps):
    """Records the directories storage fsyncs (files.use: the test layer of every file operation)."""

    def __init__(self) -> None:
        self.synced: list[str] = []

    def fsync_dir(self, path: str) -> None:
        self.synced.append(path)
        super().fsync_dir(path)


def write(path: str, size: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(b"x" * size)


# --- names


@pytest.mark.parametrize("name", ["a", "0", "shop", "a-b_c", "9lives", "a" * 63])
def test_a_tenant_name_of_1_to_63_lowercase_characters_is_accepted(name):
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "A", "Shop", "-a", "_a", ".a", "a/b", "..", "a b", "a" * 64, "é"])
def test_any_other_tenant_name_is_refused_word_for_word(name):
    with pytest.raises(TenantError) as refused:
        validate_name(name)
    assert str(refused.value) == f"invalid tenant name {name!r}: {REFUSAL}"


def test_a_name_that_is_no_string_is_refused_too():
    with pytest.raises(TenantError) as refused:
        validate_name(None)  # type: ignore[arg-type]
    assert str(refused.value) == f"invalid tenant name None: {REFUSAL}"


def test_the_tenant_directory_is_the_names_child_of_the_absolute_data_directory():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        assert tenant_dir(root, "shop") == os.path.join(root, "shop")
        here = os.getcwd()
        assert tenant_dir("rel/data", "shop") == os.path.join(here, "rel", "data", "shop")
        with pytest.raises(TenantError):
            tenant_dir(root, "../shop")


# --- create


def test_create_makes_the_data_directory_and_a_tenant_of_mode_0755_whatever_the_umask():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as made:
        root = os.path.join(made, "not", "yet")
        before = os.umask(0)
        try:
            path = create_tenant(root, "shop")
        finally:
            os.umask(before)
        assert path == os.path.join(root, "shop")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
        assert os.listdir(path) == []


def test_create_makes_the_tenant_durable_and_a_new_data_directory_too():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as parent:
        root = os.path.join(parent, "data")
        with files.use(SyncedDirectories()) as first:
            create_tenant(root, "a")
        assert first.synced == [os.path.join(root, "a"), root, parent]  # the data directory's own entry too
        with files.use(SyncedDirectories()) as second:
            create_tenant(root, "b")
        assert second.synced == [os.path.join(root, "b"), root]


def test_create_refuses_an_existing_tenant_naming_its_path():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = create_tenant(root, "shop")
        with pytest.raises(TenantError) as refused:
            create_tenant(root, "shop")
        assert str(refused.value) == f"tenant 'shop' already exists at {path!r}"


def test_create_removes_what_an_interrupted_drop_left_and_nothing_else():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        write(os.path.join(root, ".dropping-old-1a2b3c4d", "workers", "reader-1", "log"), 10)
        write(os.path.join(root, ".dropping-stray-file"), 3)  # not a directory: left, the create goes on
        write(os.path.join(root, ".other", "keep"), 1)
        os.makedirs(os.path.join(root, "kept"))
        create_tenant(root, "shop")
        assert sorted(os.listdir(root)) == [".dropping-stray-file", ".other", "kept", "shop"]


# --- list


def test_list_shows_only_tenant_named_directories_in_name_order_with_their_sizes():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        for name in ("b", "a"):
            create_tenant(root, name)
        write(os.path.join(root, "a", "log"), 100)
        write(os.path.join(root, "a", "snapshot"), 20)
        write(os.path.join(root, "a", "workers", "reader-1", "log"), 7)
        os.symlink("/etc/passwd", os.path.join(root, "b", "link"))  # counted as the link, not its target
        os.makedirs(os.path.join(root, "-dash"))  # sorts first: skipped, the listing goes on
        os.makedirs(os.path.join(root, "Upper"))
        os.makedirs(os.path.join(root, ".dropping-a-00"))
        write(os.path.join(root, "c"), 5)  # a tenant name, but a file
        infos = list_tenants(root)
        assert [(t.name, t.path, t.size_bytes, t.locked, t.holder_pid) for t in infos] == [
            ("a", os.path.join(root, "a"), 127, False, None),
            ("b", os.path.join(root, "b"), len("/etc/passwd"), False, None),
        ]


def test_list_of_a_missing_data_directory_is_empty_and_a_held_tenant_names_its_holder():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as made:
        assert list_tenants(os.path.join(made, "missing")) == []
        root = made
        path = create_tenant(root, "shop")
        lock = WriterLock.acquire(path)
        try:
            (info,) = list_tenants(root)
            assert (info.locked, info.holder_pid) == (True, os.getpid())
        finally:
            lock.release()


# --- compact


def test_compact_of_a_missing_tenant_says_how_to_create_it():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        with pytest.raises(TenantError) as refused:
            compact_tenant(root, "shop")
        assert (
            str(refused.value)
            == f"tenant 'shop' does not exist under {root!r}: create it with `dbsvc tenant create shop`"
        )
        with pytest.raises(TenantError):
            compact_tenant(root, "../shop")


def test_compact_of_a_tenant_never_opened_does_nothing_and_says_so():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = create_tenant(root, "shop")
        assert compact_tenant(root, "shop") == "tenant 'shop' has never been opened; nothing to compact"
        assert os.listdir(path) == ["LOCK"]  # the lock it took; no log made


def filled(root: str) -> str:
    """Tenant `shop` with 3 users, one replaced twice and one deleted: 5 log rows, 2 live."""
    path = create_tenant(root, "shop")
    store = open_store(path, sync="off")
    try:

        async def go() -> None:
            for i in (1, 2, 3):
                await store.insert("User", user(i))
            await store.replace("User", 1, user(1, name="again"))
            await store.delete("User", 2)

        run(go())
    finally:
        store.close()
    return path


def test_compact_keeps_the_live_records_and_retains_the_old_rows_by_default():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = filled(root)
        report = compact_tenant(root, "shop")
        assert re.fullmatch(
            rf"compacted {re.escape(path)}: 5 log rows -> 2 live records, head offset 5, new epoch [0-9a-f]{{32}}, "
            r"retained \d+ bytes for replicas \(offsets after 0\)",
            report,
        ), report
        store = open_store(path, sync="off")
        try:
            assert [store.get("User", i)[0] is not None for i in (1, 2, 3)] == [True, False, True]
        finally:
            store.close()


def test_compact_with_no_retention_budget_retains_nothing():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = filled(root)
        report = compact_tenant(root, "shop", retain_bytes=0)
        assert re.fullmatch(
            rf"compacted {re.escape(path)}: 5 log rows -> 2 live records, head offset 5, new epoch [0-9a-f]{{32}}",
            report,
        )


def test_compact_is_refused_while_a_writer_holds_the_tenant():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = filled(root)
        lock = WriterLock.acquire(path)
        try:
            with pytest.raises(TenantLocked):
                compact_tenant(root, "shop")
        finally:
            lock.release()
        assert compact_tenant(root, "shop").startswith(f"compacted {path}: ")


def test_compact_writes_every_model_of_the_schema_in_its_order_even_one_never_written():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = filled(root)
        compact_tenant(root, "shop")  # the schema's description comes from the tenant's schema.json
        with open(os.path.join(path, "snapshot"), "rb") as snapshot:
            image = decode_snapshot(os.path.join(path, "snapshot"), snapshot.read())
        assert [m.name for m in image.models] == ["User", "BlogPost", "Comment"]
        (users,) = [m for m in image.models if m.name == "User"]
        assert users.fields[:3] == ["id", "email", "name"] and len(users.rows) == 2


def test_compact_finishes_a_compaction_interrupted_after_its_commit_point():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = filled(root)
        compact_tenant(root, "shop", retain_bytes=0)
        os.rename(os.path.join(path, "log"), os.path.join(path, "log.new"))  # as a crash before the last rename
        report = compact_tenant(root, "shop", retain_bytes=0)
        assert re.fullmatch(
            rf"compacted {re.escape(path)}: 0 log rows -> 2 live records, head offset 5, new epoch [0-9a-f]{{32}}",
            report,
        )
        assert not os.path.exists(os.path.join(path, "log.new"))


def test_compact_obeys_the_fault_plan_of_the_environment():
    with tempfile.TemporaryDirectory(prefix="tenants-units-") as root:
        path = filled(root)
        os.environ["DBSVC_FAULT"] = "compact:1:EIO"
        try:
            with pytest.raises(OSError) as failed:
                compact_tenant(root, "shop")
        finally:
            del os.environ["DBSVC_FAULT"]
        assert str(failed.value).endswith("(injected by DBSVC_FAULT compact:1)")
        assert compact_tenant(root, "shop", retain_bytes=0).startswith(
            f"compacted {path}: 5 log rows -> 2 live records"
        )
