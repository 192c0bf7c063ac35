"""The one seam every storage file operation passes through, shared helpers, and the
fault-injection hook.

The seam (`ops`): storage modules call `files.ops.open / write / pwrite / fsync / fsync_dir /
ftruncate / rename / unlink / close` instead of `os.*` for every operation that creates,
changes, makes durable or removes a file (reads stay plain `os.pread` and `open`). `ops` is
a `FileOps`, whose methods *are* the `os` functions, so production pays nothing for it.
A test installs another layer with `use(layer)` before opening a store; the power-loss
simulator (tests/support/powerloss_fs.py) does, to remember what each fsync made durable.
Always reach it as `files.ops` at the call (never `from files import ops`), so that an
installed layer is the one called.

Durable replacement of a file (`write_atomic`), used for `schema.json` and during
compaction::

    open(<name>.tmp, O_CREAT|O_TRUNC) ; write ; fsync(file) ; close
    rename(<name>.tmp, <name>)        ; fsync(directory)

A crash before the rename leaves the old file and a stray `.tmp` (removed on the next
open); after the rename but before the directory fsync, either name may survive a power
loss, and both hold complete, fsynced contents. Nothing relies on the new name before the
directory fsync returns.

The same steps for a file written as a stream (`create_durably`, a context manager that
hands out a buffered binary file whose writes go through `ops.write`): `dbsvc export`'s
FILE, `dbsvc build`'s archive. If the block raises, the `.tmp` is closed and unlinked and
the old file stays. A new file whose name a later step makes durable (`write_new`: created
exclusively, written, fsynced, closed) serves the backup's files, which its manifest,
written last, commits, and the zipapp's unpacked packages, which one rename of their
directory commits. A file appended to for a long time (the replica consumer's `--out`)
calls `ops.write` / `ops.fsync` itself. A transient file that a later rename commits and
that is filled by a function rather than a stream (`write_durably`: a compaction's `.new`
files, a new tenant's first log) is created or emptied, filled, fsynced and closed, and
removed at once if any of that fails.

So every fsync of the package passes through `ops` (`grep -rn "os.fsync" dbsvc` shows
only `FileOps`), and the power-loss simulator judges backups and replica files as it
judges the log. Directories are created and removed with plain `os` calls (`mkdir`,
`rmtree`): the seam has no directory operations but `fsync_dir`.

Fault injection (tests only): `DBSVC_FAULT` holds comma-separated rules `OP:N[:ERRNO]` or
`OP:N-M[:ERRNO]`, for example `DBSVC_FAULT=fsync:3:EIO,write:10-12:ENOSPC`. The Nth call of
OP (counted per `FaultPlan`, that is per open store), or every call from the Nth to the Mth,
raises `OSError(ERRNO)` instead of doing the work; a range is a disk that is full for a
while and then has room again (commit.py retries a write that failed for lack of space, and
its probe counts as a `write` call). `compact:K:KILL` sends SIGKILL to the process itself
after compaction step K; `epoch:N` fails or kills at the start of the Nth online switch's
part in memory (compactor.py `_enter_epoch`), past its commit point; `flush:N` fails
or kills in the Nth pause an online compaction takes after a piece's fsync (snapshot.new,
log.retained.new; online.py `WallPacer`), `collapse:N` in the Nth pause of the heap's
collapse after one (compactor.py `settle`), `rows:N` before the Nth model's rows are read
for snapshot.new, the cut taken (online.py `_row_chunks`). `OP:N:HOLD=<path>`
makes the Nth call wait, then do the work: it
creates `<path>.held` and sleeps until `<path>` exists, so a test sees a slow fsync by order
of events, not by the clock (tests/app/test_app_durable_answers.py: no answer leaves before
the held fsync is released). With the variable unset (production) every check is one falsy
attribute test.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

log = logging.getLogger("dbsvc.storage")

TMP_SUFFIX = ".tmp"


class FileOps:
    """The file operations storage performs, exactly as the operating system does them.
    A test layer subclasses it and overrides what it needs to observe."""

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    write = staticmethod(os.write)
    pwrite = staticmethod(os.pwrite)
    fsync = staticmethod(os.fsync)
    ftruncate = staticmethod(os.ftruncate)
    rename = staticmethod(os.rename)
    unlink = staticmethod(os.unlink)

    def fsync_dir(self, path: str) -> None:
        """fsync a directory so that creates, renames and unlinks inside it are durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


