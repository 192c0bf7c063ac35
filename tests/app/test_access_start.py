"""A schema with access rules refuses to start without a token guard: exit 2, one line
saying why and what to set, nothing touched (dbsvc/service.py, `require_guard_for_rules`)."""

from __future__ import annotations

import types

import pytest

from dbsvc.errors import ConfigError
from dbsvc.exits import EXIT_USAGE, run_reporting
from dbsvc.service import server_config
from support.storage import BLOG


def module(rules: bool) -> types.SimpleNamespace:
    return types.SimpleNamespace(RUNTIME=BLOG.RUNTIME, AUTH=BLOG.AUTH, SCHEMA_PATH=BLOG.SCHEMA_PATH, RULES=rules)


def test_a_schema_with_rules_and_no_guard_is_a_configuration_error_naming_what_to_set(tmp_path, capsys):
    environ = {"SERVICE_DATA": str(tmp_path / "data")}
    with pytest.raises(ConfigError, match=r"access rules .* no token guard is configured.*SERVICE_JWT_PUBKEY"):
        server_config(module(True), environ)
    assert run_reporting(lambda: server_config(module(True), environ) and 0) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dbsvc: error: the schema has access rules")
    assert not (tmp_path / "data").exists()  # nothing touched


def test_a_schema_without_rules_starts_without_a_guard_as_before(tmp_path):
    config = server_config(module(False), {"SERVICE_DATA": str(tmp_path / "data")})
    assert config.auth is None
