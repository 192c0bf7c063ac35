/* dbsvc explorer: reads and watches a dbsvc service through its public API only.
 *
 * Models, fields, filters, sort keys and projections come from /openapi.json; records from
 * GET /api/<model>; time travel is ?as_of=<watermark>; Live follows /live-query/<model>
 * (the table) and /subscribe/<model> (the feed pane) with the same filters; the Service
 * pane shows /metrics and /snapshot. A token kept in sessionStorage goes out as
 * `Authorization: Bearer` and as the `bearer.<JWT>` WebSocket subprotocol.
 *
 * Every value from the service reaches the page as text (textContent / append of a
 * string), never as HTML. No eval, no inline code: the page's CSP forbids both.
 */
"use strict";
(() => {
  const BASE = location.pathname.replace(/\/_\/[^/]*$/, "");   // "" unless behind a path prefix
  const TOKEN_KEY = "dbsvc.explorer.token";
  const LIVE_ROWS = 500;        // live mode shows at most this many rows of the result set
  const FEED_ROWS = 200;        // the feed pane keeps this many events
  const $ = (id) => document.getElementById(id);

  const state = {
    models: [], model: null, filters: {}, sort: [], limit: 20, offset: 0,
    projection: "", asOf: null, live: false, head: {},
  };
  let pageSeq = 0;              // the newest page read; older answers are dropped
  let feeds = [];               // the open sockets of live mode
  let liveRecords = new Map();  // id -> record: the live query's result set
  let initOpen = false;          // an Init of several slices is being received
  let liveRun = 0;              // counts live starts and stops: a retry of an older run is dropped

  // ---------------------------------------------------------------- small helpers

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    node.append(...children);   // strings become text nodes: never parsed as HTML
    return node;
  }

  function text(value) {
    if (value === null || value === undefined) return "null";
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  class Problem extends Error {
    constructor(status, body, path) {
      const detail = body && body.detail ? body.detail : "";
      super(`${path}: ${status} ${body && body.code ? body.code : ""} ${detail}`.trim());
      this.status = status;
      this.detail = detail;
    }
  }

  async function getJson(path) {
    const t = token();
    const response = await fetch(BASE + path, {
      headers: t ? {Authorization: "Bearer " + t} : {}, cache: "no-store",
    });
    const raw = await response.text();
    let body = null;
    try { body = JSON.parse(raw); } catch (e) { body = null; }
    if (!response.ok) throw new Problem(response.status, body, path);
    return {body, headers: response.headers};
  }

  function setStatus(message, isProblem) {
    const status = $("status");
    status.textContent = "";
    status.className = isProblem ? "problem" : "";
    if (message) status.append(message);
  }

  function explain(error) {
    if (!(error instanceof Problem)) return String(error && error.message ? error.message : error);
    if (error.status === 401) return "This service needs a token: paste one in the token box. (" + error.message + ")";
    if (error.status === 403) return "The token is refused for this tenant. (" + error.message + ")";
    return error.message;
  }

  // ---------------------------------------------------------------- the OpenAPI document

  function resolve(doc, node) {
    if (!node || !node.$ref) return node;
    let out = doc;
    for (const part of node.$ref.replace(/^#\//, "").split("/")) out = out[part.replace(/~1/g, "/").replace(/~0/g, "~")];
    return out;
  }

  function enumOf(schema) {
    if (!schema) return null;
    if (schema.enum) return schema.enum.map((v) => (v === null ? "null" : String(v)));
    const types = [].concat(schema.type || []);
    if (types.includes("boolean")) return types.includes("null") ? ["true", "false", "null"] : ["true", "false"];
    return null;
  }

  function sortKeys(pattern) {
    const match = /^\^-\?\(\?:([^)]*)\)/.exec(pattern || "");
    return match ? match[1].split("|").map((k) => k.replace(/\\/g, "")) : [];
  }

  function readModels(doc) {
    const models = [];
    const schemas = (doc.components || {}).schemas || {};
    for (const [path, item] of Object.entries(doc.paths || {})) {
      const match = /^\/api\/([^/{}]+)$/.exec(path);
      if (!match || !item.get) continue;
      const name = (item.get.tags || [])[0];
      const schema = schemas[name];
      if (!schema) continue;
      const model = {name, kebab: match[1], filters: [], sortable: [], projections: {}, id: "id"};
      for (const param of (item.get.parameters || []).map((p) => resolve(doc, p))) {
        if (param.in !== "query") continue;
        if (param.name === "sort") model.sortable = sortKeys(param.schema.pattern);
        else if (param.name === "projection") {
          for (const p of param.schema.enum || []) {
            const shape = schemas[`${name}.projection.${p}`];
            model.projections[p] = shape ? Object.keys(shape.properties || {}) : [];
          }
        } else if (param.schema && param.schema.type === "array") {
          model.filters.push({name: param.name, values: enumOf(param.schema.items)});
        } else if (param.name === "search") {  // text search: a box among the filters (@search fields)
          model.filters.push({name: "search", values: null, hint: "words (each a prefix)"});
        }
      }
      const itemGet = (doc.paths[path + "/{id}"] || {}).get;
      const idParam = itemGet && (itemGet.parameters || []).map((p) => resolve(doc, p)).find((p) => p.in === "path");
      const idName = idParam && /`([^`]+)`/.exec(idParam.description || "");
      if (idName) model.id = idName[1];
      model.fields = Object.entries(schema.properties || {}).map(([field, s]) => {
        const ref = /^references `([^`]+)`/.exec((s && s.description) || "");
        return {name: field, ref: ref ? ref[1] : null};
      });
      models.push(model);
    }
    return models;
  }

  // ---------------------------------------------------------------- state <-> URL

  function filterParams() {
    const params = new URLSearchParams();
    for (const f of state.model.filters) {
      const value = state.filters[f.name];
      if (value !== undefined && value !== "") params.append(f.name, value);
    }
    return params;
  }

  function feedParams() {
    const params = filterParams();
    if (state.projection) params.set("projection", state.projection);
    return params;
  }

  function listParams() {
    const params = feedParams();
    if (state.sort.length) params.set("sort", state.sort.map((k) => (k.desc ? "-" : "") + k.field).join(","));
    params.set("limit", String(state.limit));
    if (state.offset) params.set("offset", String(state.offset));
    if (state.asOf !== null) params.set("as_of", String(state.asOf));
    return params;
  }

  function writeHash() {
    const params = listParams();
    if (state.live) params.set("live", "1");
    history.replaceState(null, "", "#/" + state.model.kebab + "?" + params.toString());
  }

  function readHash() {
    const [, kebab, query] = /^#\/([^?]*)\??(.*)$/.exec(location.hash) || [];
    const model = state.models.find((m) => m.kebab === kebab) || state.models[0];
    const params = new URLSearchParams(query || "");
    const number = (key, fallback) => (/^\d+$/.test(params.get(key) || "") ? Number(params.get(key)) : fallback);
    state.model = model;
    state.filters = {};
    for (const f of model.filters) if (params.has(f.name)) state.filters[f.name] = params.get(f.name);
    state.sort = (params.get("sort") || "").split(",").filter(Boolean)
      .map((k) => ({field: k.replace(/^-/, ""), desc: k.startsWith("-")}))
      .filter((k) => model.sortable.includes(k.field));
    state.limit = number("limit", 20);
    state.offset = number("offset", 0);
    state.projection = model.projections[params.get("projection")] ? params.get("projection") : "";
    state.asOf = params.has("as_of") ? number("as_of", null) : null;
    state.live = params.get("live") === "1";
  }

  // ---------------------------------------------------------------- the table

  function columns() {
    const model = state.model;
    return state.projection ? model.projections[state.projection] : model.fields.map((f) => f.name);
  }

  function renderHead() {
    const model = state.model;
    const row = el("tr");
    for (const name of columns()) {
      const th = el("th", {"data-field": name}, name);
      if (model.sortable.includes(name)) {
        th.className = "sortable";
        th.title = "click: sort by " + name + "; shift+click: add it as another sort key";
        const at = state.sort.findIndex((k) => k.field === name);
        if (at >= 0) {
          th.append(el("span", {class: "key"}, (state.sort[at].desc ? "▼" : "▲") + (state.sort.length > 1 ? at + 1 : "")));
        }
        th.addEventListener("click", (event) => clickSort(name, event.shiftKey));
      }
      row.append(th);
    }
    $("records").tHead.replaceChildren(row);
    $("sort-state").textContent = state.sort.length
      ? "sorted by " + state.sort.map((k) => (k.desc ? "-" : "") + k.field).join(", ")
      : "primary-key order";
  }

  function renderRows(records, flash) {
    const model = state.model;
    const refs = Object.fromEntries(model.fields.filter((f) => f.ref).map((f) => [f.name, f.ref]));
    const body = $("records").tBodies[0];
    const rows = records.map((record) => {
      const tr = el("tr");
      if (model.id in record) {
        tr.dataset.id = text(record[model.id]);
        tr.addEventListener("click", () => openRecord(model, record[model.id]));
      }
      if (flash && flash.id === tr.dataset.id) tr.className = flash.kind;
      for (const name of columns()) {
        const value = record[name];
        const td = el("td", {"data-field": name, title: text(value)}, text(value));
        if (value === null || value === undefined) td.className = "null";
        else if (refs[name]) {
          const parent = state.models.find((m) => m.name === refs[name]);
          if (parent) {
            td.className = "ref";
            td.title = "open " + parent.name + " " + text(value);
            td.addEventListener("click", (event) => { event.stopPropagation(); openRecord(parent, value); });
          }
        }
        tr.append(td);
      }
      return tr;
    });
    body.replaceChildren(...rows);
  }

  function clickSort(field, addKey) {
    const at = state.sort.findIndex((k) => k.field === field);
    if (addKey) {
      if (at < 0) state.sort.push({field, desc: false});
      else if (!state.sort[at].desc) state.sort[at].desc = true;
      else state.sort.splice(at, 1);
    } else if (state.sort.length === 1 && at === 0) {
      if (!state.sort[0].desc) state.sort[0].desc = true;
      else state.sort = [];
    } else {
      state.sort = [{field, desc: false}];
    }
    state.offset = 0;
    renderHead();
    writeHash();
    if (state.live) renderLive(); else loadPage();
  }

  async function loadPage() {
    const seq = ++pageSeq;
    const model = state.model;
    const path = "/api/" + model.kebab + "?" + listParams().toString();
    const table = $("records");
    table.dataset.state = "loading";
    try {
      const {body, headers} = await getJson(path);
      if (seq !== pageSeq) return;
      if (state.asOf === null) setHead(model.name, Number(headers.get("Dbsvc-Watermark")));
      renderRows(body.data);
      const last = body.offset + body.data.length;
      $("page-state").textContent = body.total
        ? `${body.offset + 1}–${last} of ${body.total}` : "no records";
      $("prev").disabled = body.offset === 0;
      $("next").disabled = last >= body.total;
      setStatus(state.asOf === null ? "" : `Showing ${model.name} as it was at watermark ${state.asOf} (of ${state.head[model.name]}).`);
      table.dataset.state = "page";
    } catch (error) {
      if (seq !== pageSeq) return;
      renderRows([]);
      $("page-state").textContent = "";
      setStatus(explain(error), true);
      table.dataset.state = "error";
    }
    table.dataset.url = path;
  }

  // ---------------------------------------------------------------- time travel

  function setHead(modelName, watermark) {
    if (!Number.isFinite(watermark)) return;
    state.head[modelName] = watermark;
    if (state.model && state.model.name === modelName) renderSlider();
  }

  function renderSlider() {
    const slider = $("as-of");
    const head = state.head[state.model.name] || 0;
    slider.max = String(head);
    slider.value = String(state.asOf === null ? head : Math.min(state.asOf, head));
    $("as-of-value").textContent = state.asOf === null ? `now (${head})` : `${state.asOf} of ${head}`;
    slider.disabled = state.live;
    $("as-of-now").disabled = state.live || state.asOf === null;
  }

  let sliderTimer = 0;
  function onSlider() {
    const slider = $("as-of");
    const value = Number(slider.value);
    state.asOf = value >= Number(slider.max) ? null : value;
    renderSlider();
    clearTimeout(sliderTimer);
    sliderTimer = setTimeout(() => { writeHash(); loadPage(); }, 120);
  }

  // ---------------------------------------------------------------- one record

  async function openRecord(model, id) {
    const params = new URLSearchParams();
    const here = model === state.model;
    if (here && state.projection) params.set("projection", state.projection);
    if (here && state.asOf !== null && !state.live) params.set("as_of", String(state.asOf));
    const path = "/api/" + model.kebab + "/" + encodeURIComponent(text(id)) + (params.toString() ? "?" + params : "");
    const pane = $("record");
    const list = $("record-fields");
    pane.hidden = false;
    pane.dataset.id = text(id);
    $("record-title").textContent = model.name + " " + text(id) + (params.has("as_of") ? ` as of watermark ${state.asOf}` : "");
    try {
      const {body} = await getJson(path);
      list.replaceChildren(...Object.entries(body).flatMap(([field, value]) => [
        el("dt", {}, field),
        el("dd", {"data-field": field}, value !== null && typeof value === "object" ? JSON.stringify(value, null, 2) : text(value)),
      ]));
    } catch (error) {
      list.replaceChildren(el("dt", {}, "error"), el("dd", {class: "problem"}, explain(error)));
    }
    pane.dataset.state = "shown";
  }

  // ---------------------------------------------------------------- live mode

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
    let flash = null;
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
      flash = {id, kind: message.type === "Added" ? "added" : "changed"};
    } else if (message.type === "Removed") {
      liveRecords.delete(text(message.id));
    } else {
      return;
    }
    if (typeof message.watermark === "number") setHead(model.name, message.watermark);
    $("live-state").textContent = `live at offset ${message.offset}`;
    $("records").dataset.offset = String(message.offset);
    renderLive(flash);
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return -1;
    if (b === null || b === undefined) return 1;
    return a < b ? -1 : 1;
  }

  function renderLive(flash) {
    const model = state.model;
    const keys = [...state.sort, {field: model.id, desc: false}];
    const records = [...liveRecords.values()].sort((x, y) => {
      for (const k of keys) {
        const order = compare(x[k.field], y[k.field]);
        if (order) return k.desc ? -order : order;
      }
      return 0;
    });
    renderRows(records.slice(0, LIVE_ROWS), flash);
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

  // ---------------------------------------------------------------- controls

  function renderControls() {
    const model = state.model;
    $("model-title").textContent = model.name + " ";
    $("model-title").append(el("span", {class: "muted"}, "/api/" + model.kebab));
    for (const a of document.querySelectorAll("#model-list a")) {
      if (a.dataset.model === model.kebab) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    const form = $("filters");
    const inputs = model.filters.map((f) => {
      let input;
      if (f.values) {
        input = el("select", {name: f.name}, el("option", {value: ""}, "any"));
        for (const v of f.values) input.append(el("option", {value: v}, v));
      } else {
        input = el("input", {type: "text", name: f.name, placeholder: f.hint || "any", spellcheck: false});
      }
      input.value = state.filters[f.name] || "";
      return el("label", {}, f.name + " ", input);
    });
    form.replaceChildren(...inputs);
    if (inputs.length) {
      form.append(el("button", {type: "submit"}, "Filter"), el("button", {type: "reset"}, "Clear"));
    } else {
      form.append(el("span", {class: "muted"}, "no @filter fields"));
    }
    const projection = $("projection");
    projection.replaceChildren(el("option", {value: ""}, "all fields"),
      ...Object.keys(model.projections).map((p) => el("option", {value: p}, p)));
    projection.value = state.projection;
    $("limit").value = String(state.limit);
    $("live").checked = state.live;
    $("pager").hidden = false;
    $("prev").hidden = $("next").hidden = state.live;
    $("record").hidden = true;
    $("feed").hidden = !state.live;
    renderHead();
    renderSlider();
  }

  function readFilters() {
    for (const f of state.model.filters) state.filters[f.name] = $("filters").elements[f.name].value.trim();
    state.offset = 0;
    refresh();
  }

  /** Show the current state: a fresh live query, or the page read again. */
  function refresh() {
    writeHash();
    renderControls();
    if (state.live) startLive(); else loadPage();
  }

  function selectFromHash() {
    stopLive();
    readHash();
    $("model-pane").hidden = false;
    refresh();
  }

  // ---------------------------------------------------------------- the Service pane

  async function refreshOps() {
    const ops = $("ops");
    try {
      const [metrics, snapshot] = await Promise.all([getJson("/metrics"), getJson("/snapshot")]);
      const m = metrics.body;
      const s = snapshot.body;
      const pairs = (rows) => rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, text(v))]);
      const perModel = el("table", {class: "models"},
        el("thead", {}, el("tr", {}, el("th", {}, "model"), el("th", {}, "records"), el("th", {}, "watermark"))),
        el("tbody", {}, ...Object.entries(s.watermarks || {}).map(([name, watermark]) => el("tr", {},
          el("td", {}, name), el("td", {}, text((m.rows_per_model || {})[name])), el("td", {}, text(watermark))))));
      ops.replaceChildren(
        el("dl", {}, ...pairs([["head offset", s.offset], ["records", m.total_rows], ["replication", s.replication]])),
        perModel,
        el("dl", {}, ...pairs(Object.entries(m.realtime || {}))),
        el("dl", {}, ...pairs(s.replica ? [["replica", s.replica]] : [])),
        el("p", {class: "epoch", title: "compaction epoch: watermarks hold within one"}, "epoch " + text(s.epoch)));
      for (const [name, watermark] of Object.entries(s.watermarks || {})) setHead(name, watermark);
      for (const a of document.querySelectorAll("#model-list a")) {
        const model = state.models.find((x) => x.kebab === a.dataset.model);
        a.querySelector(".count").textContent = text((m.rows_per_model || {})[model.name] ?? "");
      }
    } catch (error) {
      ops.replaceChildren(el("p", {class: "problem"}, explain(error)));
    }
  }

  // ---------------------------------------------------------------- the token

  function showToken() {
    const t = token();
    let note = "no token";
    if (t) {
      note = "token set";
      try {
        const payload = JSON.parse(atob(t.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
        if (payload.exp) note += ", expires " + new Date(payload.exp * 1000).toLocaleTimeString();
      } catch (e) {
        note += " (not a JWT?)";
      }
    }
    $("token-state").textContent = note;
  }

  function useToken(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    showToken();
    if (state.model) { stopLive(); state.live = $("live").checked; refresh(); }
    refreshOps();
  }

  // ---------------------------------------------------------------- start

  async function start() {
    showToken();
    $("token-form").addEventListener("submit", (e) => { e.preventDefault(); useToken($("token").value.trim()); });
    $("token-forget").addEventListener("click", () => useToken(""));
    $("filters").addEventListener("submit", (e) => { e.preventDefault(); readFilters(); });
    $("filters").addEventListener("change", (e) => { if (e.target.tagName === "SELECT") readFilters(); });
    $("filters").addEventListener("reset", () => setTimeout(readFilters));
    $("projection").addEventListener("change", () => { state.projection = $("projection").value; refresh(); });
    $("limit").addEventListener("change", () => { state.limit = Number($("limit").value); state.offset = 0; refresh(); });
    $("live").addEventListener("change", () => {
      if (!$("live").checked) stopLive();
      state.live = $("live").checked;
      state.asOf = null;
      state.offset = 0;
      refresh();
    });
    $("as-of").addEventListener("input", onSlider);
    $("as-of-now").addEventListener("click", () => { state.asOf = null; refresh(); });
    $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); refresh(); });
    $("next").addEventListener("click", () => { state.offset += state.limit; refresh(); });
    $("record-close").addEventListener("click", () => { $("record").hidden = true; });
    $("ops-refresh").addEventListener("click", refreshOps);
    window.addEventListener("hashchange", selectFromHash);

    let doc;
    try {
      doc = (await getJson("/openapi.json")).body;
    } catch (error) {
      setStatus("Cannot read the service's OpenAPI document: " + explain(error), true);
      return;
    }
    $("service-title").textContent = doc.info && doc.info.title ? "· " + doc.info.title : "";
    state.models = readModels(doc);
    $("model-list").replaceChildren(...state.models.map((m) => el("li", {},
      el("a", {href: "#/" + m.kebab, "data-model": m.kebab}, m.name, el("span", {class: "count"})))));
    if (!state.models.length) { setStatus("The schema declares no models."); return; }
    await refreshOps();
    selectFromHash();
    setInterval(refreshOps, 5000);
  }

  start();
})();
