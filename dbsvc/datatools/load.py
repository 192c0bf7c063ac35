"""`dbsvc import SCHEMA FILE`: load a JSON Lines file (lines.py) into a tenant, all or nothing.

Steps (nothing is written before step 4, so a refused import leaves every byte of the
tenant as it was)::

    1  take the tenant's writer lock (TenantLocked, exit 2, while a server holds it)
    2  read the file line by line: each line must be {"model": NAME, "record": {...}} and
       its record must pass the model's generated create validator (the same code as a
       POST: types, bounds, enums, defaults filled, unknown fields refused)
    3  open the tenant read-only and judge all records as one set (Store.check_batch):
       ids and @unique values unused in the tenant and in the file, every @ref found in the
       tenant or anywhere in the file (so parents may come after their children), and no
       record over the store's record size limit (`FILE:LINE: record too large: ...`: the
       tenant could not reopen a log holding its frame; storage/events.py "Sizes")
    4  open the tenant for writing (as a server would: recovery, migration) with the lock
       still held, and append every record in one batch with one fsync (Store.insert_batch)

Any bad line stops the import after step 2 or 3 with `ImportRejected`: one
`FILE:LINE: message` per bad line (the first MAX_SHOWN of them) and how many there were.

Before step 1 the file itself is judged (`open_source`): it must be a regular file this
user can read (not a directory, a FIFO, a socket or a device: an import that is refused is
run again once its lines are fixed, so it reads a file, not a stream that is gone), and
UTF-8 text. Its first line decides that: a UTF-16 or UTF-32 byte order mark, a NUL byte (no
JSON text holds one raw) or bytes UTF-8 does not allow refuse the whole file with one
ConfigError naming what was found (exit 2); a later line that is not UTF-8 is a bad line
like any other. A UTF-8 byte order mark at the start of the file is skipped, as Python's
`utf-8-sig` and most JSON Lines readers do (Windows tools write one); anywhere else it is
a bad line that says so.

Records are inserted, never merged: a record whose id the tenant already holds is a bad
line, as a POST with a taken id is a 409 (PostgREST and PocketBase imports refuse such
rows too). An `int` id left out of a record gets the next automatic id, as a POST would.
Every record becomes one insert row of the tenant's history: the tenant's watermarks
advance by the records imported, as if they had been POSTed in file order.

History: an import into a tenant that holds rows starts a new history forked at its head
(storage/history.py rule 3), written before the batch: a replica at or below that head
continues and takes the new history; a copy of the tenant that went on elsewhere (a
replica's own directory imported into) no longer passes for the primary's history.

Speed: per record, one `json.loads`, one validator call, the set checks (a few dict
probes), one frame and the in-memory insert; no fsync but the batch's one. Step 3 measures
each record's JSON against the record size limit only when the file's longest line could
hold a record near it (`may_be_near_the_record_limit`: lines up to about 1.6 MB never can),
so an import of ordinary records does not encode each one twice; the write step still checks
every frame it builds (batch.py), and a refusal there is reported by line like step 3's,
nothing of the batch written. The cyclic
garbage collector is paused meanwhile (as storage pauses it while loading): the import
creates millions of long-lived objects and no cycles.
"""

from __future__ import annotations

import codecs
import gc
import os
import stat
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TextIO

from dbsvc.datatools.lines import BadLine, decode_lines
from dbsvc.datatools.progress import Progress
from dbsvc.errors import (
    BatchRejected,
    ConfigError,
    ConstraintViolation,
    ImportRejected,
    PayloadTooLarge,
    RequestError,
    UniqueViolation,
)
from dbsvc.storage import Store
from dbsvc.storage.events import HEAD_RESERVE
from dbsvc.storage.lock import WriterLock
from dbsvc.storage.logfile import MAX_PAYLOAD

MAX_SHOWN = 20
RECORD_GROWTH = 5  # a record's compact JSON, in characters, per byte of its line at most
RECORD_SLACK = 64  # characters validation may add to one field (a default, a normalised value)
DEFAULTS_SLACK = 4096  # and to one record besides
CHUNK_BYTES = 1 << 20  # lines are read, decoded and reported on in chunks of about this size


UTF8_BOM = codecs.BOM_UTF8
_OTHER_BOMS = (
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF32_LE, "UTF-32"),  # before UTF-16's:
    (codecs.BOM_UTF16_BE, "UTF-16"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
)  # FF FE starts both
_NOT_REGULAR = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_READS_UTF8 = "dbsvc import reads UTF-8 JSON Lines: convert the file first (iconv -f {} -t UTF-8)"


