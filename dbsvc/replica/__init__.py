"""The client side of replication: following a server's `/replicate` stream.

`dbsvc replicate URL [--after N] [--out FILE] [--token T]` (consumer.py) connects to a
server whose schema says `[runtime] replication = true`, checks every `PersistedEvent`
frame it receives (header, length, CRC32, gap-free offsets, the event inside), appends
the good ones to FILE byte for byte, and resumes after the last stored offset on every
reconnect and every restart. The stream's format and the command are described in
docs/replication.md. Modules:

    consumer.py  the command: URL, frame checks (`check_frame`), the replica file,
                 reconnects, progress; blocking, no asyncio, nothing of the server side
    follower.py  `dbsvc serve SCHEMA --follow URL`: a read replica fed by the same checks

Both read the stream through the blocking client of `dbsvc.http.websocket` (the only
wsproto importer) and judge frames by the log's rules (`dbsvc.storage.logfile`).
"""
