// The generated TypeScript client of schemas/blog.dbs in headless Chromium
// (tests/clients/test_typescript_client.py): the page's own origin is not the server's, so
// REST goes through CORS and the feeds' token through the `bearer` subprotocol.
//
// The page checks CRUD and a typed error, starts a subscription of User and a live query of
// admins, and sets #phase to "ready". The test then writes, restarts the server and writes
// again, and calls `window.finish(head)`: the page waits until the subscription has handed
// over every event up to `head` and the live set equals a fresh list, and writes one JSON
// object into #result for the test to check against the server's log.
import { ChangeEvent, Client, ConstraintViolationError, User } from "./blog.js";

declare global {
  interface Window {
    finish: (head: number) => void;
  }
}

function show(id: string, text: string): void {
  document.getElementById(id)!.textContent = text;
}

async function run(): Promise<object> {
  const params = new URLSearchParams(location.search);
  const client = new Client(params.get("server") ?? "", { token: () => params.get("token") });
  const id = await client.user.create({ email: "web@example.com", name: "Web", role: "editor" });
  const listed = await client.user.list({ role: "editor", sort: "name" });
  let refusal = "";
  try {
    await client.user.create({ email: "bad@example.com", name: "" });
  } catch (error) {
    refusal = error instanceof ConstraintViolationError ? `${error.status} ${error.code} ${error.errors[0]?.field}` : String(error);
  }

  const events: ChangeEvent<User>[] = [];
  const subscription = client.user.subscribe({}, (event) => events.push(event));
  await subscription.started;
  const live = client.user.liveQuery({ role: "admin" });
  await live.waitUntil(() => true, 30000);
  const head = await new Promise<number>((resolve) => {
    window.finish = resolve;
    show("phase", "ready");
  });

  const reached = await subscription.waitForOffset(head, 60000);
  const fresh = new Map<unknown, User>();
  for await (const user of client.user.iterate({ role: "admin" })) fresh.set(user.id, user);
  const same = (records: Map<unknown, User>) =>
    records.size === fresh.size && [...fresh].every(([key, user]) => JSON.stringify(records.get(key)) === JSON.stringify(user));
  const liveEqual = await live.waitUntil(same, 60000);
  subscription.close();
  live.close();
  return {
    id,
    listed: listed.data.map((u) => u.id),
    refusal,
    reached,
    liveEqual,
    events: events.map((e) => [e.offset, e.kind, e.id, e.record ?? null]),
    connects: [subscription.connects, live.connects],
    errors: [String(subscription.error), String(live.error)],
  };
}

run().then(
  (result) => show("result", JSON.stringify(result)),
  (error: unknown) => show("result", "error: " + String(error)),
);
