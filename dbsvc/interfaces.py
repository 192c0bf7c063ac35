"""The typed seams between the service's parts: what each side may call on the other.

Three things cross a layer as values whose class the receiver must not name:
- the generated module (`GeneratedModule`): a `types.ModuleType` made by
  `dbsvc.compiler.compile_schema`, read by the app, the service and the command line;
- the store (`ServedStore`): `dbsvc.storage.Store` as the app, the realtime routes and the
  broker use it; a follower's store swaps in at run time (`Application.use_store`);
- the token guard (`TokenGuard`): `dbsvc.auth.Guard` as the app and the realtime routes
  use it; with the guard off they hold None and never import `dbsvc.auth`'s crypto.

Each is a `typing.Protocol`, checked by mypy structurally: the real classes satisfy them
without inheriting, and the protocols name only what is called, so a part can be read
(and replaced in a test) knowing no more than this page.

Imports only `dbsvc.runtime` and, for annotations alone, storage's event and health types: importing
this module pulls in no storage, http or auth code. It sits beside runtime in the
layering (errors <- runtime <- interfaces <- auth, realtime, app, service).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from dbsvc.runtime import CompiledModel, Filters, Query

if TYPE_CHECKING:
    from dbsvc.storage.events import ChangeEvent
    from dbsvc.storage.logwriter import WriteHealth

Record = dict[str, Any]
ChangeCallback = Callable[["ChangeEvent", bytes], None]
GroupCallback = Callable[[Sequence["ChangeEvent"], Sequence[bytes]], None]  # a committed group's


class GeneratedModule(Protocol):
    """The module `compile_schema` makes of a schema (docs/architecture.md, compiler).

    Read-only attributes, as properties: a module's globals satisfy them structurally."""

    @property
    def MODELS(self) -> tuple[CompiledModel, ...]: ...  # declaration order

    @property
    def ROUTES(self) -> Mapping[str, CompiledModel]: ...  # kebab -> model

    @property
    def BY_NAME(self) -> Mapping[str, CompiledModel]: ...  # declared name -> model

    @property
    def DESCRIPTION(self) -> dict[str, Any]: ...  # describe_schema(schema)

    @property
    def RUNTIME(self) -> dict[str, Any]: ...  # the [runtime] table

    @property
    def AUTH(self) -> dict[str, Any]: ...  # the [auth] table

    @property
    def SCHEMA_PATH(self) -> str: ...

    @property
    def OPENAPI_JSON(self) -> str: ...

    @property
    def ASYNCAPI_JSON(self) -> str: ...


class BatchWriter(Protocol):
    """An atomic batch under way (`Store.begin_batch`, storage/batchwrite.py): each op
    applied at once and checked against the ones before; then one `commit`, or `abort`."""

    def insert(self, model: str, record: Record) -> Record: ...

    def replace(self, model: str, id: Any, record: Record) -> tuple[Record, Record]: ...

    def delete(self, model: str, id: Any) -> Record: ...

    def abort(self) -> None: ...

    def commit(self) -> asyncio.Future[Any]: ...


class ServedStore(Protocol):
    """The store as the serving side uses it: synchronous reads, writes applied at once with
    a future for their durability, the change stream and the replication reads
    (docs/architecture.md, storage)."""

    @property
    def head_offset(self) -> int: ...

    @property
    def applied_offset(self) -> int: ...

    @property
    def epoch(self) -> str: ...

    @property
    def history_json(self) -> dict[str, Any] | None: ...

    def get(self, model: str, id: Any, as_of: int | None = None) -> tuple[Record | None, int]: ...

    # texts: a record only to be sent whole comes as its JSON bytes (its stored text; a dict
    # where its text gives none: storage/rows.py `sent`)
    def get_versioned(
        self, model: str, id: Any, as_of: int | None = None, texts: bool = False
    ) -> tuple[Record | bytes | None, int, int]: ...

    def version(self, model: str, id: Any) -> int: ...

    def list_records(self, model: str, query: Query) -> tuple[list[Record], int, int]: ...

    # texts: every record of the present but the last as its JSON bytes (a dict where its
    # text gives none), the last a dict carrying its JSON as `text` (storage/shown.py `SentRecord`),
    # holding the id alone in id order (no `sort`: the page's Link reads nothing else)
    def list_page(self, model: str, query: Query, texts: bool = False) -> tuple[list[Any], int, int, bool]: ...

    def live_ids(
        self, model: str, filters: Filters, ranges: tuple = (), nulls: tuple = (), search: tuple[str, ...] = ()
    ) -> Sequence[Any]: ...

    def watermarks(self) -> dict[str, int]: ...

    def watermarks_at(self, model: str, n: int) -> dict[str, int]: ...

    def live_counts(self) -> dict[str, int]: ...

    def tick(self, model: str) -> int: ...  # moves on every change of the model's live state

    def apply_insert(self, model: str, record: Record) -> tuple[Record, asyncio.Future[Any]]: ...

    def apply_replace(self, model: str, id: Any, record: Record) -> tuple[Record, Record, asyncio.Future[Any]]: ...

    def apply_delete(self, model: str, id: Any) -> tuple[Record, asyncio.Future[Any]]: ...

    # The same writes told by a completion callback, `done(None)` once durable or
    # `done(error)`, a committed group's together (storage/writes.py rule 6): the app's.
    def insert_then(self, model: str, record: Record, done: Callable[[BaseException | None], object]) -> Record: ...

    def begin_run(self) -> None: ...

    def end_run(self) -> None: ...

    def insert_run_then(
        self, model: str, records: Sequence[Record], dones: Sequence[Callable[[BaseException | None], object]]
    ) -> list[tuple[Record, int] | Exception]: ...

    def replace_then(
        self, model: str, id: Any, record: Record, done: Callable[[BaseException | None], object]
    ) -> tuple[Record, Record]: ...

    def delete_then(self, model: str, id: Any, done: Callable[[BaseException | None], object]) -> Record: ...

    def written_json(self, record: Record) -> bytes | None: ...

    def begin_batch(self, size: int = 0) -> BatchWriter: ...

    def subscribe(self, callback: ChangeCallback) -> Callable[[], None]: ...

    def subscribe_groups(self, callback: GroupCallback) -> Callable[[], None]: ...

    def events_after(self, offset: int) -> Iterator[ChangeEvent]: ...

    def frames_after(self, offset: int) -> Iterator[bytes]: ...

    def epoch_snapshot(self) -> tuple[str, int, Iterator[bytes]]: ...

    def health(self, retry: bool = False) -> WriteHealth: ...

    def stats(self) -> dict[str, Any]: ...  # counters for /metrics (Store.stats)


class TokenGuard(Protocol):
    """The verify-only token guard (dbsvc/auth/guard.py) as its callers use it."""

    def verify(self, authorization: str | None) -> dict[str, Any]: ...

    def verify_token(self, token: str | None) -> dict[str, Any]: ...

    def expires_at(self, claims: dict[str, Any]) -> float | None: ...

    async def refresh_keys(self) -> None: ...

    async def start(self) -> None: ...

    def close(self) -> None: ...
