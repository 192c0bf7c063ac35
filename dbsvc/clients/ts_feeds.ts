// The fixed feeds part of every generated TypeScript client, after ts_rest.ts's part
// (dbsvc/clients/typescript.py copies what follows the marker below). Feeds go through the
// platform's `WebSocket` (browsers, Node 22) or one passed in (Node 20: the `ws` package,
// or `node --experimental-websocket`). No other dependency.
//
// Feeds (the same rules as the Python client's, dbsvc/clients/py_realtime.py):
// 1. A subscription starts after `after`, or else after the head an empty list reports
//    (`Dbsvc-Offset`): fetch, take the offset, subscribe with `after=`.
// 2. Frames with `batch` are held until the frame whose `batch` has `end`, then handed over
//    together; a frame without `batch` at once.
// 3. On any disconnect (1013 lagged, 1001 going away, 4401 token expired, a network loss) the
//    held frames are dropped and the feed reconnects with backoff (50 ms doubling to 5 s)
//    after the last offset handed over. A subscription asks for one offset earlier and
//    drops what it already handed over at that offset (a row's `link` events share its
//    offset): every event once, in order. A live query resumes once its Init was complete.
// 4. The token function is called on every connect, so 4401 and a 401 get a fresh token;
//    a fixed token that is refused ends the feed.
// 5. 410 `offset_gone`: a subscription restarts at the head, a live query from a fresh Init;
//    both call `onReset`, so the caller knows events were missed.
// 6. Any other refusal ends the feed: `error` holds it and `onError` is called.
// A browser does not say why a WebSocket handshake failed; the client then asks the same
// URL over HTTP, which answers the same refusal (a problem+json) or 426 when the route
// would have taken the upgrade (the server was away: try again).

import { ApiError, Json, Params, ReadApi, Transport, TransportError, WebSocketLike } from "./ts_rest";

// --- client body ---
/** The `batch` mark of a feed frame written by a batch (docs/realtime.md, "Batches"). */
export interface BatchMark {
  first: number;
  last: number;
  end?: boolean;
}

/** A /subscribe event: a row's insert, update or delete, or a `link` it caused. */
export interface ChangeEvent<R> {
  kind: "insert" | "update" | "delete" | "link";
  model: string;
  id: Json;
  offset: number;
  record?: R;
  batch?: BatchMark;
  [extra: string]: unknown;
}

export interface FeedOptions {
  /** Start after this offset (default: the head now, so nothing from before). */
  after?: number;
  /** Called after a 410 offset_gone made the feed start again (events were missed). */
  onReset?: (error: ApiError) => void;
  /** Called once with what ended the feed (a refusal, a handler that threw). */
  onError?: (error: unknown) => void;
}

export interface LiveOptions<R> {
  /** Called with the whole result set after each change the live query applied. */
  onChange?: (records: Map<Json, R>) => void;
  onReset?: (error: ApiError) => void;
  onError?: (error: unknown) => void;
}

type Frame = { [key: string]: unknown };

function batchOpen(frame: Frame): boolean {
  const batch = frame["batch"] as BatchMark | undefined;
  return typeof batch === "object" && batch !== null && !batch.end;
}

function eventKey(frame: Frame): string {
  return JSON.stringify([frame["offset"], frame["kind"], frame["id"], frame["child_model"], frame["child_id"], frame["field"], frame["linked"]]);
}

/** A subscription's position: what it handed over, what it holds, where to resume. */
export class EventState {
  offset: number;
  private seen = new Set<string>();
  private held: Frame[] = [];

  constructor(after: number) {
    this.offset = after;
  }

  resumeAfter(): number {
    return this.seen.size ? this.offset - 1 : this.offset;
  }

  /** The events to hand over now, in order (none while a batch is open). */
  take(frame: Frame): Frame[] {
    const offset = Number(frame["offset"] ?? 0);
    if (offset < this.offset || (offset === this.offset && this.seen.has(eventKey(frame)))) return [];
    this.held.push(frame);
    if (batchOpen(frame)) return [];
    const out = this.held;
    this.held = [];
    for (const event of out) {
      const at = Number(event["offset"] ?? 0);
      if (at > this.offset) {
        this.offset = at;
        this.seen = new Set();
      }
      this.seen.add(eventKey(event));
    }
    return out;
  }

  disconnected(): void {
    this.held = [];
  }

  restart(head: number): void {
    this.offset = head;
    this.seen = new Set();
    this.held = [];
  }
}

/** A live query's result set, keyed by id, as of `offset` once `complete`. */
export class LiveState<R> {
  records = new Map<Json, R>();
  offset = 0;
  complete = false;
  private filling: Map<Json, R> | null = null;
  private held: Frame[] = [];

  constructor(readonly idField: string) {}

  resumeAfter(): number | null {
    return this.complete ? this.offset : null;
  }

