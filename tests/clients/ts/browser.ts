// The generated TypeScript client of schemas/blog.dbs in headless Chromium
// (tests/clients/test_typescript_client.py): the page's own origin is not the server's, so
// REST goes through CORS and the feed's token through the `bearer` subprotocol. The result
// is written into #result as one JSON object; the test reads it.
import { ChangeEvent, Client, ConstraintViolationError, User } from "./blog.js";

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
  const subscription = client.user.subscribe({ role: "admin" }, (event) => events.push(event));
  await subscription.started;
  const live = client.user.liveQuery({ role: "admin" });
  await live.waitUntil(() => true, 30000);
  const admin = await client.user.create({ email: "root@example.com", name: "Root", role: "admin" });
  const head = await client.user.head();
  const reached = await subscription.waitForOffset(head, 30000);
  const inLive = await live.waitUntil((records) => records.has(admin), 30000);
  subscription.close();
  live.close();
  return {
    id,
    listed: listed.data.map((u) => u.id),
    refusal,
    reached,
    inLive,
    events: events.map((e) => [e.kind, e.id]),
    errors: [String(subscription.error), String(live.error)],
  };
}

run().then(
  (result) => {
    document.getElementById("result")!.textContent = JSON.stringify(result);
  },
  (error: unknown) => {
    document.getElementById("result")!.textContent = "error: " + String(error);
  },
);
