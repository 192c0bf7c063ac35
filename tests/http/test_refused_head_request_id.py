"""A request refused before its head could be read (a malformed request line: http/respond.py
`Responder._fail` with no head) still gets one request id, the same in its X-Request-Id
header and in its problem body (docs/mutation.md, session 14, wt-mpo4: the header's id left
empty passed every earlier test). Through a real server and sockets, both parsers."""

from __future__ import annotations

import json


def test_a_malformed_head_is_a_400_whose_header_and_body_name_one_request_id(make_server):
    demo = make_server([])
    client = demo.client()
    client.send(b"NOT A REQUEST LINE\r\n\r\n")
    response = client.read_response()
    assert response.status == 400
    body = json.loads(response.body)
    assert body["request_id"]
    assert response.header("x-request-id") == body["request_id"]
