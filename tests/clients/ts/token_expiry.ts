// A feed whose token expires on an open socket (tests/clients/test_typescript_client.py):
// argv: PORT, then a JSON list of tokens, the first one about to expire. The token function
// hands them out in turn; the server closes the first socket with 4401 and the feed must
// reconnect with the next token and miss nothing. Prints one JSON line.
import { Client } from "./blog.js";

const [port, tokens] = [Number(process.argv[2]), JSON.parse(process.argv[3]) as string[]];
let asked = 0;
const client = new Client(`http://127.0.0.1:${port}`, { token: () => tokens[Math.min(asked++, tokens.length - 1)] });
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
