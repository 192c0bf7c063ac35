// A subscription after an offset the server no longer holds (410 offset_gone): it must say
// so through onReset and go on from the head (tests/clients/test_typescript_client.py).
// argv: PORT. Prints one JSON line.
import { Client, OffsetGoneError } from "./inventory.js";

const client = new Client(`http://127.0.0.1:${Number(process.argv[2])}`);
await client.batch(
  Array.from({ length: 300 }, (_, i) => client.warehouse.createOp({ code: `W${String(i).padStart(3, "0")}`, city: "X", opened: "2026-01-01" })),
);
const resets: string[] = [];
const ids: unknown[] = [];
const subscription = client.warehouse.subscribe({}, (event) => ids.push(event.id), {
  after: 1,
  onReset: (error) => resets.push(`${error instanceof OffsetGoneError} ${error.status} ${error.code}`),
});
const deadline = Date.now() + 10000;
while (!resets.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
await client.warehouse.create({ code: "LAST", city: "Y", opened: "2026-01-02" });
const reached = await subscription.waitForOffset(await client.warehouse.head(), 10000);
subscription.close();
console.log(JSON.stringify({ reached, resets, ids, error: String(subscription.error) }));
