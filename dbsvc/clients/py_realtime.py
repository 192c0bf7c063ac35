"""The fixed part of the generated Python client: realtime feeds that resume with no gap.

Copied into every generated Python client after py_rest.py's body (the same marker rule:
see py_rest.py). The WebSocket is `websockets`' blocking client, imported when a feed
starts; without the package a feed raises `RealtimeUnavailable` naming the fix, and REST
works as before.

The feed's decisions are sans-IO state machines fed the server's frames, so they are tested
without a socket (tests/clients/test_feed_state.py); `FeedRunner` is the I/O around them:

1. A subscription starts after `after=`, or else after the head the server reports for an
   empty list (`Dbsvc-Offset`): fetch, take the offset, subscribe with `after=`.
2. Frames with `batch` are held until the frame whose `batch` has `end` (docs/realtime.md,
   "Batches"), then handed over together; a frame without `batch` at once.
3. On any disconnect (1013 lagged, 1001 shutdown, 4401 token expired, a network loss, a
   refused connection) held frames are dropped and the feed reconnects with backoff
   (0.05 s doubling to 5 s, each wait jittered down to half) with `after=` the last offset handed over. A subscription asks
   for one offset earlier and drops the frames at that offset it already handed over, since
   a row's `link` events share its offset and the drop may fall between them: every event
   once, in order. A live query resumes only once its Init was complete; before, it starts over.
4. 4401 and a 401 at the handshake ask the token source again (a token function is called
   on every connect); a fixed token that is refused ends the feed.
5. 410 `offset_gone` (the server no longer holds the offset): a subscription restarts at
   the head, a live query from a fresh Init; both call `on_reset` with the error, so the
   caller knows events were missed (the live query's set is whole again after the Init).
6. Any other refusal (400, 403, 404) ends the feed: `error` holds it and `on_error` is called.
   So does an exception of the caller's handler (`HandlerFailed` keeps it apart from a
   socket's errors: an OSError a handler raises is no dropped connection).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Self

from dbsvc.clients.py_rest import ApiError, ClientError, JsonObject, QueryError, R, ReadApi, Transport, problem_error

# --- client body ---


class RealtimeUnavailable(ClientError):
    """A feed was started where the `websockets` package is not installed."""


def websocket_connect() -> Any:
    try:
        return importlib.import_module("websockets.sync.client").connect
    except ImportError as exc:
        raise RealtimeUnavailable(
            "subscribe() and live_query() need the 'websockets' package (pip install websockets); "
            "REST calls work without it"
        ) from exc


def event_key(frame: Mapping[str, Any]) -> tuple[Any, ...]:
    """What tells two events of one offset apart: a row's event and the links it causes."""
    return (
        frame.get("offset"),
        frame.get("kind"),
        frame.get("id"),
        frame.get("child_model"),
        frame.get("child_id"),
        frame.get("field"),
        frame.get("linked"),
    )


def batch_open(frame: Mapping[str, Any]) -> bool:
    """A frame of a batch that is not the batch's last for this socket: hold it."""
    batch = frame.get("batch")
    return isinstance(batch, dict) and not batch.get("end")


class EventState:
    """A subscription's position: what it handed over, what it holds, where to resume."""

    def __init__(self, after: int) -> None:
        self.offset = after  # the last offset handed over (or the start)
        self.seen: set[tuple[Any, ...]] = set()  # keys handed over at `offset`
        self.held: list[JsonObject] = []

    def resume_after(self) -> int:
        return self.offset - 1 if self.seen else self.offset

    def take(self, frame: JsonObject) -> list[JsonObject]:
        """The events to hand over now, in order (none while a batch is open)."""
        offset = int(frame.get("offset", 0))
        if offset < self.offset or (offset == self.offset and event_key(frame) in self.seen):
            return []  # a replay of what was handed over before the reconnect
        self.held.append(frame)
        if batch_open(frame):
            return []
        out, self.held = self.held, []
        for event in out:
            at = int(event.get("offset", 0))
            if at > self.offset:
                self.offset, self.seen = at, set()
            self.seen.add(event_key(event))
        return out

    def disconnected(self) -> None:
        self.held = []

    def restart(self, head: int) -> None:
        """After 410 offset_gone: start again at `head`."""
        self.offset, self.seen, self.held = head, set(), []


