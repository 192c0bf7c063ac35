"""Enum values are the generated module's own member strings (`members_m__f`,
`runtime.shared`) wherever storage holds them as objects, its index keys, whichever way a
record arrives: a write, the log replayed, a snapshot loaded. A million users sorted by
role then share three role strings instead of holding a million."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from dbsvc.errors import CorruptLog
from dbsvc.runtime import shared
from dbsvc.storage.tenants import compact_tenant
from support.storage import BLOG, check_indexes, open_store, run, snapshot_in_format_1, user

USER = BLOG.BY_NAME["User"]
ROLE = USER.fields.index("role")
MEMBERS = USER.shared_values[ROLE]


def fresh(text: str) -> str:
    """An equal string that is not the member object (as json.loads makes them)."""
    return "".join(list(text))


def _stored_roles(store) -> dict[int, str]:
    """The key object the role index holds for each user."""
    buckets = store.tables["User"].hashes["role"].buckets
    return {i: role for role, ids in buckets.items() for i in ids}


def test_the_generated_module_names_each_member_once():
    assert MEMBERS == {"admin": "admin", "editor": "editor", "reader": "reader"}
    assert fresh("editor") is not MEMBERS["editor"]
    row = USER.row(user(1, role=fresh("editor")))
    assert row[ROLE] == "editor" and row[ROLE] is MEMBERS["editor"]
    assert USER.row(user(2, role=None))[ROLE] is None  # nullable enums keep their null


@pytest.mark.parametrize("value", ["ghost", ["a", "list"], {"an": "object"}, 7])
def test_a_value_that_is_not_a_member_is_stored_as_it_is(value):
    # Replay and migrations store what the log holds without checking it.
    assert shared(MEMBERS, value) is value


def test_writes_replay_and_snapshots_all_store_the_member_objects(tenant, stores):
    s = stores(tenant)

    async def go():
        for i in range(1, 7):
            await s.insert("User", user(i, role=fresh(("admin", "editor", "reader")[i % 3])))

    run(go())
    assert all(role is MEMBERS[role] for role in _stored_roles(s).values())
    s.close()
    s = stores(tenant)  # the log replayed
    try:
        roles = _stored_roles(s)
        assert all(role is MEMBERS[role] for role in roles.values()) and len(roles) == 6
    finally:
        s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    s = stores(tenant)  # the snapshot loaded
    try:
        assert _stored_roles(s) == roles
        assert all(role is MEMBERS[role] for role in _stored_roles(s).values())
        check_indexes(s)
    finally:
        s.close()


def _compacted_with_roles(tenant, roles: dict[int, object]) -> bytes:
    """Four users compacted, then their snapshot rewritten (valid CRC) with `roles` by id."""
    s = open_store(tenant)

    async def go():
        for i in range(1, 5):
            await s.insert("User", user(i))

    run(go())
    s.close()
    compact_tenant(os.path.dirname(tenant), os.path.basename(tenant))
    path = os.path.join(tenant, "snapshot")
    lines = snapshot_in_format_1(path).split(b"\n")  # rows read by parsing them
    rows = json.loads(lines[1][9:])  # the header lists User first
    for row in rows:
        row[ROLE] = roles.get(row[0], row[ROLE])
    body = json.dumps(rows, separators=(",", ":")).encode()
    lines[1] = b"%08x " % zlib.crc32(body) + body
    data = b"\n".join(lines)
    with open(path, "wb") as f:
        f.write(data)
    return data


def test_a_snapshot_holding_a_role_that_is_not_a_member_loads_it_as_it_is(tenant):
    _compacted_with_roles(tenant, {2: "ghost"})
    s = open_store(tenant)
    try:
        roles = _stored_roles(s)
        assert roles == {1: "reader", 2: "ghost", 3: "reader", 4: "reader"}
        assert roles[1] is MEMBERS["reader"] and roles[4] is MEMBERS["reader"]
    finally:
        s.close()


def test_a_snapshot_holding_a_value_no_index_can_take_is_refused_and_kept(tenant):
    """A list where the role index needs a key: CorruptLog naming the User line (it was a
    TypeError out of the index build), and the file as it was."""
    data = _compacted_with_roles(tenant, {3: ["not", "hashable"]})
    path = os.path.join(tenant, "snapshot")
    with pytest.raises(CorruptLog) as info:
        open_store(tenant)
    assert info.value.path == path and info.value.offset == data.index(b"\n") + 1
    assert "snapshot rows of User hold a value its indexes cannot take" in info.value.reason
    assert "unhashable type: 'list'" in info.value.reason
    assert open(path, "rb").read() == data
