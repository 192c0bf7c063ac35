// The TypeScript client's feed loop (FeedRunner.run, rule 3 of ts_feeds.ts: reconnect with
// backoff, 50 ms doubling to 5 s, started over after a connection that brought frames), sans-IO:
// each WebSocket the feed opens is a scripted one that plays the next step (open, its frames,
// a close with 1001) and setTimeout records the backoff waits instead of sleeping them. No
// server, no network; fetch is never needed (`after` is given and every socket opens).
// tests/clients/test_typescript_feed_state.py compares the printed JSON line with literals.
import { Client, WebSocketLike } from "./blog.js";

type Frame = { [key: string]: unknown };
const insert = (offset: number, id: number): Frame => ({ kind: "insert", model: "User", offset, id });

// 3 drops with nothing, one connection that brings two events, then 8 drops with nothing.
const script: Frame[][] = [[], [], [], [insert(5, 1), insert(6, 2)], [], [], [], [], [], [], [], []];
const urls: string[] = [];
const waits: number[] = [];
const fetched: string[] = [];
const handed: string[] = [];

const realSetTimeout = globalThis.setTimeout;
const HANDSHAKE_MS = 30000; // the handshake's own timer: real, and cleared once the socket opens
globalThis.setTimeout = ((callback: () => void, ms?: number) => {
  if (ms === HANDSHAKE_MS) return realSetTimeout(callback, ms);
  waits.push(ms ?? 0);
  return realSetTimeout(callback, 0);
}) as unknown as typeof setTimeout;

let stop: () => void = () => undefined;

class ScriptedSocket implements WebSocketLike {
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;

  constructor(url: string) {
    urls.push(url);
    const step = script.shift();
    realSetTimeout(() => {
      if (step === undefined) {
        stop(); // the script is over: the caller closes the feed
        return;
      }
      this.onopen?.({});
      for (const frame of step) this.onmessage?.({ data: JSON.stringify(frame) });
      this.onclose?.({ code: 1001, reason: "going away" });
    }, 0);
  }

  close(): void {
    this.onclose?.({ code: 1000, reason: "client closed the feed" });
  }
}

const client = new Client("http://127.0.0.1:9", {
  WebSocket: ScriptedSocket,
  fetch: (async (input: unknown) => {
    fetched.push(String(input));
    throw new Error("no network in this test");
  }) as typeof fetch,
});
const subscription = client.user.subscribe({}, (event) => handed.push(`${event.kind}:${event.offset}`), { after: 4 });
await new Promise<void>((resolve) => {
  stop = () => {
    subscription.close();
    resolve();
  };
});
console.log(
  JSON.stringify({
    waits,
    afters: urls.map((url) => new URL(url).searchParams.get("after")),
    handed,
    connects: subscription.connects,
    error: String(subscription.error),
    fetched,
  }),
);
