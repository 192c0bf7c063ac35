"""A simulated power loss under the storage layer, in the manner of SQLite's crash VFS (test6.c).

`kill -9` keeps the page cache, so it never tests fsync ordering. It judges the store
(tests/storage/test_storage_powerloss.py), a backup (tests/datatools/test_datatools_powerloss.py)
and a replica file (tests/replica/test_replica_powerloss.py): all of them write through the seam. `PowerLossFiles` is a
`files.FileOps` (dbsvc/storage/files.py) installed with `files.use(layer)`: every file
operation still happens for real (reads see the page cache as usual), and beside it the layer
remembers what a power loss could leave behind, for one flat tenant directory:

    per file (an inode)   the bytes its last fsync made durable, and every write and
                          truncate since, in order
    the directory         its names as of its last fsync, and every create, rename and
                          unlink since, in order

Operation number `crash_at` (counting creates, writes, truncates, fsyncs, renames and unlinks)
loses power instead of running: it raises `PowerLoss`, as does every operation after it (a
BaseException, so no `except Exception` of the store handles it). `materialise(path, rng)`
then writes what the disk holds into a fresh directory:

- each file: its durable bytes plus, at random, nothing of what came after, a random subset
  of those writes (each kept or lost whole; a lost append leaves zeros where it was when a
  later one is kept), or a prefix of them in order, the last one torn at a 512-byte boundary
  of the file;
- the directory: its durable names plus a random prefix (possibly empty) of the name
  changes made since its last fsync. Metadata reaches the disk in order (a journal), so a
  later rename is never durable without the earlier create; unsynced name changes may all
  be forgotten.

fsyncs are simulated only (no real fsync is issued), so a seed runs in milliseconds. One
lock serialises the bookkeeping with the real operation, so the recorded order is the
order the kernel saw.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field

from dbsvc.storage.files import FileOps

SECTOR = 512
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class PowerLoss(BaseException):
    """The simulated machine lost power: no file operation runs any more."""


@dataclass(slots=True)
class Inode:
    durable: bytearray = field(default_factory=bytearray)
    # ("write", offset, data) or ("truncate", size, b""), since the last fsync
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)


def _apply(data: bytearray, op: tuple[str, int, bytes]) -> None:
    kind, at, payload = op
    if kind == "truncate":
        if at < len(data):
            del data[at:]
        else:
            data.extend(bytes(at - len(data)))
        return
    if at > len(data):
        data.extend(bytes(at - len(data)))
    data[at : at + len(payload)] = payload


def crash_image(inode: Inode, rng: random.Random) -> bytes:
    """What a power loss leaves of one file (see the module docstring)."""
    data = bytearray(inode.durable)
    pending = inode.pending
    mode = rng.randrange(3) if pending else 0
    if mode == 1:  # a random subset, each op whole
        for op in pending:
            if rng.random() < 0.5:
                _apply(data, op)
    elif mode == 2:  # a prefix, the next op torn
        k = rng.randint(0, len(pending))
        for op in pending[:k]:
            _apply(data, op)
        if k < len(pending) and pending[k][0] == "write":
            _kind, at, payload = pending[k]
            cuts = [c for c in range((at // SECTOR + 1) * SECTOR, at + len(payload), SECTOR)]
            if cuts:
                cut = rng.choice(cuts)
                _apply(data, ("write", at, payload[: cut - at]))
    return bytes(data)


class PowerLossFiles(FileOps):
    """The file seam with a power switch; see the module docstring."""

    def __init__(self, directory: str, crash_at: int | None) -> None:
        self.root = os.path.abspath(directory)
        self.crash_at = crash_at
        self.operations = 0
        self.crashed = False
        self._lock = threading.RLock()
        self._inodes: list[Inode] = []
        self._fds: dict[int, tuple[int, bool]] = {}  # fd -> (inode, opened O_APPEND)
        self._names: dict[str, int] = {}  # the directory now
        self._durable_names: dict[str, int] = {}  # the directory at its last fsync
        self._name_changes: list[tuple[str, str, int | str]] = []
        for name in sorted(os.listdir(self.root)):  # what exists before is durable
            with open(os.path.join(self.root, name), "rb") as f:
                self._inodes.append(Inode(bytearray(f.read())))
            self._names[name] = self._durable_names[name] = len(self._inodes) - 1

    # -- bookkeeping -------------------------------------------------------------------

    def _tick(self) -> None:
        """Count one operation; lose power if this is the one (or it already happened)."""
        if self.crashed:
            raise PowerLoss("the power is off")
        self.operations += 1
        if self.crash_at is not None and self.operations >= self.crash_at:
            self.crashed = True
            raise PowerLoss(f"power lost at operation {self.operations}")

    def power_off(self) -> None:
        """Lose power now (the workload ended before operation `crash_at`)."""
        with self._lock:
            self.crashed = True

    def _name(self, path: str) -> str | None:
        """The entry name when `path` is in the simulated directory, else None."""
        path = os.path.abspath(path)
        return os.path.basename(path) if os.path.dirname(path) == self.root else None

    def _pending(self, fd: int) -> tuple[Inode, bool] | None:
        known = self._fds.get(fd)
        return None if known is None else (self._inodes[known[0]], known[1])

    # -- the seam ----------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:  # type: ignore[override]
        with self._lock:
            writes = bool(flags & WRITE_FLAGS)
            if writes:
                self._tick()
            fd = os.open(path, flags, mode)
            name = self._name(path)
            if name is None or not writes:
                return fd
            ino = self._names.get(name)
            if ino is None:
                self._inodes.append(Inode())
                ino = self._names[name] = len(self._inodes) - 1
                self._name_changes.append(("link", name, ino))
            if flags & os.O_TRUNC:
                self._inodes[ino].pending.append(("truncate", 0, b""))
            self._fds[fd] = (ino, bool(flags & os.O_APPEND))
            return fd

    def close(self, fd: int) -> None:  # type: ignore[override]
        with self._lock:
            self._fds.pop(fd, None)
            os.close(fd)

    def write(self, fd: int, data: bytes | memoryview) -> int:  # type: ignore[override]
        with self._lock:
            self._tick()
            known = self._pending(fd)
            at = 0
            if known is not None:
                at = os.fstat(fd).st_size if known[1] else os.lseek(fd, 0, os.SEEK_CUR)
            n = os.write(fd, data)
            if known is not None:
                known[0].pending.append(("write", at, bytes(data[:n])))
            return n

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:  # type: ignore[override]
        with self._lock:
            self._tick()
            n = os.pwrite(fd, data, offset)
            known = self._pending(fd)
            if known is not None:
                known[0].pending.append(("write", offset, bytes(data[:n])))
            return n

    def ftruncate(self, fd: int, size: int) -> None:  # type: ignore[override]
        with self._lock:
            self._tick()
            os.ftruncate(fd, size)
            known = self._pending(fd)
            if known is not None:
                known[0].pending.append(("truncate", size, b""))

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        with self._lock:
            self._tick()
            known = self._pending(fd)
            if known is not None:
                inode = known[0]
                for op in inode.pending:
                    _apply(inode.durable, op)
                inode.pending.clear()

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self._tick()
            if os.path.abspath(path) == self.root:
                self._durable_names = dict(self._names)
                self._name_changes.clear()

    def rename(self, src: str, dst: str) -> None:  # type: ignore[override]
        with self._lock:
            self._tick()
            os.rename(src, dst)
            a, b = self._name(src), self._name(dst)
            if a is not None and b is not None and a in self._names:
                self._names[b] = self._names.pop(a)
                self._name_changes.append(("rename", a, b))

    def unlink(self, path: str) -> None:  # type: ignore[override]
        with self._lock:
            self._tick()
            os.unlink(path)
            name = self._name(path)
            if name is not None and self._names.pop(name, None) is not None:
                self._name_changes.append(("unlink", name, ""))

    # -- after the crash ---------------------------------------------------------------

    def durable(self, name: str) -> bytes | None:
        """What every fsync so far made durable of the file `name`: its bytes as of its last
        fsync, or None when its name is not durable yet (no directory fsync since it was
        created). A power loss keeps at least these bytes."""
        with self._lock:
            ino = self._durable_names.get(name)
            return None if ino is None else bytes(self._inodes[ino].durable)

    def close_all(self) -> None:
        """Close every descriptor the crashed store left open (its lock's included)."""
        with self._lock:
            for fd in list(self._fds):
                self._fds.pop(fd)
                try:
                    os.close(fd)
                except OSError:
                    pass

    def materialise(self, target: str, rng: random.Random) -> dict[str, bytes]:
        """Write what the disk holds after the power loss into the new directory `target`;
        returns the files written (name -> bytes)."""
        with self._lock:
            names = dict(self._durable_names)
            for kind, a, b in self._name_changes[: rng.randint(0, len(self._name_changes))]:
                if kind == "link":
                    assert isinstance(b, int)
                    names[a] = b
                elif kind == "rename":
                    assert isinstance(b, str)
                    if a in names:
                        names[b] = names.pop(a)
                else:
                    names.pop(a, None)
            images = {ino: crash_image(self._inodes[ino], rng) for ino in sorted(set(names.values()))}
        os.makedirs(target)
        out = {}
        for name, ino in sorted(names.items()):
            out[name] = images[ino]
            with open(os.path.join(target, name), "wb") as f:
                f.write(images[ino])
        return out
