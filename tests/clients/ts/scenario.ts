// The generated TypeScript client of schemas/blog.dbs against a real server, in Node
// (tests/clients/test_typescript_client.py compiles this file beside the generated client
// with `tsc --strict` and runs it under `node --experimental-websocket`).
//
// argv: PORT. It checks CRUD, ETags, typed errors and a batch on its own (node:assert),
// prints `CRUD ok`, starts a subscription of User and a live query of admins, prints
// `READY`, and waits for one line `HEAD <n>` on stdin: the test writes, restarts the server
// and writes again meanwhile. Then it waits until the subscription has handed over every
// event up to n and the live set equals a fresh list, and prints one JSON line: the events
// and the live set's ids, for the test to check against the server's log.
import assert from "node:assert/strict";
import { createInterface } from "node:readline";

import {
  ApiError,
  ChangeEvent,
  Client,
  ConstraintViolationError,
  NotFoundError,
  PreconditionFailedError,
  QueryError,
  ReferencedError,
  UniqueViolationError,
  User,
} from "./blog.js";

async function rejects<E>(promise: Promise<unknown>, cls: new (...args: never[]) => E): Promise<E> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof cls, `expected ${cls.name}, got ${String(error)}`);
    return error;
  }
  throw new assert.AssertionError({ message: `expected ${cls.name}, nothing was thrown` });
}

async function crud(client: Client): Promise<void> {
  const ann = await client.user.create({ email: "ann@example.com", name: "Ann", age: 31, role: "admin" });
  assert.equal(typeof ann, "number");
  const got = await client.user.get(ann);
  assert.deepEqual([got.email, got.name, got.age, got.role], ["ann@example.com", "Ann", 31, "admin"]);
  assert.deepEqual(Object.keys(got), ["id", "email", "name", "age", "role", "joined", "profile"]);

  const card = await client.user.card.get(ann);
  assert.deepEqual(card, { id: ann, name: "Ann" });

  const fetched = await client.user.fetch(ann);
  const patched = await client.user.patch(ann, { age: 32 }, { ifMatch: fetched.etag ?? undefined });
  assert.equal(patched.age, 32);
  const stale = await rejects(client.user.patch(ann, { age: 33 }, { ifMatch: fetched.etag ?? undefined }), PreconditionFailedError);
  assert.equal(stale.status, 412);
  assert.equal(stale.code, "precondition_failed");

  const twin = await rejects(client.user.create({ email: "ann@example.com", name: "Twin" }), UniqueViolationError);
  assert.equal(twin.status, 409);
  assert.ok(twin instanceof ApiError);

  const bad = await rejects(client.user.create({ email: "x@example.com", name: "", age: 200 }), ConstraintViolationError);
  assert.equal(bad.status, 422);
  assert.deepEqual(bad.errors.map((e) => e.field).sort(), ["age", "name"]);

  const post = await client.blogPost.create({ author_id: ann, title: "Hello", body: "...", score: 4.5, published: true });
  await rejects(client.user.delete(ann), ReferencedError);
  const page = await client.blogPost.list({ author_id: ann, sort: "-score", limit: 5, expand: "author_id:card" });
  assert.equal(page.total, 1);
  assert.deepEqual(page.data[0]._expand, { author_id: { id: ann, name: "Ann" } });
  assert.equal(page.nextCursor, null);
  await client.blogPost.delete(post);
  await rejects(client.blogPost.get(post), NotFoundError);

  // a caller without the types is stopped before any request
  const untyped = client.user as unknown as { list(query: object): Promise<unknown> };
  await rejects(untyped.list({ nosuch: 1 }), QueryError);

  // a batch: a parent and its child, all or nothing
  const done = await client.batch([
    client.user.createOp({ email: "bo@example.com", name: "Bo", role: "editor" }),
    client.blogPost.createOp({ author_id: { $op: 0 }, title: "Batch", body: "...", score: 1, published: false }),
  ]);
  assert.equal(done.results.length, 2);
  assert.equal(done.last - done.first, 1);

  // pages by cursor, to the end
  for (let i = 0; i < 5; i++) await client.user.create({ email: `p${i}@example.com`, name: `P${i}` });
  const walked: number[] = [];
  for await (const user of client.user.iterate({ sort: "name", limit: 2 })) walked.push(user.id);
  const all = await client.user.list({ sort: "name", limit: 100 });
  assert.deepEqual(walked, all.data.map((u) => u.id));

  await client.checkFingerprint();
}

async function main(): Promise<void> {
  const port = Number(process.argv[2]);
  const client = new Client(`http://127.0.0.1:${port}`);
  await crud(client);
  console.log("CRUD ok");

  const events: ChangeEvent<User>[] = [];
  const resets: unknown[] = [];
  const subscription = client.user.subscribe({}, (event) => events.push(event), { onReset: (e) => resets.push(e) });
  await subscription.started;
  const live = client.liveQuery("user", { role: "admin" }, { onReset: (e) => resets.push(e) });
  assert.ok(await live.waitUntil(() => true, 30000), "the live query's first Init");
  console.log("READY");

  const lines = createInterface({ input: process.stdin });
  const head = await new Promise<number>((resolve) => {
    lines.on("line", (line) => {
      const match = /^HEAD (\d+)$/.exec(line.trim());
      if (match) resolve(Number(match[1]));
    });
  });
  lines.close();
  assert.ok(await subscription.waitForOffset(head, 60000), `the subscription reaching ${head} (at ${subscription.offset})`);
  const fresh = new Map<unknown, User>();
  for await (const user of client.user.iterate({ role: "admin" })) fresh.set(user.id, user);
  const same = (records: Map<unknown, User>) =>
    records.size === fresh.size && [...fresh].every(([id, user]) => JSON.stringify(records.get(id)) === JSON.stringify(user));
  assert.ok(await live.waitUntil(same, 60000), "the live set equal to a fresh list");
  subscription.close();
  live.close();
  console.log(
    JSON.stringify({
      events: events.map((e) => [e.offset, e.kind, e.id, e.record ?? null]),
      live: [...live.records.keys()].sort(),
      fresh: [...fresh.keys()].sort(),
      connects: [subscription.connects, live.connects],
      errors: [String(subscription.error), String(live.error)],
      resets: resets.length,
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
