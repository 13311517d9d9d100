// Form fields generated from the start node's inputs schema (a JSON Schema object):
// text for strings (a list for enums), numbers, a checkbox for booleans, JSON for the
// rest. read() gives the inputs object or marks the fields it cannot read.

import { h } from "./dom.js";

let counter = 0;

function fieldFor(name, schema, required, example) {
  const id = `in-${++counter}`;
  const helpId = `${id}-help`;
  const errorId = `${id}-error`;
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type;
  const description = schema.description || schema.title;
  const initial = example !== undefined ? example : schema.default;
  let control;
  let read;
  const described = [description ? helpId : null, errorId].filter(Boolean).join(" ");
  const common = { id, name, "aria-describedby": described, required: required || undefined };
  if (Array.isArray(schema.enum)) {
    control = h(
      "select",
      common,
      required ? null : h("option", { value: "" }, "(none)"),
      schema.enum.map((v, i) => h("option", { value: String(i), selected: initial !== undefined && JSON.stringify(initial) === JSON.stringify(v) }, typeof v === "string" ? v : JSON.stringify(v))),
    );
    read = () => (control.value === "" ? undefined : schema.enum[Number(control.value)]);
  } else if (type === "boolean") {
    control = h("input", { ...common, type: "checkbox", checked: initial === true, required: undefined });
    read = () => control.checked;
  } else if (type === "integer" || type === "number") {
    control = h("input", {
      ...common,
      type: "number",
      step: type === "integer" ? "1" : "any",
      min: schema.minimum,
      max: schema.maximum,
      value: initial !== undefined ? String(initial) : "",
    });
    read = () => {
      if (control.value.trim() === "") return undefined;
      const value = Number(control.value);
      if (Number.isNaN(value)) throw new Error("not a number");
      return value;
    };
  } else if (type === "string") {
    const long = !(schema.maxLength && schema.maxLength <= 120) && !schema.format;
    control = long
      ? h("textarea", { ...common, rows: 3, maxlength: schema.maxLength }, initial !== undefined ? String(initial) : "")
      : h("input", { ...common, type: schema.format === "email" ? "email" : "text", maxlength: schema.maxLength, value: initial !== undefined ? String(initial) : "" });
    read = () => (control.value === "" && !required ? undefined : control.value);
  } else {
    control = h(
      "textarea",
      { ...common, rows: 3, class: "json", spellcheck: "false", placeholder: type === "array" ? "[ … ] (JSON)" : "JSON" },
      initial !== undefined ? JSON.stringify(initial, null, 2) : "",
    );
    read = () => {
      if (control.value.trim() === "") return undefined;
      try {
        return JSON.parse(control.value);
      } catch (err) {
        throw new Error(`not valid JSON (${err.message})`);
      }
    };
  }
  const error = h("p", { class: "field-error", id: errorId, "aria-live": "polite" });
  const wrap = h(
    "div",
    { class: `field${type === "boolean" ? " check" : ""}`, "data-field": name },
    h("label", { for: id }, name, required ? h("span", { class: "req", "aria-hidden": "true" }, " *") : null, required ? h("span", { class: "sr-only" }, " (required)") : null),
    control,
    description ? h("p", { class: "help", id: helpId }, description) : null,
    error,
  );
  return {
    name,
    el: wrap,
    control,
    read,
    setError(message) {
      error.textContent = message || "";
      control.setAttribute("aria-invalid", message ? "true" : "false");
      wrap.classList.toggle("invalid", Boolean(message));
    },
  };
}

/** The inputs fields of `schema`, pre-filled from `example`. */
export function inputsForm(schema, example) {
  const props = schema && typeof schema === "object" && schema.properties && typeof schema.properties === "object" ? schema.properties : null;
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  const fields = [];
  if (props && Object.keys(props).length) {
    for (const [name, sub] of Object.entries(props)) {
      fields.push(fieldFor(name, sub && typeof sub === "object" ? sub : {}, required.has(name), example?.[name]));
    }
  } else if (!schema || schema.type !== "object" || schema.additionalProperties !== false) {
    const raw = fieldFor("inputs", { type: "object", description: "The run's inputs as a JSON object ($in)." }, false, example ?? undefined);
    raw.whole = true;
    fields.push(raw);
  }
  return {
    fields,
    el: h("div", { class: "inputs" }, fields.length ? fields.map((f) => f.el) : h("p", { class: "muted" }, "This workflow takes no inputs.")),
    /** The inputs object, or null when a field cannot be read (its error is shown). */
    read() {
      let ok = true;
      let inputs = {};
      for (const field of fields) {
        field.setError("");
        try {
          const value = field.read();
          if (field.whole) inputs = value ?? {};
          else if (value !== undefined) inputs[field.name] = value;
        } catch (err) {
          field.setError(err.message);
          ok = false;
        }
      }
      return ok ? inputs : null;
    },
    /** Show the server's diagnostics (pointers /inputs/<name>) on their fields. */
    showDiagnostics(diagnostics) {
      const rest = [];
      for (const d of diagnostics || []) {
        const match = /^\/inputs\/([^/]+)/.exec(d.pointer || "");
        const field = match && fields.find((f) => f.name === decodeURIComponent(match[1]).replace(/~1/g, "/").replace(/~0/g, "~"));
        if (field) field.setError(d.message);
        else rest.push(d);
      }
      return rest;
    },
  };
}
