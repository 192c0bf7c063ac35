"""The client side of replication: following a server's `/replicate` stream.

`dbsvc replicate URL [--after N] [--out FILE] [--token T]` (consumer.py) connects to a
server whose schema says `[runtime] replication = true`, checks every `PersistedEvent`
frame it receives (header, length, CRC32, gap-free offsets, the event inside), appends
the good ones to FILE byte for byte, and resumes after the last stored offset on every
reconnect and every restart. The stream's format and the command are described in
docs/replication.md. Modules:

    consumer.py  the command: URL, frame checks (`check_frame`), the replica file,
                 reconnects, progress; blocking, no asyncio, nothing of the server side
    follower.py  `dbsvc serve SCHEMA --follow URL`: a read replica fed by the same checks;
                 its rules, and the reading thread that decides when each applies
    bootstrap.py the follower's bootstrap: the primary's answers judged (`Upstream`), its
                 snapshot checked whole and installed with the lock kept (`Tenant`)
    groups.py    the follower's groups: frames read and checked at once, and the pipeline
                 that applies them (two groups at most unacknowledged)
    primary.py   how the follower reaches its primary (`/snapshot`, `/replicate`,
                 `/replicate/snapshot`): the seam its in-process tests replace
    status.py    `ReplicaStatus`, what a read replica reports; light, so the application
                 can name it without loading the client, the consumer or the follower

The consumer and the follower (through primary.py) read the stream through the blocking client of
`dbsvc.http.ws.client` (with `ws.server`, the only wsproto importers) and judge frames by
the log's rules (`dbsvc.storage.logfile`). This file imports nothing: importing
`dbsvc.replica.status` must stay as light as the status itself.
"""
