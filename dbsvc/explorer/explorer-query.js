/* dbsvc explorer, the query form: which conditions a model's list takes, their inputs,
 * and cursor pages. Loaded before explorer.js, which reaches it as `window.DbsvcQuery`.
 *
 * The conditions come from the list operation's parameters in /openapi.json (the same
 * generated parameters the server accepts, so the form never offers one it refuses):
 *   `field`          an exact filter (repeat-free here): "exact value", or a menu for enums and booleans
 *   `field__gte/lte` "from" and "to" on a sortable field (a range over its ordered index)
 *   `field__prefix`  "starts with" on a sortable string field
 *   `field__null`    a null test on a nullable filter or sort field
 *   `search`         the words of a text search, each a prefix (a model with `@search` fields)
 * A control's `name` is its query parameter, so the page's state, its URL fragment and the
 * request share one spelling. Live mode sends the same parameters to /live-query and
 * /subscribe, which take them too.
 *
 * Cursor pages: `nextCursor(link)` reads the `cursor` of a `Link: <...>; rel="next"`
 * header; `Pages` keeps the cursors followed so far, so Previous goes back through them.
 *
 * Every value reaches the page as text (el() appends strings), never as HTML.
 */
"use strict";
window.DbsvcQuery = (() => {
  // the operators the form offers, and how their inputs read
  const OPERATORS = {gte: "from", lte: "to", prefix: "starts with", null: ""};
  const NO_CONDITION = "(no filter)";

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) node[key] = value;
    node.append(...children);
    return node;
  }

  /** The condition a list parameter stands for, or null: {name, field, op, values}. */
  function conditionOf(param, enumOf) {
    const schema = param.schema || {};
    if (param.name === "search") return {name: "search", field: "search", op: "search", values: null, hint: ""};
    if (schema.type === "array" && param.explode === false) return null;  // `expand`: a comma list, not a filter
    if (schema.type === "array") return {name: param.name, field: param.name, op: "exact", values: enumOf(schema.items)};
    const match = /^(.+)__([a-z]+)$/.exec(param.name);
    if (!match || !(match[2] in OPERATORS)) return null;   // __gt and __lt: "from"/"to" cover them
    const [, field, op] = match;
    const values = op === "null" ? ["true", "false"] : op === "prefix" ? null : enumOf(schema);
    return {name: param.name, field, op, values, hint: hintOf(schema)};
  }

  function hintOf(schema) {
    if (schema.format === "date-time") return "2024-05-01T12:00:00Z";
    if (schema.format === "date") return "YYYY-MM-DD";
    return "";
  }

  /** The conditions in field order: each field's exact filter, range, prefix, null test. */
  function ordered(conditions, fields) {
    const rank = {exact: 0, gte: 1, lte: 2, prefix: 3, null: 4, search: 5};
    const at = Object.fromEntries(fields.map((f, i) => [f.name, i]));
    return conditions.slice().sort((a, b) => (at[a.field] ?? 1e9) - (at[b.field] ?? 1e9) || rank[a.op] - rank[b.op]);
  }

  /** The query parameters of the conditions that have a value, in the form's order. */
  function params(conditions, values) {
    const out = new URLSearchParams();
    for (const c of conditions) {
      const value = values[c.name];
      if (value !== undefined && value !== "") out.append(c.name, value);
    }
    return out;
  }

  function input(c) {
    if (c.op === "null") {
      return el("select", {name: c.name, title: `${c.name}=true|false`},
        el("option", {value: ""}, NO_CONDITION), el("option", {value: "true"}, "is null"),
        el("option", {value: "false"}, "is not null"));
    }
    if (c.values) {
      const select = el("select", {name: c.name, title: c.op === "exact" ? "exact match" : c.name},
        el("option", {value: ""}, NO_CONDITION));
      for (const v of c.values) select.append(el("option", {value: v}, v));
      return select;
    }
    const placeholder = c.op === "exact" ? "exact value" : c.op === "prefix" ? "starts with"
      : c.op === "search" ? "words (each a prefix)" : c.hint || OPERATORS[c.op];
    const title = c.op === "exact" ? "matches this exact value (compared by type)"
      : c.op === "search" ? "records holding a word that starts with each of these words, accents and case aside"
      : c.op === "prefix" ? `${c.name}: values starting with this text`
      : `${c.name}: ${c.op === "gte" ? "at least" : "at most"} this value (never a null)`;
    return el("input", {type: "text", name: c.name, placeholder, title, spellcheck: false});
  }

  function label(c) {
    if (c.op === "exact" || c.op === "search") return c.field + " ";
    if (c.op === "null") return c.field + " null? ";
    if (c.op === "prefix") return c.field + " prefix ";
    return `${c.field} ${OPERATORS[c.op]} `;
  }

  /** The form's labelled inputs, holding `values`. */
  function inputs(conditions, values) {
    return conditions.map((c) => {
      const node = input(c);
      node.value = values[c.name] || "";
      return el("label", {className: "condition-" + c.op}, label(c), node);
    });
  }

  /** The `cursor` of a `Link: <...>; rel="next"` header, or null (the last page). */
  function nextCursor(link) {
    const match = /<([^>]*)>\s*;\s*rel="next"/.exec(link || "");
    if (!match) return null;
    return new URL(match[1], location.origin).searchParams.get("cursor");
  }

  /** Where the table stands in a walk of cursor pages. */
  class Pages {
    constructor() { this.reset(); }
    reset() {
      this.cursor = null;   // the cursor the shown page was read with (null: the first page)
      this.start = 0;       // records before the shown page
      this.shown = 0;       // records on it
      this.next = null;     // the cursor of the page after it, from its Link header
      this.back = [];       // [cursor, start] of the pages before it
    }
    forward() {
      this.back.push([this.cursor, this.start]);
      this.start += this.shown;
      this.cursor = this.next;
    }
    backward() {
      [this.cursor, this.start] = this.back.pop() || [null, 0];
    }
  }

  return {conditionOf, ordered, params, inputs, nextCursor, Pages};
})();
