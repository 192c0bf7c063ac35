"""`dbsvc replicate` as a subprocess refused by a real server: a guarded server takes the
token from the flag or the environment and ends the run on a refused one (one guarded
server shared by the module), and a server without replication ends it with 404."""

from __future__ import annotations

import pytest

from support.consumer_kit import Consumer, base, follow, head, server_frames, write_users
from support.server import ROOT, server_pool


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """One guarded blog server with two users, shared by the tests that only read it (a
    consumer with a token, or refused one); the teardown fails the module if its head moved."""
    from support.idp import TestIdp

    idp = TestIdp(tmp_path_factory.mktemp("guarded"))
    with server_pool(idp.data_dir()) as pool:
        server = pool(env=idp.server_env())
        token = idp.token
        write_users(server.port, 2, headers={"Authorization": f"Bearer {token()}"})
        yield server, token
        assert server.proc.poll() is None, "a test stopped the shared server"
        assert head(server) == 2, "a test wrote to the shared server"


def test_a_guarded_server_takes_the_token_from_the_flag_or_the_environment(guarded, tmp_path):
    server, token = guarded
    by_flag, by_env = tmp_path / "flag.log", tmp_path / "env.log"
    follow(tmp_path, server, by_flag, "--token", token())
    follow(tmp_path, server, by_env, env={"SERVICE_TOKEN": token()})
    assert (
        by_flag.read_bytes()
        == by_env.read_bytes()
        == server_frames(server, 0, 2, additional_headers={"Authorization": f"Bearer {token()}"})
    )


@pytest.mark.parametrize(
    "how, status",
    [("none", "HTTP 401 unauthorized"), ("garbage", "HTTP 401 unauthorized"), ("foreign", "HTTP 403 forbidden")],
)
def test_a_refused_token_ends_the_run_with_status_1(guarded, tmp_path, how, status):
    server, token = guarded
    args = {"none": [], "garbage": ["--token", "not.a.jwt"], "foreign": ["--token", token(tenant="other")]}[how]
    consumer = Consumer(tmp_path, base(server), "--out", str(tmp_path / "r.log"), *args)
    assert consumer.wait() == 1
    assert status in consumer.stderr and "--token or SERVICE_TOKEN" in consumer.stderr
    assert (tmp_path / "r.log").read_bytes() == b""


def test_replication_off_ends_the_run_with_404(serve, tmp_path):
    server = serve(ROOT / "schemas" / "inventory.dbs")
    consumer = Consumer(tmp_path, base(server))
    assert consumer.wait() == 1
    assert "HTTP 404 replication_disabled" in consumer.stderr
    assert "[runtime] replication = true" in consumer.stderr