  /** Apply one frame; true when the set changed. */
  take(frame: Frame): boolean {
    if (frame["type"] === "Init") {
      if (this.filling === null) this.filling = new Map();
      for (const record of (frame["records"] as { [key: string]: Json }[]) ?? []) {
        this.filling.set(record[this.idField], record as R);
      }
      if (frame["complete"] === false) return false;
      this.records = this.filling;
      this.filling = null;
      this.offset = Number(frame["offset"] ?? 0);
      this.complete = true;
      return true;
    }
    if (Number(frame["offset"] ?? 0) <= this.offset && !this.held.length) return false;
    this.held.push(frame);
    if (batchOpen(frame)) return false;
    const deltas = this.held;
    this.held = [];
    for (const delta of deltas) {
      if (delta["type"] === "Added" || delta["type"] === "Updated") {
        const record = delta["record"] as { [key: string]: Json };
        this.records.set(record[this.idField], record as R);
      } else if (delta["type"] === "Removed") {
        this.records.delete(delta["id"] as Json);
      }
      this.offset = Math.max(this.offset, Number(delta["offset"] ?? 0));
    }
    return true;
  }

  disconnected(): void {
    this.held = [];
    if (!this.complete) this.filling = null;
  }

  restart(): void {
    this.complete = false;
    this.filling = null;
    this.held = [];
  }
}

class Refused extends Error {
  constructor(readonly error: ApiError) {
    super(error.message);
  }
}

const BACKOFF_FIRST = 50;
const BACKOFF_MAX = 5000;
const HANDSHAKE_TIMEOUT = 30000;

/** Keeps one feed connected (rules 3 to 6 above). */
class FeedRunner {
  connects = 0;
  error: unknown = null;
  stopped = false;
  private socket: WebSocketLike | null = null;
  private wakeSleep: () => void = () => undefined;
  ended: () => void = () => undefined;

  constructor(
    private readonly transport: Transport,
    private readonly path: string,
    private readonly params: Params,
    private readonly resumeAfter: () => number | null,
    private readonly onFrame: (frame: Frame) => void,
    private readonly onGone: (error: ApiError) => Promise<void>,
    private readonly onError: ((error: unknown) => void) | undefined,
  ) {}

  start(): void {
    void this.run();
  }

  close(): void {
    this.stopped = true;
    this.socket?.close(1000, "client closed the feed");
    this.wakeSleep();
    this.ended();
  }

  private async run(): Promise<void> {
    let delay = BACKOFF_FIRST;
    while (!this.stopped) {
      try {
        if (await this.session()) delay = BACKOFF_FIRST; // frames came: the next drop starts over
      } catch (error) {
        if (this.stopped) return;
        if (error instanceof Refused) {
          const { status, code } = error.error;
          if (code === "offset_gone") {
            await this.onGone(error.error);
            continue;
          }
          if (!(status >= 500 || (status === 401 && typeof this.transport.token === "function"))) {
            this.fail(error.error);
            return;
          }
        } else if (!(error instanceof TransportError)) {
          this.fail(error);
          return;
        }
      }
      if (this.stopped) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.wakeSleep = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      delay = Math.min(delay * 2, BACKOFF_MAX);
    }
  }

  /** One connection, read until it closes: true if frames came. Rejects with Refused
   * when the handshake was refused, TransportError when the server could not be reached. */
  private async session(): Promise<boolean> {
    const after = this.resumeAfter();
    const params: Params = after === null ? [...this.params] : [...this.params, ["after", String(after)]];
    const token = await this.transport.bearer();
    if (this.stopped) return false;
    const socket = this.transport.socket(this.path, params, token);
    this.socket = socket;
    const outcome = await new Promise<{ opened: boolean; received: boolean; failure: unknown }>((resolve) => {
      let opened = false;
      let received = false;
      let failure: unknown = null;
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        clearTimeout(handshake);
        resolve({ opened, received, failure });
      };
      // Node 20's WebSocket may report a refused connection by `error` alone, with no
      // `close`; and a handshake that hangs must end too.
      const handshake = setTimeout(() => {
        if (!opened) {
          socket.close();
          finish();
        }
      }, HANDSHAKE_TIMEOUT);
      socket.onopen = () => {
        opened = true;
        clearTimeout(handshake);
        this.connects += 1;
      };
      socket.onmessage = (event) => {
        if (this.stopped || failure !== null) return;
        received = true;
        try {
          this.onFrame(JSON.parse(String(event.data)) as Frame);
        } catch (error) {
          failure = error;
          socket.close(1000, "client handler failed");
        }
      };
      socket.onerror = () => {
        if (!opened) finish(); // else the close that follows says what happened
      };
      socket.onclose = finish;
    });
    this.socket = null;
    if (outcome.failure !== null) throw outcome.failure;
    if (!outcome.opened && !this.stopped) {
      const refusal = await this.transport.refusal(this.path, params);
      if (refusal !== null) throw new Refused(refusal);
      throw new TransportError(`${this.path}: the WebSocket did not open`);
    }
    return outcome.received;
  }

  private fail(error: unknown): void {
    this.error = error;
    this.stopped = true;
    this.onError?.(error);
    this.ended();
  }
}

