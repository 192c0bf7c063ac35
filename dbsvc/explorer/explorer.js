/* dbsvc explorer: reads and watches a dbsvc service through its public API only.
 *
 * Models, fields, filters, sort keys and projections come from /openapi.json; records from
 * GET /api/<model>, a page at a time by the cursor of its `Link: rel="next"` header; the
 * query form (exact filters, ranges, prefixes, null tests) is explorer-query.js; time travel
 * is ?as_of=<watermark>; Live follows /live-query/<model> (the table) and /subscribe/<model>
 * (the feed pane) with the same conditions (explorer-live.js); the record pane reads one record and, through
 * the form of explorer-edit.js, creates, edits (PATCH with If-Match) and deletes (explorer-record.js); the Service
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
  const $ = (id) => document.getElementById(id);
  const Q = window.DbsvcQuery;  // explorer-query.js
  const E = window.DbsvcEdit;   // explorer-edit.js

  const state = {
    models: [], model: null, filters: {}, sort: [], limit: 20,
    projection: "", asOf: null, live: false, head: {},
  };
  const pages = new Q.Pages();  // the cursor pages followed (Next / Previous)
  let pageSeq = 0;              // the newest page read; older answers are dropped

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
      this.code = body && body.code ? body.code : "";
      this.errors = body && Array.isArray(body.errors) ? body.errors : [];
    }
  }

  async function getJson(path) {
    return send("GET", path);
  }

  /** One request with the token; a refusal is a Problem carrying the service's code and errors. */
  async function send(method, path, payload, extraHeaders) {
    const t = token();
    const headers = Object.assign(t ? {Authorization: "Bearer " + t} : {}, extraHeaders || {});
    if (payload !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(BASE + path, {
      method, headers, cache: "no-store", body: payload === undefined ? undefined : JSON.stringify(payload),
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
        } else {
          const condition = Q.conditionOf(param, enumOf);  // a filter or an operator
          if (condition) model.filters.push(condition);
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
      model.filters = Q.ordered(model.filters, model.fields);
      const fieldsOf = (shape) => E.fieldsOf(resolve(doc, schemas[shape]), (node) => resolve(doc, node));
      model.createFields = fieldsOf(name + ".Create");
      model.editFields = fieldsOf(name + ".Patch").filter((f) => f.name !== model.id);  // the key is not edited
      models.push(model);
    }
    return models;
  }

  // ---------------------------------------------------------------- state <-> URL

  function filterParams() {
    return Q.params(state.model.filters, state.filters);
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
    if (pages.cursor) params.set("cursor", pages.cursor);
    if (state.asOf !== null) params.set("as_of", String(state.asOf));
    return params;
  }

  function writeHash() {
    const params = listParams();
    params.delete("cursor");   // a page's place is this tab's walk, not part of the link
    if (state.live) params.set("live", "1");
    history.replaceState(null, "", "#/" + state.model.kebab + "?" + params.toString());
  }

  function readHash() {
    const [, kebab, query] = /^#\/([^?]*)\??(.*)$/.exec(location.hash) || [];
    const model = kebab ? state.models.find((m) => m.kebab === kebab) : state.models[0];
    if (!model) return kebab;   // a link to a model this schema does not have
    const params = new URLSearchParams(query || "");
    const number = (key, fallback) => (/^\d+$/.test(params.get(key) || "") ? Number(params.get(key)) : fallback);
    state.model = model;
    state.filters = {};
    for (const f of model.filters) if (params.has(f.name)) state.filters[f.name] = params.get(f.name);
    state.sort = (params.get("sort") || "").split(",").filter(Boolean)
      .map((k) => ({field: k.replace(/^-/, ""), desc: k.startsWith("-")}))
      .filter((k) => model.sortable.includes(k.field));
    state.limit = number("limit", 20);
    pages.reset();
    state.projection = model.projections[params.get("projection")] ? params.get("projection") : "";
    state.asOf = params.has("as_of") ? number("as_of", null) : null;
    state.live = params.get("live") === "1";
    return null;
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

  function renderRows(records) {
    const model = state.model;
    const refs = Object.fromEntries(model.fields.filter((f) => f.ref).map((f) => [f.name, f.ref]));
    const body = $("records").tBodies[0];
    const rows = records.map((record) => {
      const tr = el("tr");
      if (model.id in record) {
        tr.dataset.id = text(record[model.id]);
        tr.addEventListener("click", () => pane.open(model, record[model.id]));
      }
      live.mark(tr);
      for (const name of columns()) {
        const value = record[name];
        const td = el("td", {"data-field": name, title: text(value)}, text(value));
        if (value === null || value === undefined) td.className = "null";
        else if (refs[name]) {
          const parent = state.models.find((m) => m.name === refs[name]);
          if (parent) {
            td.className = "ref";
            td.title = "open " + parent.name + " " + text(value);
            td.addEventListener("click", (event) => { event.stopPropagation(); pane.open(parent, value); });
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
    pages.reset();
    renderHead();
    writeHash();
    if (state.live) live.render(); else loadPage();
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
      pages.shown = body.data.length;
      pages.next = Q.nextCursor(headers.get("Link"));
      const last = pages.start + body.data.length;
      $("page-state").textContent = body.total
        ? (body.data.length ? `${pages.start + 1}–${last} of ${body.total}` : `none here of ${body.total}`)
        : "no records";
      $("prev").disabled = !pages.back.length;
      $("next").disabled = !pages.next;
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
    pages.reset();
    renderSlider();
    clearTimeout(sliderTimer);
    sliderTimer = setTimeout(() => { writeHash(); loadPage(); pane.reopen(); }, 120);
  }

  // ---------------------------------------------------------------- one record (explorer-record.js)

  const pane = window.DbsvcRecord({
    $, el, text, state, Problem, getJson, send, explain, setStatus,
    afterWrite() { if (!state.live) loadPage(); refreshOps(); },   // live mode sees a write by itself
  });

  // ---------------------------------------------------------------- live mode (explorer-live.js)

  const live = window.DbsvcLive({
    $, el, text, state, BASE, token, Problem, getJson, explain, setStatus,
    filterParams, feedParams, renderRows, setHead, refreshOps,
  });

  // ---------------------------------------------------------------- controls

  function renderControls() {
    const model = state.model;
    $("model-title").textContent = model.name + " ";
    $("model-title").append(el("span", {class: "muted"}, "/api/" + model.kebab));
    for (const a of document.querySelectorAll("#model-list a")) {
      if (a.dataset.model === model.kebab) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    const form = $("filters");
    const inputs = Q.inputs(model.filters, state.filters);
    form.replaceChildren(...inputs);
    if (inputs.length) {
      form.append(el("button", {type: "submit"}, "Filter"), el("button", {type: "reset"}, "Clear"));
    } else {
      form.append(el("span", {class: "muted"}, "no @filter or @sort fields"));
    }
    const projection = $("projection");
    projection.replaceChildren(el("option", {value: ""}, "all fields"),
      ...Object.keys(model.projections).map((p) => el("option", {value: p}, p)));
    projection.value = state.projection;
    $("limit").value = String(state.limit);
    $("live").checked = state.live;
    $("pager").hidden = false;
    $("prev").hidden = $("next").hidden = state.live;
    pane.close();
    $("feed").hidden = !state.live;
    renderHead();
    renderSlider();
  }

  function readFilters() {
    for (const f of state.model.filters) state.filters[f.name] = $("filters").elements[f.name].value.trim();
    refresh();
  }

  /** Show the current state: a fresh live query, or the page read again. */
  function refresh() {
    pages.reset();
    writeHash();
    renderControls();
    if (state.live) live.start(); else loadPage();
  }

  function selectFromHash() {
    live.stop();
    const unknown = readHash();
    if (unknown !== null) {
      $("model-pane").hidden = true;
      for (const a of document.querySelectorAll("#model-list a")) a.removeAttribute("aria-current");
      setStatus(`No model is at #/${unknown}: this service has ${state.models.map((m) => m.name + " (#/" + m.kebab + ")").join(", ")}.`, true);
      return;
    }
    setStatus("");
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
    if (state.model) { live.stop(); state.live = $("live").checked; refresh(); }
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
    $("limit").addEventListener("change", () => { state.limit = Number($("limit").value); refresh(); });
    $("live").addEventListener("change", () => {
      if (!$("live").checked) live.stop();
      state.live = $("live").checked;
      state.asOf = null;
      refresh();
    });
    $("as-of").addEventListener("input", onSlider);
    $("as-of-now").addEventListener("click", () => {
      const shown = pane.shown();
      state.asOf = null;
      refresh();
      if (shown) pane.open(shown.model, shown.id);
    });
    $("prev").addEventListener("click", () => { pages.backward(); loadPage(); });
    $("next").addEventListener("click", () => { pages.forward(); loadPage(); });
    pane.wire();
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
