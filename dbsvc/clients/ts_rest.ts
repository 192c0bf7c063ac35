// The fixed REST part of every generated TypeScript client: dbsvc/clients/typescript.py
// copies what follows the marker below into the file it writes, after its header, then
// ts_feeds.ts's part. Each part is real TypeScript, and the imports above the marker make
// it one with the other, so `tsc --strict` reads the pair on its own too.
//
// REST goes through `fetch` (the platform's, or one passed in): errors (a class per problem
// code, generated), the transport, query encoding checked at run time for callers without
// the types, pages and their `Link` cursors, one record with its ETag, batches, and
// `ReadApi`, which the generated classes of each model extend with typed methods.
// No dependency.

import { ChangeEvent, FeedOptions, LiveOptions, LiveQuery, Subscription } from "./ts_feeds";

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

export type Params = [string, string][];

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
  /** The highest `Dbsvc-Offset` a write of this client was answered with: sent with every
   * read as `Dbsvc-After`, so a replica or worker that answers it holds this client's writes. */
  private written = 0;

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
    const read = method === "GET" || method === "HEAD";
    if (read && this.written > 0) sent["Dbsvc-After"] = String(this.written);
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
    const offset = read ? null : headerInt(response.headers, "dbsvc-offset");
    if (offset !== null && offset > this.written) this.written = offset;
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

  /** The WebSocket class feeds use, or a ClientError naming the fix (a feed asks this
   * before it asks anything of the server). */
  webSocketClass(): WebSocketConstructor {
    if (this.socketClass === undefined) {
      throw new ClientError(
        "feeds need a WebSocket: pass options.WebSocket (Node 20: the 'ws' package, or node --experimental-websocket)",
      );
    }
    return this.socketClass;
  }

  socket(path: string, params: Params, token: string | null): WebSocketLike {
    const Socket = this.webSocketClass();
    const url = this.base.replace(/^http/, "ws") + path + queryString(params);
    // Browsers cannot set Authorization on a WebSocket: the token travels as a subprotocol.
    return token ? new Socket(url, ["bearer", `bearer.${token}`]) : new Socket(url);
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
