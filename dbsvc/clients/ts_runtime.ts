// The fixed part of every generated TypeScript client (dbsvc/clients/typescript.py copies
// what follows the marker below into the file it writes, after its header). It is a real
// TypeScript file so that `tsc --strict` reads it on its own too (tests/clients).
//
// REST goes through `fetch` (the platform's, or one passed in); feeds through the
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

// --- client body ---

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A bearer token, a function returning a fresh one (called for every request and every
 * reconnect, so it may refresh an expired token), or null for a server without the guard. */
export type Token = string | null | undefined | (() => string | null | Promise<string | null>);

/** One violation of a 422 `constraint_violation`. */
export interface FieldError {
  field: string;
  message: string;
}

/** A problem+json body (RFC 9457) as the server answers it. */
export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  code: string;
  detail: string;
  request_id?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

/** Every error this client throws. */
export class ClientError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The server could not be reached, or answered something that is not HTTP/JSON. */
export class TransportError extends ClientError {}

/** A query key the model's route does not take (thrown before any request, for callers
 * without the types). */
export class QueryError extends ClientError {}

/** A problem answer. Branch on the class or on `code`, never on `detail`. */
export class ApiError extends ClientError {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly errors: FieldError[];
  readonly problem: ProblemBody;

  constructor(status: number, problem: ProblemBody) {
    super(`HTTP ${status} ${problem.code}: ${problem.detail}`);
    this.status = status;
    this.code = problem.code;
    this.detail = problem.detail;
    this.errors = Array.isArray(problem.errors) ? problem.errors : [];
    this.problem = problem;
  }
}

type ApiErrorClass = new (status: number, problem: ProblemBody) => ApiError;

function problemError(status: number, text: string, classes: Record<string, ApiErrorClass>): ApiError {
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  const problem: ProblemBody =
    body !== null && typeof body === "object" && typeof (body as ProblemBody).code === "string"
      ? (body as ProblemBody)
      : { type: "about:blank", title: "", status, code: "", detail: text.slice(0, 200) };
  const Class = classes[problem.code] ?? ApiError;
  return new Class(status, problem);
}

/** The part of a WebSocket this client uses: the browser's, Node 22's, or `ws`'s. */
export interface WebSocketLike {
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

export interface ClientOptions {
  /** See `Token`. */
  token?: Token;
  /** The `fetch` to use (default: the platform's). */
  fetch?: typeof fetch;
  /** The WebSocket class feeds use (default: the platform's). */
  WebSocket?: WebSocketConstructor;
}

type Params = [string, string][];

interface Reply {
  status: number;
  headers: Headers;
  body: unknown;
}

function queryString(params: Params): string {
  return params.length ? "?" + params.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&") : "";
}

function headerInt(headers: Headers, name: string): number | null {
  const value = headers.get(name);
  return value !== null && /^\d+$/.test(value) ? Number(value) : null;
}

export class Transport {
  readonly base: string;
  readonly token: Token;
  readonly classes: Record<string, ApiErrorClass>;
  private readonly fetcher: typeof fetch;
  private readonly socketClass: WebSocketConstructor | undefined;

  constructor(baseUrl: string, options: ClientOptions, classes: Record<string, ApiErrorClass>) {
    let url: URL;
    try {
      url = new URL(baseUrl);
    } catch {
      throw new TypeError(`baseUrl ${JSON.stringify(baseUrl)} is not a server URL: expected http://HOST:PORT or https://HOST`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`baseUrl ${JSON.stringify(baseUrl)} is not a server URL: expected http://HOST:PORT or https://HOST`);
    }
    this.base = url.origin + url.pathname.replace(/\/+$/, "");
    this.token = options.token;
    this.classes = classes;
    const platformFetch = typeof fetch === "function" ? fetch.bind(globalThis) : undefined;
    const chosen = options.fetch ?? platformFetch;
    if (chosen === undefined) throw new ClientError("no fetch: pass options.fetch");
    this.fetcher = chosen;
    const platformSocket = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    this.socketClass = options.WebSocket ?? platformSocket;
  }

  /** The token to send now: the value, or what the token function returns. */
  async bearer(): Promise<string | null> {
    const token = this.token;
    return (typeof token === "function" ? await token() : token) ?? null;
  }