def open_source(path: str) -> tuple[BinaryIO, int]:
    """The import file opened for reading, past a UTF-8 byte order mark, and its size; a
    ConfigError `cannot import 'PATH': what is wrong` for a file that cannot be imported as
    a whole (the module docstring). Nothing is opened that could block (a FIFO)."""

    def refused(why: str) -> ConfigError:
        return ConfigError(f"cannot import {path!r}: {why}")

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise refused("no such file") from None
    except OSError as exc:
        raise refused(f"{(exc.strerror or str(exc)).lower()}") from None
    if stat.S_ISDIR(info.st_mode):
        raise refused("it is a directory, not a JSON Lines file")
    if not stat.S_ISREG(info.st_mode):
        kind = _NOT_REGULAR.get(stat.S_IFMT(info.st_mode), "not a file")
        raise refused(f"it is {kind}, not a regular file: save the data to a file and import that")
    try:
        source = open(path, "rb")
    except PermissionError:
        raise refused("permission denied: this user may not read it") from None
    except OSError as exc:
        raise refused(f"{(exc.strerror or str(exc)).lower()}") from None
    try:
        head = source.readline(CHUNK_BYTES)
        problem = _not_utf8(head)
        if problem is not None:
            raise refused(f"it is not UTF-8: {problem}")
        source.seek(len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0)
    except BaseException:
        source.close()
        raise
    return source, info.st_size


def _not_utf8(head: bytes) -> str | None:
    """What shows that a file starting with the line `head` is not UTF-8 text, or None."""
    for bom, encoding in _OTHER_BOMS:
        if head.startswith(bom):
            return f"it starts with a {encoding} byte order mark; " + _READS_UTF8.format(encoding)
    if b"\x00" in head:
        return "its first line holds NUL bytes (UTF-16 or UTF-32?); " + _READS_UTF8.format("UTF-16")
    whole = len(head) < CHUNK_BYTES or head.endswith(b"\n")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)
    except UnicodeDecodeError as exc:
        return (
            f"its first line has the byte 0x{head[exc.start]:02x} at byte {exc.start + 1}, which UTF-8 "
            "does not allow there; " + _READS_UTF8.format("LATIN1")
        )
    return None


@dataclass(slots=True)
class ImportReport:
    counts: dict[str, int] = field(default_factory=dict)  # records imported per model
    lines: int = 0  # lines read (blank ones included)
    read_seconds: float = 0.0  # step 2
    check_seconds: float = 0.0  # step 3 (its read-only open included)
    write_seconds: float = 0.0  # step 4 (its writer open included)

    @property
    def records(self) -> int:
        return sum(self.counts.values())

    @property
    def seconds(self) -> float:
        return self.read_seconds + self.check_seconds + self.write_seconds

    def summary(self) -> str:
        parts = ", ".join(f"{name} {n}" for name, n in self.counts.items() if n)
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        return (
            f"imported {self.records} records in {self.seconds:.1f} s ({rate:,.0f}/s; read and validate "
            f"{self.read_seconds:.1f} s, check {self.check_seconds:.1f} s, write {self.write_seconds:.1f} s)"
            f"{': ' + parts if parts else ''}"
        )


