/* dbsvc explorer, live mode: the table follows /live-query/<model> and the feed pane
 * /subscribe/<model>, with the table's conditions, resuming after a drop from the last
 * offset seen (no gap, no duplicate) and starting over when that fails.
 *
 * `window.DbsvcLive(ctx)` builds it over what explorer.js shares (`ctx`) and answers
 * `start`, `stop`, `render` (the result set in the table's order: the API's, nulls last
 * going up) and `mark` (a row of a recent write keeps its added/changed mark for FLASH_MS,
 * however many writes follow it).
 */
"use strict";
window.DbsvcLive = (ctx) => {
  const {$, el, text, state, BASE, token, Problem, getJson, explain, setStatus} = ctx;
  const {filterParams, feedParams, renderRows, setHead, refreshOps} = ctx;
  const LIVE_ROWS = 500;        // live mode shows at most this many rows of the result set
  const FEED_ROWS = 200;        // the feed pane keeps this many events
  const FLASH_MS = 1500;        // how long a live row stays marked added or changed (the CSS animation)
  let feeds = [];               // the open sockets of live mode
  let liveRecords = new Map();  // id -> record: the live query's result set
  let initOpen = false;         // an Init of several slices is being received
  let liveRun = 0;              // counts live starts and stops: a retry of an older run is dropped
  let flashes = new Map();      // id -> {kind, at}: live rows marked added or changed, each for FLASH_MS

  function wsUrl(kind, params) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const query = params.toString();
    return scheme + location.host + BASE + "/" + kind + "/" + state.model.kebab + (query ? "?" + query : "");
  }

  function openFeed(kind, onMessage, after) {
    const params = feedParams();
    if (kind !== "subscribe") initOpen = false;   // a new socket: a new Init, whatever came before
    if (after) params.set("after", String(after));
    const t = token();
    const url = wsUrl(kind, params);
    const ws = t ? new WebSocket(url, ["bearer", "bearer." + t]) : new WebSocket(url);
    const feed = {ws, kind, offset: after || 0, opened: false, stopped: false, retries: 0, run: liveRun};
    ws.onopen = () => { feed.opened = true; };
    ws.onmessage = (event) => {
      const message = JSON.parse(event.data);
      // An Init comes in slices: its offset is a place to resume from only once complete.
      const partial = message.type === "Init" && message.complete === false;
      if (!partial && typeof message.offset === "number" && message.offset > feed.offset) feed.offset = message.offset;
      onMessage(message);
    };
    ws.onclose = (event) => onFeedClosed(feed, event.code, event.reason, onMessage);
    feeds.push(feed);
    return feed;
  }

  async function onFeedClosed(feed, code, reason, onMessage) {
    feeds = feeds.filter((f) => f !== feed);
    if (feed.stopped || !state.live || feed.run !== liveRun) return;
    if (code === 4401) { stopLive(); setStatus("The token expired: paste a fresh one.", true); return; }
    if (!feed.opened) {
      // The upgrade was refused, or the server is away; a browser does not say which, the
      // same read does. A refusal ends live mode; a server that is away is retried.
      try { await getJson("/api/" + state.model.kebab + "?limit=1&" + filterParams()); } catch (error) {
        if (!(error instanceof Problem)) return retryFeed(feed, onMessage, feed.retries + 1, "the server is away");
        stopLive();
        $("live").checked = false;
        liveRecords = new Map();
        renderRows([]);
        $("records").dataset.state = "error";
        setStatus(explain(error), true);
        return;
      }
    }
    retryFeed(feed, onMessage, feed.opened ? 0 : feed.retries + 1, `close ${code} ${reason || ""}`.trim());
  }

  function retryFeed(feed, onMessage, retries, why) {
    if (feed.stopped || !state.live) return;
    $("live-state").textContent = `reconnecting (${why})`;
    setTimeout(() => {
      if (!state.live || feed.run !== liveRun) return;
      // Resume after the last offset seen (no gap, no duplicate); start over if that fails.
      const after = retries < 3 && (feed.kind === "subscribe" || feed.offset) ? feed.offset : 0;
      const again = openFeed(feed.kind, onMessage, after);
      again.retries = retries;
    }, Math.min(10000, 500 * 2 ** retries));
  }

  function onDelta(message) {
    const model = state.model;
    if (message.type === "Init") {
      // The result set in slices, the last one `complete`: a new Init starts a new set.
      if (!initOpen) liveRecords = new Map();
      for (const r of message.records) liveRecords.set(text(r[model.id]), r);
      initOpen = message.complete === false;
      if (initOpen) return;
      refreshOps();
    } else if (message.type === "Added" || message.type === "Updated") {
      const id = text(message.record[model.id]);
      liveRecords.set(id, message.record);
      flashes.set(id, {kind: message.type === "Added" ? "added" : "changed", at: Date.now()});
    } else if (message.type === "Removed") {
      liveRecords.delete(text(message.id));
    } else {
      return;
    }
    if (typeof message.watermark === "number") setHead(model.name, message.watermark);
    $("live-state").textContent = `live at offset ${message.offset}`;
    $("records").dataset.offset = String(message.offset);
    renderLive();
  }

  /** The API's order (docs/guide/queries.md): a null after every value going up, strings by code point. */
  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    if (typeof a === "string" && typeof b === "string") {
      const x = [...a], y = [...b];   // code points, as the service compares; UTF-16 units would differ
      for (let i = 0; i < Math.min(x.length, y.length); i++) {
        if (x[i] !== y[i]) return x[i].codePointAt(0) < y[i].codePointAt(0) ? -1 : 1;
      }
      return x.length - y.length;
    }
    return a < b ? -1 : 1;
  }

  function renderLive() {
    const now = Date.now();
    for (const [id, flash] of flashes) if (now - flash.at >= FLASH_MS) flashes.delete(id);
    const model = state.model;
    const keys = [...state.sort, {field: model.id, desc: false}];
    const records = [...liveRecords.values()].sort((x, y) => {
      for (const k of keys) {
        const order = compare(x[k.field], y[k.field]);
        if (order) return k.desc ? -order : order;
      }
      return 0;
    });
    renderRows(records.slice(0, LIVE_ROWS));
    $("page-state").textContent = records.length > LIVE_ROWS
      ? `first ${LIVE_ROWS} of ${records.length} (live)` : `${records.length} records (live)`;
    $("records").dataset.state = "live";
  }

  function onEvent(message) {
    const list = $("feed-list");
    let line;
    if (message.kind === "link") {
      line = `${message.model} ${text(message.id)} ${message.linked ? "←" : "↚"} ${message.child_model} ${text(message.child_id)} (${message.field})`;
    } else {
      line = `${message.model} ${text(message.id)} ${JSON.stringify(message.record)}`;
    }
    list.prepend(el("li", {"data-kind": message.kind, title: JSON.stringify(message)},
      el("span", {class: "muted"}, "#" + message.offset + " "), el("span", {class: "kind"}, message.kind), " " + line));
    while (list.children.length > FEED_ROWS) list.lastChild.remove();
  }

  function startLive() {
    stopLive();
    state.live = true;
    liveRecords = new Map();
    flashes = new Map();
    renderRows([]);
    $("records").dataset.state = "loading";
    $("feed-list").replaceChildren();
    $("live-state").textContent = "connecting…";
    setStatus("Live: rows appear, change and leave as writes commit. Sorting applies; pages and as_of do not.");
    openFeed("live-query", onDelta, 0);
    openFeed("subscribe", onEvent, 0);
  }

  function stopLive() {
    liveRun += 1;
    for (const feed of feeds) { feed.stopped = true; feed.ws.close(1000, "explorer left live mode"); }
    feeds = [];
    state.live = false;
    $("live-state").textContent = "";
  }

  /** Mark a row of a recent write. A row is built again at each delta: its animation goes on
   * where it was, so every row of several quick writes stays marked for its own FLASH_MS. */
  function mark(tr) {
    const flash = flashes.get(tr.dataset.id);
    if (!flash) return;
    tr.className = flash.kind;
    tr.style.animationDelay = `-${Math.min(FLASH_MS, Date.now() - flash.at)}ms`;
  }

  return {start: startLive, stop: stopLive, render: renderLive, mark};
};