  async request(method: string, path: string, params: Params = [], body?: unknown, headers?: Record<string, string>): Promise<Reply> {
    const target = this.base + path + queryString(params);
    const sent: Record<string, string> = { ...(headers ?? {}) };
    const token = await this.bearer();
    if (token) sent["Authorization"] = `Bearer ${token}`;
    if (body !== undefined) sent["Content-Type"] = "application/json";
    let response: Response;
    try {
      response = await this.fetcher(target, { method, headers: sent, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (error) {
      throw new TransportError(`${method} ${target}: ${String(error)}`);
    }
    const text = await response.text();
    if (response.status >= 400) throw problemError(response.status, text, this.classes);
    let parsed: unknown = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        throw new TransportError(`${method} ${target}: the answer is not JSON: ${text.slice(0, 200)}`);
      }
    }
    return { status: response.status, headers: response.headers, body: parsed };
  }

  socket(path: string, params: Params, token: string | null): WebSocketLike {
    if (this.socketClass === undefined) {
      throw new ClientError(
        "feeds need a WebSocket: pass options.WebSocket (Node 20: the 'ws' package, or node --experimental-websocket)",
      );
    }
    const url = this.base.replace(/^http/, "ws") + path + queryString(params);
    // Browsers cannot set Authorization on a WebSocket: the token travels as a subprotocol.
    return token ? new this.socketClass(url, ["bearer", `bearer.${token}`]) : new this.socketClass(url);
  }

  /** Why a handshake of `path` failed, asked over HTTP: the problem, or null (it would
   * have taken the upgrade, or the server is away). */
  async refusal(path: string, params: Params): Promise<ApiError | null> {
    try {
      await this.request("GET", path, params);
      return null;
    } catch (error) {
      if (error instanceof ApiError && error.status !== 426) return error;
      return null;
    }
  }

  wantsSocket(): void {
    if (this.socketClass === undefined) this.socket("", [], null);
  }
}

/** A query value as the server parses it: booleans `true`/`false`, numbers as JSON. */
function wireValue(value: unknown): string {
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number") return JSON.stringify(value);
  return String(value);
}

/** What one model's routes take, generated from the schema. */
export interface QuerySpec {
  model: string;
  kebab: string;
  idField: string;
  listKeys: readonly string[];
  feedKeys: readonly string[];
  unkeyed: readonly string[]; // projections without the id field
}

function encodeQuery(spec: QuerySpec, query: object, allowed: readonly string[], route: string): Params {
  const params: Params = [];
  for (const [key, value] of Object.entries(query)) {
    if (!allowed.includes(key)) {
      throw new QueryError(`${spec.model} ${route} takes no key ${JSON.stringify(key)}; it takes: ${[...allowed].sort().join(", ")}`);
    }
    if (value === undefined || value === null) continue;
    if ((key === "sort" || key === "expand") && Array.isArray(value)) params.push([key, value.map(String).join(",")]);
    else if (Array.isArray(value)) for (const v of value) params.push([key, wireValue(v)]);
    else params.push([key, wireValue(value)]);
  }
  return params;
}

/** One list page: `data`, `total` (every match), `limit`, `offset`, and from the headers
 * `nextCursor` (the `Link` rel="next" cursor; null on the last page), `watermark` and `head`
 * (`Dbsvc-Offset`: subscribe after it to miss nothing). */
export interface Page<R> {
  data: R[];
  total: number;
  limit: number;
  offset: number;
  nextCursor: string | null;
  watermark: number | null;
  head: number | null;
}

/** One record with its `etag` (send it back as `ifMatch`), `watermark` and `head`. */
export interface Fetched<R> {
  record: R;
  etag: string | null;
  watermark: number | null;
  head: number | null;
}

/** The `cursor` of a `Link: <...>; rel="next"` header (RFC 8288), else null. */
export function nextCursor(link: string | null): string | null {
  if (!link) return null;
  for (const part of link.split(",")) {
    const match = /^\s*<([^>]*)>\s*;(.*)$/.exec(part);
    if (!match || !/rel="next"/.test(match[2].replace(/\s/g, ""))) continue;
    const query = match[1].split("?")[1] ?? "";
    for (const pair of query.split("&")) {
      const [name, value] = pair.split("=");
      if (name === "cursor") return decodeURIComponent(value ?? "");
    }
  }
  return null;
}

/** `{"$op": index}`: the id op `index` of the same batch wrote, as an id or a @ref value. */
export interface OpRef {
  $op: number;
}
export function opRef(index: number): OpRef {
  return { $op: index };
}

/** One op of `Client.batch`, made by `<model>.createOp(...)` and the like. */
export interface BatchOp {
  op: "create" | "update" | "patch" | "delete";
  model: string;
  id?: unknown;
  record?: unknown;
  if_match?: string;
}

/** What `POST /batch` answers: one result per op, the offsets of the first and last rows. */
export interface BatchResult {
  results: { status: number; id: Json; etag: string; record?: { [key: string]: Json } }[];
  first: number;
  last: number;
}

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
    api.transport.wantsSocket();
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
    api.transport.wantsSocket();
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

/** One model's routes under one projection (null: whole records). The generated classes of
 * each model add the typed methods, which call these. */
export class ReadApi<R> {
  readonly idField: string | null;
  readonly path: string;

  constructor(
    readonly transport: Transport,
    readonly spec: QuerySpec,
    readonly projection: string | null = null,
  ) {
    this.idField = projection !== null && spec.unkeyed.includes(projection) ? null : spec.idField;
    this.path = `/api/${spec.kebab}`;
  }

