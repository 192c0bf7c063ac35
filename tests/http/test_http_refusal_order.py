"""The order of a head's refusals (http/connection.py `_on_head`): the body's own limits
(connection.py rules 4, 5 and 11) are asked first, and the hub's (hub.py rule 7, the probes'
reserve; rule 9, the Host) only for a head they let through. Since session 9 the hub is asked
only when it has something to check; mutation testing found that nothing held a refusal of
the body against the hub's when both apply (docs/mutation.md, "... (session 10, wt-mcm)").
Through real servers and sockets."""

from __future__ import annotations


def test_a_body_over_the_limit_on_a_reserve_connection_is_413_not_the_reserve_s_503(make_server):
    demo = make_server(["--max-connections", "2", "--max-body", "1024"])
    held = [demo.client() for _ in range(2)]
    for client in held:
        assert client.request("GET", "/echo").status == 200
    past_the_cap = demo.client()  # on the probes' reserve
    past_the_cap.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
    response = past_the_cap.read_response()
    assert response.status == 413
    assert response.json()["code"] == "payload_too_large"
    assert past_the_cap.is_closed()