/** Waiters on a feed's progress, woken by each change and by its end. */
class Waiters {
  private list: (() => void)[] = [];

  wake(): void {
    const list = this.list;
    this.list = [];
    for (const wake of list) wake();
  }

  /** Resolve true once `test()` holds, false after `timeoutMs` or when the feed ended. */
  until(test: () => boolean, ended: () => boolean, timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const deadline = Date.now() + timeoutMs;
      const check = () => {
        if (test()) return resolve(true);
        if (ended() || Date.now() >= deadline) return resolve(false);
        const timer = setTimeout(check, Math.max(0, deadline - Date.now()));
        this.list.push(() => {
          clearTimeout(timer);
          check();
        });
      };
      check();
    });
  }
}

/** A running `/subscribe` feed: `handler(event)` gets every event once, in order, across
 * reconnects. `offset` is the last offset handed over, `resets` counts 410s, `error` holds
 * what ended it; `close()` stops it. */
export class Subscription<R> {
  resets = 0;
  private state: EventState | null = null;
  private readonly runner: FeedRunner;
  private readonly waiters = new Waiters();
  /** Resolves once the feed knows where it starts (the head, when no `after` was given). */
  readonly started: Promise<void>;

  constructor(api: ReadApi<R>, params: Params, handler: (event: ChangeEvent<R>) => void, options: FeedOptions) {
    api.transport.webSocketClass(); // none: refused before anything is asked
    this.runner = new FeedRunner(
      api.transport,
      `/subscribe/${api.spec.kebab}`,
      params,
      () => {
        this.state!.disconnected();
        return this.state!.resumeAfter();
      },
      (frame) => {
        for (const event of this.state!.take(frame)) handler(event as ChangeEvent<R>);
        this.waiters.wake();
      },
      async (error) => {
        this.resets += 1;
        this.state!.restart(await api.head());
        options.onReset?.(error);
      },
      options.onError,
    );
    this.runner.ended = () => this.waiters.wake();
    this.started = this.begin(api, options);
  }

  private async begin(api: ReadApi<R>, options: FeedOptions): Promise<void> {
    try {
      this.state = new EventState(options.after ?? (await api.head()));
    } catch (error) {
      this.runner.error = error;
      this.runner.stopped = true;
      options.onError?.(error);
      this.waiters.wake();
      return;
    }
    if (!this.runner.stopped) this.runner.start();
  }

  get offset(): number {
    return this.state?.offset ?? 0;
  }
  get error(): unknown {
    return this.runner.error;
  }
  get connects(): number {
    return this.runner.connects;
  }

  /** Resolves true once every event up to `offset` was handed over (false: timeout or end). */
  waitForOffset(offset: number, timeoutMs = 30000): Promise<boolean> {
    return this.waiters.until(() => this.offset >= offset, () => this.runner.stopped, timeoutMs);
  }

  close(): void {
    this.runner.close();
  }
}

/** A running `/live-query`: `records` is the result set (id -> record), kept whole across
 * reconnects; `onChange(records)` is called after each change it applies. */
export class LiveQuery<R> {
  resets = 0;
  private readonly state: LiveState<R>;
  private readonly runner: FeedRunner;
  private readonly waiters = new Waiters();

  constructor(api: ReadApi<R>, params: Params, idField: string, options: LiveOptions<R>) {
    api.transport.webSocketClass(); // none: refused before anything is asked
    this.state = new LiveState<R>(idField);
    this.runner = new FeedRunner(
      api.transport,
      `/live-query/${api.spec.kebab}`,
      params,
      () => {
        this.state.disconnected();
        return this.state.resumeAfter();
      },
      (frame) => {
        const changed = this.state.take(frame);
        this.waiters.wake();
        if (changed) options.onChange?.(new Map(this.state.records));
      },
      async (error) => {
        this.resets += 1;
        this.state.restart();
        options.onReset?.(error);
      },
      options.onError,
    );
    this.runner.ended = () => this.waiters.wake();
    this.runner.start();
  }

  /** A copy of the result set, as of `offset`. */
  get records(): Map<Json, R> {
    return new Map(this.state.records);
  }
  get offset(): number {
    return this.state.offset;
  }
  get complete(): boolean {
    return this.state.complete;
  }
  get error(): unknown {
    return this.runner.error;
  }
  get connects(): number {
    return this.runner.connects;
  }

  /** Resolves true once `test(records)` holds on a whole set (false: timeout or end). */
  waitUntil(test: (records: Map<Json, R>) => boolean, timeoutMs = 30000): Promise<boolean> {
    return this.waiters.until(() => this.state.complete && test(this.state.records), () => this.runner.stopped, timeoutMs);
  }

  close(): void {
    this.runner.close();
  }
}

