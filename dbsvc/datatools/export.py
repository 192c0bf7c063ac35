"""`dbsvc export SCHEMA [MODEL...] [-o FILE] [--as-of ...]`: a tenant's records as JSON Lines.

What is written (format: lines.py): the chosen models (all by default) in declaration
order, each model's records in primary-key order, every record as the HTTP API serves it.
Nothing else: no watermarks, offsets or epoch, which belong to the tenant's history and
not to its data (they are reported on standard error instead).

`--as-of` exports a model as it was at a watermark of the current epoch
(docs/guide/queries.md#reading-the-past-watermarks-and-as_of), like `?as_of=`; `MODEL=N` for one model, or a bare `N` when exactly one model is
exported. A watermark ahead of the model's current one is refused, as over HTTP.

The tenant is locked for the run and opened read-only (tenant.py), so the file is one
consistent state and the tenant is not modified. Writing to a file goes through
`FILE.tmp`, fsynced and renamed (`files.create_durably`, storage's one durable-new-file
helper), so a failed export never leaves a partial FILE.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from dbsvc.datatools.lines import encode_line, line_head
from dbsvc.datatools.progress import Progress
from dbsvc.datatools.tenant import locked_snapshot
from dbsvc.errors import ConfigError
from dbsvc.runtime import CompiledModel, Query
from dbsvc.storage import Store, files

WRITE_BATCH = 2048
EXPORT_BUFFER = 1 << 20
_ALL = 1 << 62


@dataclass(frozen=True, slots=True)
class ExportReport:
    counts: dict[str, int]  # records written per model
    watermarks: dict[str, int]  # the watermark each model was read at
    epoch: str
    seconds: float  # the whole run
    open_seconds: float  # of which: locking and opening the tenant (replaying its log)

    @property
    def records(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        parts = ", ".join(f"{name} {n} (watermark {self.watermarks[name]})" for name, n in self.counts.items())
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        return (
            f"exported {self.records} records in {self.seconds:.1f} s ({rate:,.0f}/s; opening the tenant "
            f"{self.open_seconds:.1f} s): {parts}; epoch {self.epoch}"
        )


def select_models(module: Any, names: Sequence[str]) -> list[CompiledModel]:
    """The models named (declared name or route form, `BlogPost` or `blog-post`), in
    declaration order; all of them when `names` is empty. `ConfigError` for an unknown one."""
    if not names:
        return list(module.MODELS)
    wanted = set()
    for name in names:
        model = module.BY_NAME.get(name) or module.ROUTES.get(name)
        if model is None:
            known = ", ".join(m.name for m in module.MODELS)
            raise ConfigError(f"unknown model {name!r}: expected one of {known}")
        wanted.add(model.name)
    return [m for m in module.MODELS if m.name in wanted]


def parse_as_of(specs: Sequence[str], models: Sequence[CompiledModel]) -> dict[str, int]:
    """`--as-of` values -> {model name: watermark}; `ConfigError` for a bad one."""
    out: dict[str, int] = {}
    by_name = {m.name: m for m in models} | {m.kebab: m for m in models}
    for spec in specs:
        name, sep, number = spec.rpartition("=")
        if not sep:
            if len(models) != 1:
                raise ConfigError(
                    f"--as-of {spec!r}: a bare watermark needs exactly one MODEL; write MODEL=N for each model"
                )
            name = models[0].name
        model = by_name.get(name)
        if model is None:
            raise ConfigError(
                f"--as-of {spec!r}: {name!r} is not one of the exported models ({', '.join(m.name for m in models)})"
            )
        if not (number.isascii() and number.isdigit()):
            raise ConfigError(f"--as-of {spec!r}: {number!r} is not a watermark: expected an integer >= 0")
        out[model.name] = int(number)
    return out


def _lines(
    store: Store,
    models: Sequence[CompiledModel],
    as_of: dict[str, int],
    counts: dict[str, int],
    watermarks: dict[str, int],
) -> Iterator[list[str]]:
    """Batches of output lines; fills `counts` and `watermarks` as it goes."""
    current = store.watermarks()
    for model in models:
        at = as_of.get(model.name)
        if at is not None and at > current[model.name]:
            raise ConfigError(
                f"--as-of {model.name}={at} is ahead of {model.name}'s current watermark {current[model.name]}"
            )
        records, _total, watermark = store.list_records(model.name, Query(limit=_ALL, as_of=at))
        head = line_head(model.name)
        counts[model.name] = len(records)
        watermarks[model.name] = watermark
        for start in range(0, len(records), WRITE_BATCH):
            yield [encode_line(head, r) for r in records[start : start + WRITE_BATCH]]


def export_records(
    directory: str,
    module: Any,
    out: TextIO,
    models: Sequence[CompiledModel],
    as_of: dict[str, int],
    *,
    progress_stream: TextIO | None = None,
    quiet: bool = False,
) -> ExportReport:
    """Write the records of `models` to `out` (lock, read-only open, stream, unlock)."""
    started = time.monotonic()
    with locked_snapshot(directory, module) as (_lock, store):
        opened = time.monotonic() - started
        live = store.live_counts()
        total = sum(live[m.name] for m in models)
        progress = Progress("export", total, "records", stream=progress_stream, quiet=quiet)
        counts: dict[str, int] = {}
        watermarks: dict[str, int] = {}
        for batch in _lines(store, models, as_of, counts, watermarks):
            out.write("".join(batch))
            progress.advance(len(batch), len(batch))
        progress.finish(line=False)  # the command's summary line says it (datatools/commands.py)
        epoch = store.epoch
    return ExportReport(counts, watermarks, epoch, time.monotonic() - started, opened)


def export_to_path(
    directory: str, module: Any, path: str, models: Sequence[CompiledModel], as_of: dict[str, int], **kw: Any
) -> ExportReport:
    """`export_records` into `path` through `path.tmp`, fsynced and renamed on success."""
    with files.create_durably(path, buffer_size=EXPORT_BUFFER) as raw:
        out = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
        report = export_records(directory, module, out, models, as_of, **kw)
        out.flush()
        out.detach()  # the binary file stays open: create_durably fsyncs it
    return report
