"""WebSocket (RFC 6455) for dbsvc: the server side of an upgraded socket and a blocking client.

The package holds the only modules of dbsvc that import wsproto:

    server.py  the opening handshake check (`handshake_headers`) and `WebSocketConnection`,
               one upgraded socket on the asyncio loop (server rules 1-9)
    client.py  `open_websocket` -> `ClientWebSocket`, a small blocking client for
               command-line tools and the read replica (rules C1-C5)
    common.py  what both sides share: the close codes

The server and the client share nothing but wsproto and `common.py`: importing one never
loads the other, which is why this file re-exports nothing (the server is imported by
every `dbsvc serve`, the client only by replication). Neither side imports the realtime
layer, the application, storage or h11.
"""
