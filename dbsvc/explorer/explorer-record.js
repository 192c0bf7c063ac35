/* dbsvc explorer, the record pane: one record read as of the table's watermark, and the
 * writes of explorer-edit.js's form (create, edit with If-Match, delete) sent from it.
 *
 * `window.DbsvcRecord(ctx)` builds the pane over what explorer.js shares (`ctx`: its DOM
 * helpers, its state, its requests); it keeps which record it shows (`current`) and answers
 * `open`, `reopen` (after the slider moved), `shown`, `close` and `wire` (its buttons).
 * A write's outcome goes to `#write-note`; the status line stays the table's.
 */
"use strict";
window.DbsvcRecord = (ctx) => {
  const {$, el, text, state, Problem, getJson, send, explain, setStatus, afterWrite} = ctx;
  const E = window.DbsvcEdit;   // explorer-edit.js
  let pane = null;              // {model, id, record, etag, asOf, projected, mode: "show"|"edit"|"create"}

  /** Read one record into the pane: as of the table's watermark, in the table's projection. */
  async function openRecord(model, id) {
    const params = new URLSearchParams();
    const here = model === state.model;
    const asOf = here && state.asOf !== null && !state.live ? state.asOf : null;
    if (here && state.projection) params.set("projection", state.projection);
    if (asOf !== null) params.set("as_of", String(asOf));
    const path = "/api/" + model.kebab + "/" + encodeURIComponent(text(id)) + (params.toString() ? "?" + params : "");
    const node = $("record");
    const list = $("record-fields");
    const reading = {model, id, record: null, etag: "", asOf, projected: Boolean(params.get("projection")), mode: "show"};
    pane = reading;
    node.hidden = false;
    node.dataset.id = text(id);
    node.dataset.state = "loading";
    $("record-title").textContent = model.name + " " + text(id) + (asOf !== null ? ` as of watermark ${asOf}` : "");
    $("record-etag").textContent = "";
    list.replaceChildren();   // never the last record's fields under this record's title
    $("record-form-slot").replaceChildren();
    renderActions();
    node.scrollIntoView({block: "nearest"});
    try {
      const {body, headers} = await getJson(path);
      if (pane !== reading) return;
      reading.record = body;
      reading.etag = headers.get("ETag") || "";
      // The record's version (docs/guide/rest.md, "ETags and conditional writes").
      $("record-etag").textContent = reading.etag ? "ETag " + reading.etag : "";
      list.replaceChildren(...Object.entries(body).flatMap(([field, value]) => [
        el("dt", {}, field),
        el("dd", {"data-field": field}, value !== null && typeof value === "object" ? JSON.stringify(value, null, 2) : text(value)),
      ]));
      node.dataset.state = "shown";
    } catch (error) {
      if (pane !== reading) return;
      const gone = error instanceof Problem && error.status === 404;
      const why = gone && asOf !== null ? `${model.name} ${text(id)} did not exist at watermark ${asOf}.`
        : gone ? `${model.name} ${text(id)} does not exist (deleted?).` : explain(error);
      list.replaceChildren(el("dt", {}, gone ? "absent" : "error"), el("dd", {class: "problem"}, why));
      node.dataset.state = gone ? "absent" : "error";
    }
    renderActions();
    node.scrollIntoView({block: "nearest"});
  }

  /** The pane's buttons for what it holds: a present whole record may be edited and deleted. */
  function renderActions() {
    const editing = pane && pane.mode !== "show";
    const writable = pane && pane.mode === "show" && pane.record && pane.asOf === null;
    $("record-edit").hidden = !writable;
    $("record-delete").hidden = !writable;
    $("record-delete").textContent = "Delete";
    $("record-delete").dataset.armed = "";
    $("record-save").hidden = !editing;
    $("record-cancel").hidden = !editing;
    $("record-fields").hidden = Boolean(editing);
    $("new-record").disabled = state.asOf !== null;
    $("new-record").title = state.asOf !== null ? "the past is read-only: move the slider to now to write" : "";
  }

  /** The pane again, for the record it shows (after the slider moved, or a write). */
  function reopenRecord() {
    if (!pane || $("record").hidden || pane.mode === "create") return;
    openRecord(pane.model, pane.id);
  }

  function showForm(mode) {
    const model = mode === "create" ? state.model : pane.model;
    if (mode === "create") {
      pane = {model, id: null, record: null, etag: "", asOf: null, projected: false, mode};
      $("record").hidden = false;
      $("record").dataset.id = "";
      $("record-title").textContent = "New " + model.name;
      $("record-etag").textContent = "";
      $("record-fields").replaceChildren();
    }
    pane.mode = mode;
    const fields = mode === "create" ? model.createFields : model.editFields;
    $("record-form-slot").replaceChildren(E.form(fields, mode === "create" ? null : pane.record));
    $("record").dataset.state = mode;
    renderActions();
    $("record").scrollIntoView({block: "nearest"});
  }

  async function startEdit() {
    if (pane.projected) {   // the form needs every field: read the whole record first
      const {body, headers} = await getJson("/api/" + pane.model.kebab + "/" + encodeURIComponent(text(pane.id)));
      pane.record = body;
      pane.etag = headers.get("ETag") || "";
      pane.projected = false;
    }
    showForm("edit");
  }

  async function save() {
    const form = $("record-form");
    const model = pane.model;
    const fields = pane.mode === "create" ? model.createFields : model.editFields;
    const {body, problems} = E.collect(form, fields, pane.mode === "create" ? null : pane.record);
    if (problems) { E.showErrors(form, "", problems); return; }
    if (pane.mode === "edit" && !Object.keys(body).length) { E.showErrors(form, "Nothing changed.", []); return; }
    $("record").dataset.state = "saving";
    try {
      if (pane.mode === "create") {
        const {body: created} = await send("POST", "/api/" + model.kebab, body);
        note(`Created ${model.name} ${text(created[model.id])}.`);
        afterWrite();
        openRecord(model, created[model.id]);
      } else {
        await send("PATCH", "/api/" + model.kebab + "/" + encodeURIComponent(text(pane.id)), body,
          pane.etag ? {"If-Match": pane.etag} : {});
        note(`Saved ${model.name} ${text(pane.id)}.`);
        afterWrite();
        openRecord(model, pane.id);
      }
    } catch (error) {
      refused(form, error);
    }
  }

  async function remove() {
    const button = $("record-delete");
    if (!button.dataset.armed) {   // a second click confirms: no dialog box
      button.dataset.armed = "1";
      button.textContent = "Really delete?";
      return;
    }
    const {model, id, etag} = pane;
    try {
      await send("DELETE", "/api/" + model.kebab + "/" + encodeURIComponent(text(id)), undefined,
        etag ? {"If-Match": etag} : {});
      note(`Deleted ${model.name} ${text(id)}.`);
      pane = null;
      $("record").hidden = true;
      afterWrite();
    } catch (error) {
      button.dataset.armed = "";
      button.textContent = "Delete";
      $("record-fields").append(el("dt", {}, "refused"), el("dd", {class: "problem"}, writeProblem(error)));
      if (error instanceof Problem && error.code === "precondition_failed") openRecord(model, id);
    }
  }

  function writeProblem(error) {
    if (!(error instanceof Problem)) return explain(error);
    return [E.explainWrite(error.status, error.code), error.message].filter(Boolean).join(" ");
  }

  function refused(form, error) {
    if (error instanceof Problem && error.code === "precondition_failed") {
      openRecord(pane.model, pane.id).then(() => {
        if (pane && pane.record) { showForm("edit"); E.showErrors($("record-form"), writeProblem(error), []); }
      });
      return;
    }
    E.showErrors(form, writeProblem(error), error instanceof Problem ? error.errors : []);
    $("record").dataset.state = "refused";
  }

  /** What the last write did, beside the New record button (the status line is the table's). */
  function note(message) { $("write-note").textContent = message; }


  function close() {
    $("record").hidden = true;
    pane = null;
    note("");
    renderActions();
  }

  /** The record the pane shows (not a form), or null. */
  function shown() {
    return pane && !$("record").hidden && pane.mode === "show" ? pane : null;
  }

  function wire() {
    $("record-close").addEventListener("click", () => { $("record").hidden = true; pane = null; });
    $("new-record").addEventListener("click", () => showForm("create"));
    $("record-edit").addEventListener("click", () => startEdit().catch((error) => setStatus(explain(error), true)));
    $("record-delete").addEventListener("click", remove);
    $("record-save").addEventListener("click", save);
    $("record-cancel").addEventListener("click", () => {
      if (pane.mode === "create") close(); else openRecord(pane.model, pane.id);
    });
  }

  return {open: openRecord, reopen: reopenRecord, shown, close, wire};
};
