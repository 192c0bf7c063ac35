"""The HTTP/1.1 protocol layer: h11 glue and the asyncio connection loop.

The only package that imports h11. It knows nothing of storage, schemas or realtime (of
the route table, only the methods CORS allows, `routes.ALL_METHODS`); the application is a
callable (see `types.App`). Modules:

    types.py       Request, Response, Upgrade, HttpSettings: the seam with the application
    problem.py     RequestError -> RFC 9457 problem+json response (the only error renderer)
    server.py      serve(app, settings, stop=..., on_ready=...): listen, cap, sweep, shut down
    connection.py  one connection: asyncio.Protocol driving a wire, limits, ordering, upgrade
    wire.py        the parser interface, and h11 behind it (the parser of record)
    fastpath.py    the fast path: a strict parser for common requests, handing the rest to h11
    message.py     h11 events <-> Request/Response, request ids, Date, header validation
    cors.py        CORS policy and preflight answers
    hosts.py       the Host names a server answers to (DNS rebinding)
    ws/            WebSocket: server.py (one upgraded socket), client.py (a blocking client,
                   for replication); the only wsproto importers, neither loads the other

Import `dbsvc.http.server.serve` explicitly; this module imports nothing, so importing
`dbsvc.http.types` does not load h11.
"""