ops: FileOps = FileOps()


@contextmanager
def use(layer: FileOps) -> Iterator[FileOps]:
    """Route every storage file operation through `layer` inside the block (tests only)."""
    global ops
    previous, ops = ops, layer
    try:
        yield layer
    finally:
        ops = previous


def fsync_dir(path: str) -> None:
    """fsync a directory so that creates, renames and unlinks inside it are durable."""
    ops.fsync_dir(path)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write until every byte is written (a short write is not an error by itself)."""
    view = memoryview(data)
    write = ops.write
    while view:
        n = write(fd, view)
        view = view[n:]


# A large file written whole (a compaction's snapshot.new, log.retained.new) is fsynced each
# time this many more bytes were written, not once at its end: one fsync of 68 MB took 156 ms
# on ext4, and a group commit's fsync meanwhile waits for the journal behind it (in
# data=ordered a journal commit writes the data of every file in its transaction), so every
# writer waited too (bench/README.md, wt-ctail). Pieces bound that wait to one piece's flush.
FLUSH_BYTES = 4 << 20


def flush_past(fd: int, written: int, flushed: int, after: Callable[[float], object] | None = None) -> int:
    """fsync `fd` if `written` is FLUSH_BYTES or more past `flushed` (what its last fsync
    covered); returns what is flushed now. The file's own last fsync stays the caller's.
    `after` (an online compaction's thread step: online.py `WallPacer`) is called with the
    fsync's wall time, and sleeps in proportion, so that the disk is not this file's alone
    while writers' group commits fsync beside it."""
    if written - flushed < FLUSH_BYTES:
        return flushed
    began = time.perf_counter()
    ops.fsync(fd)
    if after is not None:
        after(time.perf_counter() - began)
    return written


def truncate_durably(path: str, size: int) -> None:
    """Cut the file at `path` to `size` bytes and fsync it (a torn log tail at open)."""
    fd = ops.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        ops.ftruncate(fd, size)
        ops.fsync(fd)
    finally:
        ops.close(fd)


def write_atomic(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data` durably: tmp, fsync, rename, fsync the directory."""
    tmp = path + TMP_SUFFIX
    fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        ops.fsync(fd)
    finally:
        ops.close(fd)
    ops.rename(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(path) or ".")


def write_new(path: str, data: bytes | memoryview, mode: int = 0o644) -> None:
    """Create `path`, which must not exist, with `data`, fsynced and closed. Its name is not
    durable yet: the caller's later rename or directory fsync makes it so."""
    fd = ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        write_all(fd, data)
        ops.fsync(fd)
    finally:
        ops.close(fd)


def write_durably(path: str, fill: Callable[[int], object]) -> int:
    """Create (or empty) `path`, let `fill(fd)` write it from position 0, fsync it and close
    it; returns its size. The descriptor is open for reading too (`fill` may read back
    what it wrote: retain.py checks its copy's last frame). Every transient file a
    compaction or a new tenant writes whole goes through here (compact.py's snapshot.new,
    log.new and log.tmp, online.py's snapshot.new, retain.py's log.retained.new).

    A fill or fsync that fails (a full disk, EFBIG, EIO, a cancel) removes `path` before
    the error goes on: every name written here is transient (`.new`, `.tmp`), so a partial
    one is never wanted, and it would otherwise hold its blocks on a disk already short of
    room until the next open cleared it. Its unlink is not fsynced: if a crash undoes it,
    the next open clears the file as before."""
    fd = ops.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        fill(fd)
        ops.fsync(fd)
        return os.fstat(fd).st_size
    except BaseException:
        _remove_partial(path)
        raise
    finally:
        ops.close(fd)


def _remove_partial(path: str) -> None:
    """Unlink a file `write_durably` could not complete; a failure to do so is logged, never
    raised over the error that made it partial."""
    try:
        ops.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("could not remove the partial %s (the next open will): %s", path, exc)


class SeamFile(io.RawIOBase):
    """A raw, seekable, write-only file over a descriptor, writing through `ops.write`.
    It does not own the descriptor: closing it leaves the descriptor open (its opener
    fsyncs and closes it through `ops`)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        return ops.write(self._fd, data)

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self._fd, pos, whence)

    def tell(self) -> int:
        return os.lseek(self._fd, 0, os.SEEK_CUR)


@contextmanager
def create_durably(
    path: str,
    *,
    tmp: str | None = None,
    mode: int = 0o644,
    buffer_size: int = io.DEFAULT_BUFFER_SIZE,
    sync_dir: bool = True,
) -> Iterator[BinaryIO]:
    """A buffered binary file that becomes `path` durably when the block ends: it is
    `path.tmp`, flushed, fsynced, closed and renamed over `path`, and then the directory
    is fsynced (unless `sync_dir` is False: the caller does it, or tolerates it failing).
    When the block raises, the temporary file is closed and unlinked and `path` is untouched.

    `tmp` names the temporary file instead; it is created exclusively (a unique name, so
    that writers side by side cannot clobber each other's). `mode` is filtered by the
    umask, as `os.open` does."""
    exclusive = tmp is not None
    tmp = tmp if tmp is not None else path + TMP_SUFFIX
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = ops.open(tmp, flags, mode)
    try:
        with io.BufferedWriter(SeamFile(fd), buffer_size) as out:
            yield out
            out.flush()
        ops.fsync(fd)
    except BaseException:
        ops.close(fd)
        try:
            ops.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    ops.close(fd)
    ops.rename(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(path) or ".")


class FaultPlan:
    """Parsed `DBSVC_FAULT` rules with per-operation call counters."""

    __slots__ = ("counts", "rules")

    def __init__(self, spec: str | None) -> None:
        self.rules: dict[str, tuple[int, int, str]] = {}
        self.counts: dict[str, int] = {}
        for part in (spec or "").split(","):
            part = part.strip()
            if not part:
                continue
            op, _, rest = part.partition(":")
            calls, _, what = rest.partition(":")
            first, _, last = calls.partition("-")
            action, equals, argument = what.partition("=")  # HOLD=<path>: the path keeps its case
            self.rules[op] = (int(first), int(last or first), action.upper() + equals + argument or "EIO")

    @classmethod
    def from_env(cls) -> FaultPlan:
        return cls(os.environ.get("DBSVC_FAULT"))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def check(self, op: str) -> None:
        """Count one call of `op`; raise or die if a rule says this call fails."""
        if op not in self.rules:
            return
        count = self.counts.get(op, 0) + 1
        self.counts[op] = count
        first, last, what = self.rules[op]
        if not first <= count <= last:
            return
        if what == "KILL":
            os.kill(os.getpid(), signal.SIGKILL)
        if what.startswith("HOLD="):
            _hold(what[len("HOLD=") :], f"{op}:{count}")
            return
        code = getattr(errno, what)
        raise OSError(code, f"{os.strerror(code)} (injected by DBSVC_FAULT {op}:{count})")


def _hold(gate: str, call: str) -> None:
    """Announce the held call in `<gate>.held`, then wait until `gate` exists (tests only).
    The marker is written whole under another name and renamed into place, so a test that
    sees it never reads it empty or half written."""
    partial = gate + ".held.partial"
    with open(partial, "w", encoding="ascii") as marker:
        marker.write(call + "\n")
    os.replace(partial, gate + ".held")
    while not os.path.exists(gate):
        time.sleep(0.005)


NO_FAULTS = FaultPlan(None)
