// Reading your writes anywhere (forward.py rule 5): the client sends `Dbsvc-After`, the highest
// `Dbsvc-Offset` its writes were answered with, on every read, and nothing before its first
// write; a refused write changes nothing (tests/clients/test_typescript_client.py).
// argv: PORT. Prints one JSON line: per request, its method, path and Dbsvc-After (or null).
import { ApiError, Client } from "./inventory.js";

const seen: { method: string; path: string; after: string | null }[] = [];
const recording: typeof fetch = async (input, init) => {
  const headers = new Headers(init?.headers);
  seen.push({ method: init?.method ?? "GET", path: new URL(String(input)).pathname, after: headers.get("dbsvc-after") });
  return fetch(input, init);
};
const client = new Client(`http://127.0.0.1:${Number(process.argv[2])}`, { fetch: recording });
const before = await client.warehouse.list({});
const code = await client.warehouse.create({ code: "W1", city: "Oslo", opened: "2026-01-01" });
const read = await client.warehouse.get(code);
let refused = "";
try {
  await client.warehouse.create({ code: "W1", city: "Oslo", opened: "2026-01-01" });
} catch (error) {
  refused = error instanceof ApiError ? `${error.status} ${error.code}` : String(error);
}
await client.warehouse.get(code);
await client.warehouse.patch(code, { city: "Bergen" });
const after = await client.warehouse.list({});
console.log(JSON.stringify({ seen, total: [before.total, after.total], city: read.city, refused, head: after.head }));