class LiveState(Generic[R]):
    """A live query's result set, keyed by id, as of `offset` once `complete`."""

    def __init__(self, id_field: str) -> None:
        self.id_field = id_field
        self.records: dict[Any, R] = {}
        self.offset = 0
        self.complete = False
        self.filling: dict[Any, R] | None = None  # an Init's slices so far
        self.held: list[JsonObject] = []

    def resume_after(self) -> int | None:
        return self.offset if self.complete else None

    def take(self, frame: JsonObject) -> bool:
        """Apply one frame; True when the set changed (an Init completed, or deltas applied)."""
        kind = frame.get("type")
        if kind == "Init":
            if self.filling is None:
                self.filling = {}
            for record in frame.get("records", []):
                self.filling[record[self.id_field]] = record
            if not frame.get("complete", True):
                return False
            self.records, self.filling = self.filling, None
            self.offset = int(frame.get("offset", 0))
            self.complete = True
            return True
        if int(frame.get("offset", 0)) <= self.offset and not self.held:
            return False  # replayed before: deltas of one row come once per query
        self.held.append(frame)
        if batch_open(frame):
            return False
        deltas, self.held = self.held, []
        for delta in deltas:
            if delta.get("type") in ("Added", "Updated"):
                record = delta["record"]
                self.records[record[self.id_field]] = record
            elif delta.get("type") == "Removed":
                self.records.pop(delta["id"], None)
            self.offset = max(self.offset, int(delta.get("offset", 0)))
        return True

    def disconnected(self) -> None:
        self.held = []
        if not self.complete:
            self.filling = None

    def restart(self) -> None:
        """After 410 offset_gone: the next connection starts with a fresh Init."""
        self.complete, self.filling, self.held = False, None, []


