"""One tenant on every core: the parts of `dbsvc serve SCHEMA --workers N` a worker process runs.

`dbsvc/supervisor.py` starts the processes; this package is what each of them adds to a
server (docs/workers.md):

- `role.py`: which worker this process is (`WorkerRole`: the writer or reader k of N, the
  writer's private port and the key that guards it), handed down in the environment;
- `private.py`: the writer's private listener on 127.0.0.1, which the readers follow
  (`/replicate`, `/replicate/snapshot`, `/snapshot`) and forward writes to, and `WriterPrimary`,
  the follower's way to reach it;
- `forward.py`: a reader's front: reads are its own, a write goes to the writer and is
  answered once this reader has applied it (read-your-writes on every connection).

Imports errors, interfaces, http, realtime and replica; service wires it in, nothing below
service imports it.
"""
