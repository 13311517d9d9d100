// The run's state ($in, $vars, $tmp, $ctx) at any event: the state it started from
// (state_initial.json) with the run's `state_write` events applied up to that event;
// `$tmp` is cleared after every op, as the runner does.

const KEY = "[A-Za-z0-9_][A-Za-z0-9_\\-]*";
const SEGMENT = new RegExp(`\\.(${KEY})|\\[(-?\\d+)\\]|\\[("(?:[^"\\\\]|\\\\.)*")\\]`, "y");
const ROOT = /^\$(in|vars|tmp|ctx|secrets)\b/;

/** `$vars.a[0]["b c"]` -> {root: "vars", keys: ["a", 0, "b c"]}, or null. */
export function parsePath(text) {
  const stripped = String(text).trim();
  const root = ROOT.exec(stripped);
  if (!root) return null;
  const keys = [];
  let pos = root[0].length;
  while (pos < stripped.length) {
    SEGMENT.lastIndex = pos;
    const seg = SEGMENT.exec(stripped);
    if (!seg) return null;
    if (seg[1] !== undefined) keys.push(seg[1]);
    else if (seg[2] !== undefined) keys.push(Number(seg[2]));
    else {
      try {
        keys.push(JSON.parse(seg[3]));
      } catch {
        return null;
      }
    }
    pos = SEGMENT.lastIndex;
  }
  return { root: root[1], keys };
}

function copy(value) {
  if (value === null || typeof value !== "object") return value;
  return structuredClone(value);
}

function emptyState(initial) {
  const base = initial && typeof initial === "object" ? initial : {};
  return {
    in: copy(base.in ?? {}),
    vars: copy(base.vars ?? {}),
    tmp: copy(base.tmp ?? {}),
    ctx: copy(base.ctx ?? {}),
  };
}

function container(state, path, create) {
  let target = state[path.root];
  if (target === undefined) return undefined;
  const keys = path.keys;
  for (let i = 0; i < keys.length - 1; i++) {
    const key = keys[i];
    let next = target?.[key];
    if (next === null || typeof next !== "object") {
      if (!create) return undefined;
      next = typeof keys[i + 1] === "number" ? [] : {};
      target[key] = next;
    }
    target = next;
  }
  return target;
}

/** Apply one `state_write` event's data to `state` (in place). */
export function applyWrite(state, data) {
  const path = parsePath(data.path);
  if (!path || !path.keys.length || !(path.root in state)) return null;
  const last = path.keys[path.keys.length - 1];
  if (data.deleted) {
    const parent = container(state, path, false);
    if (parent && typeof parent === "object") {
      if (Array.isArray(parent) && typeof last === "number") parent.splice(last, 1);
      else delete parent[last];
    }
  } else if ("appended" in data) {
    const parent = container(state, path, true);
    let list = parent[last];
    if (!Array.isArray(list)) list = list === undefined || list === null ? [] : [list];
    list = [...list, copy(data.appended)];
    parent[last] = list;
  } else {
    const parent = container(state, path, true);
    parent[last] = copy(data.value);
  }
  return path;
}

/**
 * The state at any point of the run's events. `at(count)` moves to the state after the
 * first `count` events: forward from where it stands, or rebuilt from the initial
 * state when going back.
 */
export class StateTimeline {
  constructor(initial) {
    this.initial = initial;
    this.state = emptyState(initial);
    this.count = 0;
    this.lastWrite = null;
  }

  at(events, count) {
    if (count < this.count) {
      this.state = emptyState(this.initial);
      this.count = 0;
    }
    this.lastWrite = null;
    for (let i = this.count; i < count; i++) {
      const ev = events[i];
      if (ev.type === "state_write") {
        const path = applyWrite(this.state, ev.data || {});
        if (path) this.lastWrite = { path: ev.data.path, index: i };
      } else if (ev.type === "op_finished" && !ev.branch) {
        this.state.tmp = {};
      }
    }
    this.count = count;
    return this.state;
  }
}