class Refused(Exception):
    """The server refused the WebSocket handshake with a problem."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(str(error))
        self.error = error


class HandlerFailed(Exception):
    """The caller's handler (or the frame it was given) raised: the feed ends with `error`,
    never mistaking it for a dropped socket (an OSError from a handler is the handler's)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class FeedRunner:
    """A thread that keeps one feed connected (module docstring, rules 3 to 6)."""

    BACKOFF_FIRST = 0.05
    BACKOFF_MAX = 5.0

    def __init__(
        self,
        transport: Transport,
        path: str,
        params: Sequence[tuple[str, str]],
        resume_after: Callable[[], int | None],
        on_frame: Callable[[JsonObject], None],
        on_gone: Callable[[ApiError], None],
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        self.connect = websocket_connect()
        self.transport = transport
        self.path = path
        self.params = list(params)
        self.resume_after = resume_after
        self.on_frame = on_frame
        self.on_gone = on_gone
        self.on_error = on_error
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.connects = 0
        self.lock = threading.Lock()
        self.socket: Any = None
        self.wake: Callable[[], None] = lambda: None  # the feed object's waiters, told of the end
        self.thread = threading.Thread(target=self.run, name=f"dbsvc feed {path}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        with self.lock:
            socket = self.socket
        if socket is not None:
            socket.close()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def run(self) -> None:
        delay = self.BACKOFF_FIRST
        while not self.stopping.is_set():
            try:
                if self.session():
                    delay = self.BACKOFF_FIRST  # frames came: the next drop starts the backoff over
            except Refused as refused:
                status = refused.error.status
                if refused.error.code == "offset_gone":
                    self.on_gone(refused.error)
                    continue
                if not (status >= 500 or (status == 401 and callable(self.transport.token))):
                    self.fail(refused.error)
                    return
            except HandlerFailed as failed:
                self.fail(failed.error)
                return
            except (OSError, TimeoutError):
                pass  # the server is away: try again after the backoff
            except Exception as exc:  # not ours to retry: end the feed, saying why
                self.fail(exc)
                return
            # jittered, so the clients of a restarted server do not all come back at once
            self.stopping.wait(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self.BACKOFF_MAX)

    def session(self) -> bool:
        """One connection, read until it drops; True if frames came. Raises Refused on an
        HTTP refusal of the handshake, OSError when the server cannot be reached."""
        after = self.resume_after()
        params = self.params + ([("after", str(after))] if after is not None else [])
        with contextlib.ExitStack() as stack:
            try:
                socket = stack.enter_context(
                    self.connect(
                        self.transport.websocket_url(self.path, params),
                        additional_headers=self.transport.headers(),
                        open_timeout=self.transport.timeout,
                        max_size=None,
                    )
                )
            except Exception as exc:
                response = getattr(exc, "response", None)
                if response is not None and hasattr(response, "status_code"):
                    raise Refused(problem_error(response.status_code, bytes(response.body or b""))) from exc
                if isinstance(exc, (OSError, TimeoutError)):
                    raise
                if type(exc).__module__.startswith("websockets"):
                    raise OSError(str(exc)) from exc
                raise
            return self.read(socket)
        raise AssertionError("unreachable: the block returns or raises")

    def read(self, socket: Any) -> bool:
        """Hand every frame of an open socket over until it closes; True if frames came."""
        self.connects += 1
        with self.lock:
            self.socket = socket
        received = False
        try:
            if self.stopping.is_set():
                return True
            for message in socket:
                received = True
                try:
                    self.on_frame(json.loads(message))
                except Exception as exc:
                    raise HandlerFailed(exc) from exc
        except HandlerFailed:
            raise
        except Exception as exc:
            if not type(exc).__module__.startswith("websockets") and not isinstance(exc, OSError):
                raise
        finally:
            with self.lock:
                self.socket = None
        return received

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.stopping.set()
        if self.on_error is not None:
            self.on_error(error)
        self.wake()


class RunningFeed(Generic[R]):
    """What a running feed is, whichever its route: a `FeedRunner` thread, the condition its
    waiters wait on (and the runner wakes when the feed ends), `offset`, `error`, `connects`,
    `close()` and a context manager. A subclass sets `state` (its position), then calls this
    `__init__` with the three things its runner asks of it."""

    state: EventState | LiveState[R]

    def __init__(
        self,
        api: ReadApi[R],
        route: str,
        params: Sequence[tuple[str, str]],
        resume_after: Callable[[], int | None],
        take: Callable[[JsonObject], None],
        gone: Callable[[ApiError], None],
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        self.resets = 0
        self.changed = threading.Condition()
        self.runner = FeedRunner(
            api.transport, f"/{route}/{api.spec.kebab}", params, resume_after, take, gone, on_error
        )
        self.runner.wake = self.wake
        self.runner.start()

    def wake(self) -> None:
        with self.changed:
            self.changed.notify_all()

    @property
    def offset(self) -> int:
        return self.state.offset

    @property
    def error(self) -> BaseException | None:
        return self.runner.error

    @property
    def connects(self) -> int:
        return self.runner.connects

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Subscription(RunningFeed[R]):
    """A running `/subscribe` feed: `handler(event)` gets every event once, in order, across
    reconnects. `offset` is the last offset handed over, `resets` counts 410s, `error` holds
    what ended it; `close()` stops it."""

    state: EventState

    def __init__(
        self,
        api: ReadApi[R],
        params: Sequence[tuple[str, str]],
        handler: Callable[[JsonObject], None],
        after: int | None,
        on_reset: Callable[[ApiError], None] | None,
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        websocket_connect()  # no websockets: refused before anything is asked
        self.api = api
        self.handler = handler
        self.on_reset = on_reset
        self.state = EventState(api.head() if after is None else after)
        super().__init__(api, "subscribe", params, self.resume_after, self.take, self.gone, on_error)

    def resume_after(self) -> int:
        self.state.disconnected()
        return self.state.resume_after()

    def take(self, frame: JsonObject) -> None:
        for event in self.state.take(frame):
            self.handler(event)
        with self.changed:
            self.changed.notify_all()

    def gone(self, error: ApiError) -> None:
        self.resets += 1
        self.state.restart(self.api.head())
        if self.on_reset is not None:
            self.on_reset(error)

    def wait_for_offset(self, offset: int, timeout: float) -> bool:
        """Block until every event up to `offset` was handed over (or the feed ended)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.state.offset >= offset or self.error is not None, timeout)


class LiveQuery(RunningFeed[R]):
    """A running `/live-query`: `records()` is the result set (id -> record), kept whole
    across reconnects; `on_change(records)` is called after each change it applies."""

    state: LiveState[R]

    def __init__(
        self,
        api: ReadApi[R],
        params: Sequence[tuple[str, str]],
        id_field: str,
        on_change: Callable[[dict[Any, R]], None] | None,
        on_reset: Callable[[ApiError], None] | None,
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        websocket_connect()  # no websockets: refused before anything is asked
        self.on_change = on_change
        self.on_reset = on_reset
        self.state = LiveState(id_field)
        super().__init__(api, "live-query", params, self.resume_after, self.take, self.gone, on_error)

    def resume_after(self) -> int | None:
        with self.changed:
            self.state.disconnected()
            return self.state.resume_after()

    def records(self) -> dict[Any, R]:
        """A copy of the result set, as of `offset`."""
        with self.changed:
            return dict(self.state.records)

    def take(self, frame: JsonObject) -> None:
        with self.changed:
            changed = self.state.take(frame)
            snapshot = dict(self.state.records) if changed else None
            self.changed.notify_all()
        if snapshot is not None and self.on_change is not None:
            self.on_change(snapshot)

    def gone(self, error: ApiError) -> None:
        self.resets += 1
        with self.changed:
            self.state.restart()
        if self.on_reset is not None:
            self.on_reset(error)

    def wait_until(self, test: Callable[[dict[Any, R]], bool], timeout: float) -> bool:
        """Block until `test(records)` holds on a whole set (or the feed ended)."""
        with self.changed:
            return self.changed.wait_for(
                lambda: (self.state.complete and test(self.state.records)) or self.error is not None, timeout
            )


def feed_by_name(
    apis: Mapping[str, ReadApi[Any]], model: str, query: Mapping[str, object], route: str
) -> tuple[ReadApi[Any], list[tuple[str, str]]]:
    """The reads of `model` (its declared or its route name) under `query["projection"]`,
    and the feed parameters of the rest of `query`: the untyped form of the per-model
    feed methods, for `Client.subscribe(model, query, handler)`."""
    api = apis.get(model)
    if api is None:
        raise QueryError(f"no model {model!r}: the models are {', '.join(sorted(apis))}")
    rest = dict(query)
    projection = rest.pop("projection", None)
    if projection is not None:
        api = ReadApi(api.transport, api.spec, str(projection))
    return api, api.feed_params(rest, route)
