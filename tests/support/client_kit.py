"""Generated clients for tests (tests/clients): write one, import it, read a server's log.

`client_module(schema, directory)` runs `dbsvc client SCHEMA --lang python` in process
(`dbsvc.cli.main`, the public command line) into `directory` and imports the file as a
module of its own name, as a user would import the file they generated. `log_events(port,
head)` reads a server's `/replicate` stream from offset 0 up to `head` and decodes every
frame (`u64 offset | u32 crc32 | u32 length | payload`, docs/replication.md): what a feed's events
are checked against.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import struct
import sys
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

from websockets.sync.client import connect

from dbsvc.cli import main as dbsvc_main
from support.server import ROOT

SCHEMAS = ROOT / "schemas"
TS_DIR = ROOT / "tests" / "clients" / "ts"  # npm typescript, pinned in its package.json
TSC = TS_DIR / "node_modules" / ".bin" / "tsc"
NODE = shutil.which("node")
# --skipLibCheck: tsc type-checks its own lib.*.d.ts and @types/node on every run unless told
# not to, about half of a run's CPU here, and none of it about the client (a .ts file, checked
# whole either way). The guide's `tsc` example (docs/guide/clients.md) runs the user's command
# without it, so the libs' own check still runs once in the default suite.
TSC_FLAGS = [
    "--skipLibCheck",
    "--strict",
    "--target",
    "es2022",
    "--module",
    "es2022",
    "--moduleResolution",
    "bundler",
    "--lib",
    "es2022,dom",
]

# A schema of the names a generator must rename: fields named like Python keywords and like a
# feed method's own arguments, a projection named like a model's type, a model whose derived
# type name (Batch's projection `list`: BatchList) is another model's name.
ODD = """\
model Page {
  id       str   @id
  from     str   @filter @sort
  handler  int?  @filter
  class    enum(a, b) @filter
  @projection(short, from, class)
  @projection(create, id, from)
}

model Batch {
  id    int @id
  page  str @ref(Page) @filter
  @projection(list, id, page)
}

model BatchList {
  id    int @id
}
"""


def generate(schema: Path, output: Path) -> str:
    """`dbsvc client SCHEMA --lang python -o OUTPUT`; the text written."""
    with contextlib.redirect_stdout(io.StringIO()):
        status = dbsvc_main(["client", str(schema), "--lang", "python", "-o", str(output)])
    assert status == 0, f"dbsvc client {schema} exited {status}"
    return output.read_text(encoding="utf-8")


def client_module(schema: Path, directory: Path, name: str | None = None) -> ModuleType:
    """The client of `schema`, generated into `directory` and imported as `name`."""
    name = name or f"{schema.stem}_client"
    path = directory / f"{name}.py"
    generate(schema, path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def log_events(port: int, head: int, timeout: float = 30.0, token: str | None = None) -> list[dict[str, Any]]:
    """Every event of the server's durable log up to offset `head`, in offset order (`token`
    for a guarded server)."""
    events: list[dict[str, Any]] = []
    if head == 0:
        return events
    headers = {"Authorization": f"Bearer {token}"} if token else None
    url = f"ws://127.0.0.1:{port}/replicate?after=0"
    with connect(url, open_timeout=timeout, max_size=None, additional_headers=headers) as socket:
        while True:
            data = socket.recv(timeout=timeout)
            assert isinstance(data, bytes), f"/replicate sent text: {data!r}"
            offset, crc, length = struct.unpack(">QII", data[:16])
            payload = data[16 : 16 + length]
            assert zlib.crc32(payload) == crc, f"frame at offset {offset} fails its crc"
            events.append(json.loads(payload))
            if offset >= head:
                return events