  protected params(query: object, allowed: readonly string[], route: string): Params {
    const params = encodeQuery(this.spec, query, allowed, route);
    if (this.projection !== null) params.push(["projection", this.projection]);
    return params;
  }

  feedParams(query: object, route: string): Params {
    return this.params(query, this.spec.feedKeys, route);
  }

  protected async fetchOne(id: unknown, query: object): Promise<Fetched<R>> {
    const reply = await this.transport.request("GET", `${this.path}/${encodeURIComponent(String(id))}`, this.params(query, ["as_of", "expand"], "get"));
    return {
      record: reply.body as R,
      etag: reply.headers.get("etag"),
      watermark: headerInt(reply.headers, "dbsvc-watermark"),
      head: headerInt(reply.headers, "dbsvc-offset"),
    };
  }

  protected async listPage(query: object): Promise<Page<R>> {
    const reply = await this.transport.request("GET", this.path, this.params(query, this.spec.listKeys, "list"));
    const body = reply.body as { data: R[]; total: number; limit: number; offset: number };
    return {
      data: body.data,
      total: body.total,
      limit: body.limit,
      offset: body.offset,
      nextCursor: nextCursor(reply.headers.get("link")),
      watermark: headerInt(reply.headers, "dbsvc-watermark"),
      head: headerInt(reply.headers, "dbsvc-offset"),
    };
  }

  protected async *allPages(query: object): AsyncGenerator<Page<R>> {
    let page = await this.listPage(query);
    yield page;
    const rest = Object.fromEntries(Object.entries(query).filter(([key]) => key !== "offset"));
    while (page.nextCursor !== null) {
      page = await this.listPage({ ...rest, cursor: page.nextCursor });
      yield page;
    }
  }

  /** The server's change-stream head now (`Dbsvc-Offset` of an empty page). */
  async head(): Promise<number> {
    const reply = await this.transport.request("GET", this.path, [["limit", "0"]]);
    return headerInt(reply.headers, "dbsvc-offset") ?? 0;
  }

  protected async createOne(record: object): Promise<Json> {
    const reply = await this.transport.request("POST", this.path, [], record);
    return (reply.body as { id: Json }).id;
  }

  protected async writeOne(method: string, id: unknown, record: object, ifMatch: string | undefined): Promise<unknown> {
    const headers = ifMatch !== undefined ? { "If-Match": ifMatch } : undefined;
    const reply = await this.transport.request(method, `${this.path}/${encodeURIComponent(String(id))}`, [], record, headers);
    return reply.body;
  }

  protected async deleteOne(id: unknown, ifMatch: string | undefined): Promise<void> {
    const headers = ifMatch !== undefined ? { "If-Match": ifMatch } : undefined;
    await this.transport.request("DELETE", `${this.path}/${encodeURIComponent(String(id))}`, [], undefined, headers);
  }

  protected op(op: BatchOp["op"], id: unknown, record: object | undefined, ifMatch: string | undefined): BatchOp {
    const built: BatchOp = { op, model: this.spec.kebab };
    if (id !== undefined) built.id = id;
    if (record !== undefined) built.record = record;
    if (ifMatch !== undefined) built.if_match = ifMatch;
    return built;
  }

  /** The untyped form of the generated `subscribe` (for `Client.subscribe(model, ...)`). */
  startSubscription(query: object, handler: (event: ChangeEvent<R>) => void, options: FeedOptions): Subscription<R> {
    return new Subscription<R>(this, this.feedParams(query, "subscribe"), handler, options);
  }

  /** The untyped form of the generated `liveQuery`. */
  startLiveQuery(query: object, options: LiveOptions<R>): LiveQuery<R> {
    if (this.idField === null) {
      throw new QueryError(`a live query of ${this.spec.model} needs the id field; projection ${JSON.stringify(this.projection)} leaves it out`);
    }
    return new LiveQuery<R>(this, this.feedParams(query, "live_query"), this.idField, options);
  }
}

/** The service as a whole: the generated `Client` extends this with one member per model. */
export class ClientBase {
  readonly transport: Transport;

  constructor(baseUrl: string, options: ClientOptions, classes: Record<string, ApiErrorClass>) {
    this.transport = new Transport(baseUrl, options, classes);
  }

  /** POST /batch: every op or none; a refusal throws the one op's problem
   * (`problem["op"]` is its index). */
  async batch(ops: BatchOp[]): Promise<BatchResult> {
    const reply = await this.transport.request("POST", "/batch", [], { ops });
    return reply.body as BatchResult;
  }

  /** GET /snapshot: watermarks, epoch, head offset, the server's schema fingerprint. */
  async snapshot(): Promise<{ [key: string]: Json }> {
    return (await this.transport.request("GET", "/snapshot")).body as { [key: string]: Json };
  }
}