class Problems:
    """Bad lines: the first MAX_SHOWN as `FILE:LINE: message`, and how many in all. Public:
    `read_records` and `add_batch_problems` are handed one."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.shown: list[str] = []
        self.count = 0

    def add(self, line: int, message: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_SHOWN:
            self.shown.append(f"{self.path}:{line}: {message}")

    def raise_any(self) -> None:
        if self.count:
            raise ImportRejected(self.shown, self.count)


def _violations(model: str, exc: RequestError) -> str:
    if isinstance(exc, ConstraintViolation):
        return f"{model}: " + "; ".join(e["message"] for e in exc.errors)  # messages name their field
    return f"{model}: {exc.detail}"


def read_records(
    f: BinaryIO, module: Any, progress: Progress, problems: Problems, chunk_bytes: int = CHUNK_BYTES
) -> tuple[list[tuple[str, dict]], list[int], int, int]:
    """Step 2: (rows, the line number of each row, lines read, bytes of the longest line)
    of the file `f` (as `open_source` gives it), read `chunk_bytes` at a time (whole lines:
    a chunk ends at the first line end at or past that size). Bad lines go to `problems`."""
    validators = {m.name: m.validate_create for m in module.MODELS}
    known = ", ".join(validators)
    rows: list[tuple[str, dict]] = []
    numbers: list[int] = []
    append_row, append_number = rows.append, numbers.append
    number = 1
    longest = 0
    while True:
        lines = f.readlines(chunk_bytes)
        if not lines:
            break
        longest = max(longest, max(map(len, lines)))
        good, bad = decode_lines(lines, number)
        for line, name, body in good:
            validate = validators.get(name)
            try:
                if validate is None:
                    raise BadLine(f"unknown model {name!r}: expected one of {known}")
                if type(body) is not dict:
                    raise BadLine(f'{name}: "record" must be an object of its fields')
                record = validate(body)
            except BadLine as exc:
                bad.append((line, str(exc)))
                continue
            except RequestError as exc:
                bad.append((line, _violations(name, exc)))
                continue
            append_row((name, record))
            append_number(line)
        for line, message in sorted(bad):
            problems.add(line, message)
        number += len(lines)
        progress.advance(sum(map(len, lines)), len(lines))
    return rows, numbers, number - 1, longest


def may_be_near_the_record_limit(longest_line: int, module: Any, max_payload: int = MAX_PAYLOAD) -> bool:
    """Whether a record read from lines of at most `longest_line` bytes could be near the
    record size limit, so that step 3 must measure each record's JSON (module docstring,
    "Speed"). A record's compact JSON is at most RECORD_GROWTH times its line's bytes (a
    number may be written longer: `1e15` is `1000000000000000.0`) plus what validation
    adds (defaults, normalised datetimes: RECORD_SLACK a field, DEFAULTS_SLACK in all)."""
    fields = max((len(m.fields) for m in module.MODELS), default=0)
    bound = RECORD_GROWTH * longest_line + RECORD_SLACK * fields + DEFAULTS_SLACK
    return 2 * 4 * bound + HEAD_RESERVE > max_payload  # batch.py rule 5: 4 bytes a character at most


def add_batch_problems(
    exc: BatchRejected, rows: list[tuple[str, dict]], numbers: list[int], problems: Problems
) -> None:
    """Step 3's refusals into `problems`, each at its row's line: a clash with another row of
    the file names that row's line, a @unique clash with none names the tenant, a record too
    large names its model itself. Public so that each message is tested word for word
    without a tenant that makes every kind of clash."""
    for index, error, other in exc.problems:
        where = ""
        if other is not None:
            where = f" (line {numbers[other]})"
        elif isinstance(error, UniqueViolation):
            where = " in the tenant"
        # A record too large names its model itself and starts "record too large" (events.py).
        model = "" if isinstance(error, PayloadTooLarge) else f"{rows[index][0]}: "
        problems.add(numbers[index], f"{model}{error.detail}{where}")


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_file(
    directory: str,
    module: Any,
    path: str,
    *,
    sync: str = "full",
    replication: bool = False,
    retain_bytes: int = 0,
    progress_stream: TextIO | None = None,
    quiet: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> ImportReport:
    """Steps 1-4 of the module docstring; `ImportRejected` when any line is bad, a
    ConfigError for a file that cannot be imported at all (`open_source`). `sync`,
    `replication` and `retain_bytes` are the server's settings (config.py), so the writer
    open in step 4 treats the tenant exactly as a server starting on it would.
    `chunk_bytes`: the read size of step 2 (a test's seam; the command uses CHUNK_BYTES)."""
    report = ImportReport()
    problems = Problems(path)
    source, size = open_source(path)
    try:
        lock = WriterLock.acquire(directory)
    except BaseException:
        source.close()
        raise
    try:
        with _collector_paused():
            progress = Progress("import: reading", size, "lines", stream=progress_stream, quiet=quiet)
            with source:
                rows, numbers, report.lines, longest = read_records(source, module, progress, problems, chunk_bytes)
            report.read_seconds = progress.finish()
            problems.raise_any()
            if not rows:
                return report
            started = time.monotonic()
            checked = Store.open(directory, module.MODELS, module.DESCRIPTION, readonly=True, ring_capacity=0)
            try:
                checked.check_batch(rows, measure=may_be_near_the_record_limit(longest, module))
            except BatchRejected as exc:
                add_batch_problems(exc, rows, numbers, problems)
            finally:
                checked.close()
                del checked
            problems.raise_any()
            report.check_seconds = time.monotonic() - started
            progress = Progress("import: writing", len(rows), "records", stream=progress_stream, quiet=quiet)
            progress.show()  # one batch: nothing to report until it is durable
            store = Store.open(
                directory,
                module.MODELS,
                module.DESCRIPTION,
                sync=sync,
                replication=replication,
                retain_bytes=retain_bytes,
                lock=lock,
            )
            try:
                if store.head_offset > 0:  # a used tenant: its rows after the head are new ones
                    store.fork_history()  # (storage/history.py rule 3), forked first
                stored = store.insert_batch(rows)
            except BatchRejected as exc:  # a record the bound of step 3 let through: nothing written
                add_batch_problems(exc, rows, numbers, problems)
                problems.raise_any()
                raise
            finally:
                store.close()
            progress.advance(len(stored), len(stored))
            report.write_seconds = progress.finish()
            report.counts = dict(Counter(name for name, _record in rows))
    finally:
        lock.release()
    return report
