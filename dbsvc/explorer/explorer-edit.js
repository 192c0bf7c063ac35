/* dbsvc explorer, the record form: create, edit (PATCH) and delete through the public API.
 *
 * The fields come from the OpenAPI document: `<Model>.Create` for a new record,
 * `<Model>.Patch` for an edit. The form sends what the person typed, as JSON of the field's
 * type where the text is one (`42` for an integer field, `true` for a boolean), and the
 * raw text otherwise, so the service's own 422 names the field, the value and what it
 * expected: the page never second-guesses the validator. An edit sends only the fields
 * that changed, with `If-Match` (the ETag the pane read), so a record changed since is
 * 412 and nothing is overwritten. Values are put in the page as text, never as HTML.
 */
"use strict";
window.DbsvcEdit = (() => {
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    node.append(...children);
    return node;
  }

  /** The form's fields, from a `<Model>.Create` or `<Model>.Patch` schema (its $refs resolved by `resolve`). */
  function fieldsOf(schema, resolve) {
    const required = new Set((schema && schema.required) || []);
    return Object.entries((schema && schema.properties) || {}).map(([name, raw]) => {
      const s = resolve(raw) || {};
      const types = [].concat(s.type || []);
      const nullable = types.includes("null") || (s.enum || []).includes(null);
      let kind = "json";
      if (s.enum) kind = "enum";
      else if (types.includes("boolean")) kind = "boolean";
      else if (types.includes("integer")) kind = "integer";
      else if (types.includes("number")) kind = "number";
      else if (types.includes("string")) kind = "string";
      return {
        name, kind, nullable, required: required.has(name),
        values: s.enum ? s.enum.filter((v) => v !== null).map(String) : null,
        hint: s.format || (kind === "json" ? "JSON" : kind),
        defaulted: "default" in s || /defaults to|assigned when omitted|generated when left out/.test(s.description || ""),
      };
    });
  }

  function shown(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function control(field, value) {
    const name = field.name;
    if (field.kind === "enum" || field.kind === "boolean") {
      const options = field.kind === "boolean" ? ["true", "false"] : field.values;
      const select = el("select", {name}, el("option", {value: ""}, field.required ? "(choose)" : "(leave out)"));
      for (const v of options) select.append(el("option", {value: v}, v));
      select.value = shown(value);
      return select;
    }
    if (field.kind === "json") {
      return el("textarea", {name, rows: 2, spellcheck: false, value: value === undefined ? "" : JSON.stringify(value)});
    }
    return el("input", {type: "text", name, spellcheck: false, placeholder: field.hint, value: shown(value)});
  }

  /**
   * A form for `fields` holding `record` (an edit) or empty (a create). Each field gets a
   * `.field-error[data-field]` beside it for the service's 422 message; a nullable field a
   * "null" box.
   */
  function form(fields, record) {
    const out = el("form", {id: "record-form", autocomplete: "off", noValidate: true});
    for (const field of fields) {
      const value = record ? record[field.name] : undefined;
      const row = el("div", {class: "form-field", "data-field": field.name},
        el("label", {htmlFor: "edit-" + field.name}, field.name + (field.required && !record ? " *" : "")));
      const input = control(field, value);
      input.id = "edit-" + field.name;
      row.append(input);
      if (field.nullable) {
        const box = el("input", {type: "checkbox", name: field.name + ".null", checked: record ? value === null : false});
        input.disabled = box.checked;   // null: the value box does not count
        box.addEventListener("change", () => { input.disabled = box.checked; });
        row.append(el("label", {class: "null-box"}, box, " null"));
      }
      row.append(el("span", {class: "field-error", "data-field": field.name}));
      out.append(row);
    }
    out.append(el("p", {class: "form-problem problem", hidden: true}));
    return out;
  }

  /** The typed JSON value of a field's text; the text itself where it is not one (the service names it). */
  function valueOf(field, textValue) {
    if (field.kind === "integer" || field.kind === "number") {
      return /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(textValue) ? Number(textValue) : textValue;
    }
    if (field.kind === "boolean") return textValue === "true" ? true : textValue === "false" ? false : textValue;
    if (field.kind === "json") return JSON.parse(textValue);
    return textValue;
  }

  /**
   * The body to send, or {problems} for what cannot be sent (JSON that does not parse). A
   * create leaves out an empty optional field (its default or null applies); an edit sends
   * only the fields whose value differs from `record`.
   */
  function collect(formNode, fields, record) {
    const body = {};
    const problems = [];
    for (const field of fields) {
      const input = formNode.elements[field.name];
      const nullBox = formNode.elements[field.name + ".null"];
      let value;
      if (nullBox && nullBox.checked) value = null;
      else {
        const raw = field.kind === "string" ? input.value : input.value.trim();
        // Left empty: a create leaves an optional field out (its default or null applies),
        // an edit leaves a non-text field as it was; a required field is sent as typed.
        if (raw === "" && (record ? field.kind !== "string" : !field.required)) continue;
        try {
          value = valueOf(field, raw);
        } catch (error) {
          problems.push({field: field.name, message: "is not JSON: " + error.message});
          continue;
        }
      }
      if (record && JSON.stringify(record[field.name]) === JSON.stringify(value)) continue;
      body[field.name] = value;
    }
    return problems.length ? {problems} : {body};
  }

  /** Put a problem's messages beside their fields; the rest (and its detail) under the form. */
  function showErrors(formNode, detail, errors) {
    for (const span of formNode.querySelectorAll(".field-error")) span.textContent = "";
    const loose = [];
    for (const error of errors || []) {
      const span = formNode.querySelector(`.field-error[data-field="${CSS.escape(String(error.field))}"]`);
      if (span) span.textContent = error.message;
      else loose.push(`${error.field}: ${error.message}`);
    }
    const line = formNode.querySelector(".form-problem");
    line.textContent = [detail, ...loose].filter(Boolean).join(" · ");
    line.hidden = !line.textContent;
  }

  /** What a refused write means, in words (the service's detail follows). */
  function explainWrite(status, code) {
    if (code === "unique_violation") return "Another record already holds this value, and the field is unique.";
    if (code === "foreign_key_violation") return "A referenced record does not exist: check the reference fields.";
    if (code === "referenced") return "Other records still reference this one: delete or change them first.";
    if (code === "precondition_failed") return "The record changed since this pane read it; the pane now shows the current version: make your change again.";
    if (code === "constraint_violation") return "The service refused some values (beside each field).";
    if (code === "read_only_replica") return "This service is a read replica: write to its primary.";
    if (status === 401) return "This service needs a token for writes: paste one in the token box.";
    if (status === 403) return "The token may not make this change.";
    return "";
  }

  return {fieldsOf, form, collect, showErrors, explainWrite};
})();
