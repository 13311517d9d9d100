// A JSON value as a collapsible tree: objects and arrays are <details> elements (so
// the keyboard opens and closes them: Tab to a summary, Enter or Space), leaves are
// one line each. Which branches are open is remembered by path across redraws.

import { h } from "./dom.js";

const FIRST_CHILDREN = 100;
const MAX_STRING = 4000;

function leaf(value) {
  if (value === null) return h("span", { class: "v-null" }, "null");
  switch (typeof value) {
    case "string": {
      const text = value.length > MAX_STRING ? `${value.slice(0, MAX_STRING)}… (${value.length} chars)` : value;
      return h("span", { class: "v-str" }, JSON.stringify(text));
    }
    case "number":
      return h("span", { class: "v-num" }, String(value));
    case "boolean":
      return h("span", { class: "v-bool" }, String(value));
    default:
      return h("span", { class: "v-other" }, String(value));
  }
}

/** A one-line preview of `value` that stops as soon as it is long enough (it never
 * serialises a whole large value). */
function brief(value, max) {
  let out = "";
  const add = (text) => {
    out += text;
    return out.length < max;
  };
  const walk = (v, depth) => {
    if (v === null || typeof v !== "object") {
      return add(typeof v === "string" ? JSON.stringify(v.length > max ? v.slice(0, max) : v) : String(v));
    }
    if (depth > 2) return add(Array.isArray(v) ? "[…]" : "{…}");
    const isArray = Array.isArray(v);
    if (!add(isArray ? "[" : "{")) return false;
    let first = true;
    for (const key of isArray ? v.keys() : Object.keys(v)) {
      if (!first && !add(",")) return false;
      first = false;
      if (!isArray && !add(`${JSON.stringify(key)}:`)) return false;
      if (!walk(v[key], depth + 1)) return false;
    }
    return add(isArray ? "]" : "}");
  };
  walk(value, 0);
  return out.length > max ? `${out.slice(0, max - 1)}…` : out;
}

function keyLabel(key) {
  return h("span", { class: "k" }, typeof key === "number" ? `[${key}]` : key);
}

/**
 * Render `value` under `label`. Options: open (a Set of open paths, kept up to date),
 * depth (branches open by default down to this depth), highlight (a path to mark),
 * path (this value's path).
 */
export function tree(value, label, opts = {}) {
  const open = opts.open || new Set();
  const path = opts.path ?? String(label);
  const depth = opts.depth ?? 1;
  const level = opts.level ?? 0;
  const marked = opts.highlight && (opts.highlight === path || opts.highlight.startsWith(`${path}.`) || opts.highlight.startsWith(`${path}[`));
  const exact = opts.highlight === path;
  if (value === null || typeof value !== "object") {
    return h(
      "div",
      { class: `t-leaf${exact ? " changed" : ""}`, "data-path": path },
      keyLabel(label),
      h("span", { class: "sep" }, ": "),
      leaf(value),
    );
  }
  const isArray = Array.isArray(value);
  const keys = isArray ? value.map((_, i) => i) : Object.keys(value);
  const isOpen = open.has(path) || (!open.has(`!${path}`) && (level < depth || marked));
  const details = h("details", { class: `t-node${exact ? " changed" : ""}`, "data-path": path });
  if (isOpen) details.open = true;
  const summary = h(
    "summary",
    {},
    keyLabel(label),
    h("span", { class: "sep" }, ": "),
    h("span", { class: "t-meta" }, isArray ? `[${keys.length}]` : `{${keys.length}}`),
    isOpen ? null : h("span", { class: "t-preview" }, ` ${brief(value, 60)}`),
  );
  details.append(summary);
  let filled = false;
  const fillChildren = () => {
    if (filled) return;
    filled = true;
    const box = h("div", { class: "t-children" });
    const child = (key) => {
      const childPath = isArray ? `${path}[${key}]` : /^[A-Za-z0-9_][A-Za-z0-9_-]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
      return tree(value[key], key, { ...opts, path: childPath, level: level + 1 });
    };
    const all = open.has(`*${path}`);
    const shown = all ? keys : keys.slice(0, FIRST_CHILDREN);
    box.append(...shown.map(child));
    if (shown.length < keys.length) {
      const more = h(
        "button",
        {
          type: "button",
          class: "t-more link",
          onclick: () => {
            open.add(`*${path}`);
            more.replaceWith(...keys.slice(shown.length).map(child));
          },
        },
        `show the other ${keys.length - shown.length}`,
      );
      box.append(more);
    }
    details.append(box);
  };
  if (isOpen) fillChildren();
  details.addEventListener("toggle", () => {
    if (details.open) {
      open.add(path);
      open.delete(`!${path}`);
      fillChildren();
      summary.querySelector(".t-preview")?.remove();
    } else {
      open.delete(path);
      open.add(`!${path}`);
    }
  });
  return details;
}
