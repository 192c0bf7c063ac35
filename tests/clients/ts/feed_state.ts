// The TypeScript client's feed decisions, sans-IO: EventState (a subscription) and LiveState (a
// live query) fed frames shaped as the server sends them (docs/realtime.md), the cases of
// tests/clients/test_feed_state.py and test_feed_decisions.py. Prints one JSON line of what each
// case saw; tests/clients/test_typescript_feed_state.py compares it with literals.
import { EventState, LiveState } from "./blog.js";

type Frame = { [key: string]: unknown };
const insert = (offset: number, id: number, batch?: Frame): Frame =>
  batch ? { kind: "insert", model: "User", offset, id, batch } : { kind: "insert", model: "User", offset, id };
const link = (offset: number, parent: number, child: number): Frame => ({
  kind: "link", model: "User", id: parent, child_model: "BlogPost", child_id: child, field: "author_id", linked: true, offset,
});
const ids = (frames: Frame[]) => frames.map((f) => `${f.kind}:${f.offset}:${f.kind === "link" ? f.child_id : f.id}`);
const report: { [name: string]: unknown } = {};

// a resume asks one offset early and drops only what was handed over
{
  const state = new EventState(0);
  const seen = [...state.take(insert(1, 1)), ...state.take(insert(2, 2))];
  state.disconnected();
  const resume = state.resumeAfter();
  const replay = [...state.take(insert(2, 2)), ...state.take(link(2, 2, 9)), ...state.take(insert(3, 3))];
  report.resume = { seen: ids(seen), resume, replay: ids(replay), offset: state.offset, next: state.resumeAfter() };
}
// a batch is held until its end frame; a drop inside it forgets the held frames
{
  const state = new EventState(4);
  const batch = { first: 5, last: 7 };
  const held = state.take(insert(5, 5, batch));
  state.disconnected();
  const afterDrop = state.resumeAfter();
  const first = state.take(insert(5, 5, batch));
  const whole = state.take(insert(7, 7, { ...batch, end: true }));
  report.batch = { held: ids(held), afterDrop, first: ids(first), whole: ids(whole), offset: state.offset };
}
// a fresh start resumes after its start offset; a 410 restarts at the head
{
  const state = new EventState(7);
  const fresh = state.resumeAfter();
  state.take(insert(8, 8));
  state.restart(12);
  report.restart = { fresh, offset: state.offset, resume: state.resumeAfter(), again: ids(state.take(insert(12, 12))) };
}
// a live query: Init slices, deltas, a batch at its end, a replay at its own offset, a 410
{
  const state = new LiveState<Frame>("id");
  const before = state.resumeAfter();
  const half = state.take({ type: "Init", records: [{ id: 1 }], offset: 3, complete: false });
  const halfSize = state.records.size;
  const whole = state.take({ type: "Init", records: [{ id: 2 }], offset: 3, complete: true });
  const initIds = [...state.records.keys()];
  const added = state.take({ type: "Added", offset: 4, record: { id: 3 } });
  const replayed = state.take({ type: "Added", offset: 4, record: { id: 9 } });
  const open = state.take({ type: "Removed", offset: 5, id: 1, batch: { first: 5, last: 6 } });
  const openIds = [...state.records.keys()];
  const closed = state.take({ type: "Updated", offset: 6, record: { id: 2, v: 1 }, batch: { first: 5, last: 6, end: true } });
  const records = [...state.records.entries()];
  const resume = state.resumeAfter();
  state.restart();
  report.live = { before, half, halfSize, whole, initIds, added, replayed, open, openIds, closed, records, resume, gone: state.resumeAfter() };
}
// a live query dropped during its Init starts over
{
  const state = new LiveState<Frame>("id");
  state.take({ type: "Init", records: [{ id: 1 }], offset: 3, complete: false });
  state.disconnected();
  const resume = state.resumeAfter();
  state.take({ type: "Init", records: [{ id: 2 }], offset: 4 });
  report.halfInit = { resume, ids: [...state.records.keys()] };
}
console.log(JSON.stringify(report));
