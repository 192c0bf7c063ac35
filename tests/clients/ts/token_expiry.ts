// A feed whose token expires on an open socket (tests/clients/test_typescript_client.py):
// argv: PORT. The token function asks the test for each token (a `TOKEN` line out, the token
// back on stdin), which mints the first two to expire 3 s after it is asked: a busy host's
// Node start can no longer outlive them. The server closes the first socket with 4401 and
// the feed must reconnect with the next token and miss nothing. Prints one JSON line.
import { createInterface } from "node:readline";
import { Client } from "./blog.js";

const port = Number(process.argv[2]);
const answers = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
let asking: Promise<unknown> = Promise.resolve();
function ask(): Promise<string> {
  const token = asking.then(async () => {
    console.log("TOKEN");
    return (await answers.next()).value as string;
  });
  asking = token;
  return token;
}
const client = new Client(`http://127.0.0.1:${port}`, { token: ask });
const ids: unknown[] = [];
const subscription = client.user.subscribe({}, (event) => ids.push(event.id));
await subscription.started;
const first = await client.user.create({ email: "t1@example.com", name: "T1" });
const deadline = Date.now() + 20000;
while (subscription.connects < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
const second = await client.user.create({ email: "t2@example.com", name: "T2" });
const reached = await subscription.waitForOffset(await client.user.head(), 20000);
subscription.close();
console.log(JSON.stringify({ reached, connects: subscription.connects, ids, expected: [first, second], error: String(subscription.error) }));
process.exit(0); // stdin, still open, would keep the loop alive
