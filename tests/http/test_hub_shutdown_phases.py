"""What the hub (dbsvc/http/hub.py) does with connections around a graceful shutdown: one it
meets once the shutdown has begun is refused and never counted (rule 7's refusal), and one
that lingers after its closing answer does not make the hub busy, so a shutdown does not
wait LINGER_SECONDS for it (rule 6).

Each test serves the demo app in this process (support/inprocess.py) and stops it itself,
with no pytest fixture, so `bench/mutation_inprocess.py` runs them (session 18, wt-mpo8:
hub.py `admit` 2 and `busy` 2, open since session 17)."""

from __future__ import annotations

import dataclasses

from dbsvc.http.hub import Phase
from dbsvc.http.types import HttpSettings
from support.demo_app import app as demo_app
from support.httpkit import Client
from support.inprocess import WAIT, InProcessServer


def serving() -> InProcessServer:
    return InProcessServer(demo_app, dataclasses.replace(HttpSettings(port=0))).start()


def test_a_connection_met_once_the_shutdown_began_is_refused_and_never_counted():
    server = serving()
    try:
        assert server.hub is not None
        hub = server.hub
        # The listener is still open here: this is the connection that was already in the
        # backlog when the shutdown began (server.py sets shutting_down after closing it).
        server.call(lambda: setattr(hub, "shutting_down", True))
        client = Client(server.port, timeout=WAIT)
        try:
            response = client.request("GET", "/echo")
            assert response.status == 503
            assert b"shutting down" in response.body  # not the connection limit: none is reached
            assert server.call(lambda: hub.counted) == 0
        finally:
            client.close()
    finally:
        server.stop()


def test_a_connection_lingering_after_its_closing_answer_does_not_keep_the_hub_busy():
    server = serving()
    try:
        assert server.hub is not None
        hub = server.hub
        client = Client(server.port, timeout=WAIT)
        try:
            client.send(b"NOT A REQUEST\r\n\r\n")
            assert client.read_response().status == 400
            phases = server.call(lambda: [c.phase for c in hub.connections])
            assert phases == [Phase.LINGER]  # the client has not closed: the server lingers
            assert server.call(hub.busy) is False
        finally:
            client.close()
    finally:
        server.stop()
