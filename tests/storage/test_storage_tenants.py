"""Tenant tool, the writer lock and a second writer through the real command line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dbsvc.errors import TenantError, TenantLocked
from dbsvc.storage.lock import probe_lock
from dbsvc.storage.tenants import create_tenant, drop_tenant, list_tenants, tenant_dir
from support.storage import ROOT, run, user
from support.tree import dir_image

HOLDER = os.path.join(os.path.dirname(__file__), "holder_child.py")


@pytest.mark.parametrize("name", ["", "..", ".", "a/b", "../x", "/abs", "-x", "_x", "A", "a" * 64, "a b", "é", "a\0"])
def test_invalid_tenant_names_are_refused(tmp_path, name):
    with pytest.raises(TenantError, match="invalid tenant name"):
        create_tenant(str(tmp_path), name)
    with pytest.raises(TenantError):
        tenant_dir(str(tmp_path), name)


def test_create_list_drop(tmp_path, stores):
    data = str(tmp_path / "data")
    path = create_tenant(data, "a1")
    create_tenant(data, "b_2-c")
    with pytest.raises(TenantError, match="already exists"):
        create_tenant(data, "a1")
    s = stores(path)
    run(s.insert("User", user(1)))
    infos = {i.name: i for i in list_tenants(data)}
    assert set(infos) == {"a1", "b_2-c"}
    assert infos["a1"].locked and infos["a1"].holder_pid == os.getpid() and infos["a1"].size_bytes > 40
    assert not infos["b_2-c"].locked
    with pytest.raises(TenantLocked, match=f"process {os.getpid()}"):
        drop_tenant(data, "a1")
    s.close()
    drop_tenant(data, "a1")
    assert [i.name for i in list_tenants(data)] == ["b_2-c"]
    with pytest.raises(TenantError, match="does not exist"):
        drop_tenant(data, "a1")


def test_drop_is_refused_while_a_workers_reader_serves_the_tenant_whose_lock_is_free(tmp_path, stores):
    """`serve --workers`: while the writer restarts, the tenant's own lock is free but a
    reader still holds its copy's (workers/reader-K). The drop is refused, naming the
    reader, and nothing is removed; once no reader holds it, the drop goes through."""
    data = str(tmp_path)
    path = create_tenant(data, "shop")
    s = stores(path)
    run(s.insert("User", user(1)))
    s.close()  # the writer is gone
    reader = os.path.join(path, "workers", "reader-2")
    os.makedirs(os.path.join(path, "workers", "reader-1"))  # a copy never served: no LOCK
    os.makedirs(reader)
    held = stores(reader)  # a reader serving its copy
    before = dir_image(tmp_path)
    with pytest.raises(TenantLocked) as refused:
        drop_tenant(data, "shop")
    assert refused.value.pid == os.getpid() and refused.value.path == path
    assert str(refused.value).endswith("; reader-2 of `serve --workers` serves it while its writer restarts")
    assert dir_image(tmp_path) == before  # the tenant's files untouched, every lock released
    assert not probe_lock(path)[0] and not probe_lock(os.path.join(path, "workers", "reader-1"))[0]
    held.close()
    drop_tenant(data, "shop")
    assert list_tenants(data) == []


def test_second_writer_in_process_gets_the_holder_pid(tenant, stores):
    s = stores(tenant)
    with pytest.raises(TenantLocked) as info:
        stores(tenant)
    assert info.value.pid == os.getpid()
    s.close()
    stores(tenant).close()


def _cli(*args, env):
    return subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        timeout=60,
    )


@pytest.fixture
def held(tenant):
    child = subprocess.Popen([sys.executable, HOLDER, tenant], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = child.stdout.readline()
    assert ready.startswith("READY")
    try:
        yield tenant, int(ready.split()[1])
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_cli_refuses_a_held_tenant_with_exit_2_and_touches_nothing(held):
    tenant, pid = held
    data, name = os.path.dirname(tenant), os.path.basename(tenant)
    env = {**os.environ, "SERVICE_DATA": data, "SERVICE_TENANT": name}
    before = dir_image(tenant)
    assert probe_lock(tenant) == (True, pid)
    for args in (["compact"], ["tenant", "drop", name, "--yes"]):
        res = _cli(*args, env=env)
        assert res.returncode == 2, (args, res.stderr)
        assert f"locked by process {pid}" in res.stderr
    listed = _cli("tenant", "list", env=env)
    assert listed.returncode == 0 and f"held by pid {pid}" in listed.stdout
    assert dir_image(tenant) == before


def test_cli_serve_refuses_a_held_tenant(held):
    tenant, pid = held
    data, name = os.path.dirname(tenant), os.path.basename(tenant)
    env = {**os.environ, "SERVICE_DATA": data, "SERVICE_TENANT": name, "SERVICE_PORT": "0"}
    before = dir_image(tenant)
    res = _cli("serve", "schemas/blog.dbs", env=env)
    assert res.returncode == 2, res.stderr
    assert str(pid) in res.stderr
    assert dir_image(tenant) == before


def test_cli_tenant_commands(tmp_path):
    env = {**os.environ, "SERVICE_DATA": str(tmp_path / "d")}
    assert _cli("tenant", "create", "shop", env=env).returncode == 0
    bad = _cli("tenant", "create", "../evil", env=env)
    assert bad.returncode != 0 and "invalid tenant name" in bad.stderr
    assert not os.path.exists(tmp_path / "evil")
    assert "shop\t" in _cli("tenant", "list", env=env).stdout
    assert _cli("tenant", "drop", "shop", env=env).returncode == 2  # no --yes
    assert _cli("tenant", "drop", "shop", "--yes", env=env).returncode == 0
    assert _cli("tenant", "list", env=env).stdout == ""
