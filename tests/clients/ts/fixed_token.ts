// A feed whose fixed token is refused (tests/clients/test_typescript_client.py): with no
// token function to ask, the feed ends, `error` holds the refusal and `onError` is called
// once. argv: PORT, a valid token, an expired one. Prints one JSON line.
import { Client, UnauthorizedError } from "./blog.js";

const [port, good, expired] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const reader = new Client(`http://127.0.0.1:${port}`, { token: good });
const head = await reader.user.head();
const client = new Client(`http://127.0.0.1:${port}`, { token: expired });
const errors: string[] = [];
const subscription = client.user.subscribe({}, () => undefined, {
  after: head,
  onError: (error) => errors.push(error instanceof UnauthorizedError ? `${error.status} ${error.code}` : String(error)),
});
const ended = await subscription.waitForOffset(head + 1, 20000); // false: the feed ended first
console.log(JSON.stringify({ ended: !ended, errors, error: String(subscription.error), connects: subscription.connects }));
