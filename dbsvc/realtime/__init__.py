"""Realtime feeds: `/subscribe`, `/live-query` and `/replicate`, sans-IO.

Like h11 and wsproto this package never touches a socket, and never imports h11, wsproto,
`socket` or `asyncio` (tests/test_layers.py holds it to that): sessions get a `Channel` (dbsvc.http.types) to send frames on, and the broker
is handed the event loop's `call_soon`. Modules:

    feeds.py     FeedSpec: which frame a feed sends for an event (matcher, links, live deltas)
    session.py   FeedSession: one socket's replay, Init, live delivery and bounded queue
    init.py      InitSlices: a live query's Init, a slice a turn, as of its offset
    broker.py    Broker: the store's change stream, routed and fanned out to sessions
    fanout.py    PlainFeeds: feeds with equal specs share one decision and one batch a drain
    routes.py    RealtimeRoutes: an upgrade request -> token, origin, query, offsets -> Upgrade

Storage and http never import this package; the application wires it (dbsvc/app.py).
"""
