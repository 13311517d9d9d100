// The workflow drawn as the editor draws it (SVG): nodes at their positions, shaped by
// type, connections from a node's right side to the next one's left side with their
// branch labels, groups as frames. Statuses come from a RunModel; only the nodes and
// edges an update touched are redrawn.
//
// Keyboard: the canvas is one tab stop (the focused node); arrow keys move to the
// nearest node in that direction, Home and End to the first and last, Enter or Space
// opens the node in the inspector, + and - zoom, 0 fits the drawing to the view.

import { fmtInt, fmtMs, h, s, truncate } from "./dom.js";

/** The smallest size, in screen pixels, that Fit lets a node's name be drawn at. */
export const MIN_LABEL_PX = 11;
const TITLE_PX = 13;
/** The margin Fit leaves around the drawing, in screen pixels (the tools sit in it). */
const FIT_PAD = 16;
/** The margin above the drawing at Fit: room for the tools in the corner. */
const FIT_TOP = 52;
const CHAR_PX = 7.4;

/** A node's name on at most two lines of `perLine` characters, cut only past that. */
export function wrapLabel(label, perLine) {
  const text = String(label ?? "");
  if (text.length <= perLine) return [text];
  let cut = text.lastIndexOf(" ", perLine);
  if (cut < perLine / 3) cut = perLine;
  const first = text.slice(0, cut).trimEnd();
  return [first, truncate(text.slice(cut).trimStart(), perLine)];
}

/** The badge under a node: visits, time, tokens, forEach items. */
export function nodeStats(state) {
  const parts = [];
  if (state.visits > 1) parts.push(`×${state.visits}`);
  if (state.items) parts.push(`${fmtInt(state.items)} item${state.items === 1 ? "" : "s"}`);
  if (state.visits > 0 && state.ms >= 0.5) parts.push(fmtMs(state.ms));
  if (state.tokens) parts.push(`${fmtInt(state.tokens)} tok`);
  return parts.join(" · ");
}

const CATEGORY = {
  start: "terminal",
  end: "terminal",
  START: "terminal",
  END: "terminal",
  prompt: "llm",
  subAgent: "llm",
  skill: "llm",
  codex: "llm",
  LLM_WRITE: "llm",
  ifElse: "branch",
  switch: "branch",
  SWITCH: "branch",
  askUserQuestion: "ask",
  ASK: "ask",
  mcp: "tool",
  httpRequest: "tool",
  TOOL_CALL: "tool",
  variableStore: "data",
  dataTransform: "data",
  STATE: "data",
  TRANSFORM: "data",
  forEach: "flow",
  subAgentFlow: "flow",
  FOR_EACH: "flow",
  FORK: "flow",
  JOIN: "flow",
};

const GLYPH = {
  pending: "",
  running: "▶",
  completed: "✓",
  failed: "✕",
  halted: "?",
  interrupted: "■",
};

/** What the canvas says about where its nodes are drawn: nothing when the document placed them. */
function layoutNote(graph) {
  if (graph.layout !== "layered") return "";
  if (graph.source === "execir") return "layout: computed, op by op (the server has no document for this run, only its ExecIR)";
  return "layout: computed (the document has no usable positions)";
}

function shape(category, w, hgt) {
  const r = hgt / 2;
  switch (category) {
    case "terminal":
      return s("rect", { class: "shape", width: w, height: hgt, rx: r, ry: r });
    case "branch":
      return s("polygon", {
        class: "shape",
        points: `14,0 ${w - 14},0 ${w},${r} ${w - 14},${hgt} 14,${hgt} 0,${r}`,
      });
    case "ask":
      return s("polygon", { class: "shape", points: `14,0 ${w},0 ${w - 14},${hgt} 0,${hgt}` });
    case "tool":
      return s("path", {
        class: "shape",
        d: `M10,0 H${w - 10} A10,${r} 0 0 1 ${w - 10},${hgt} H10 A10,${r} 0 0 1 10,0 Z M${w - 10},0 A10,${r} 0 0 0 ${w - 10},${hgt}`,
      });
    case "flow":
      return s(
        "g",
        {},
        s("rect", { class: "shape-back", x: 6, y: -6, width: w, height: hgt, rx: 6 }),
        s("rect", { class: "shape", width: w, height: hgt, rx: 6 }),
      );
    case "llm":
      return s(
        "g",
        {},
        s("rect", { class: "shape", width: w, height: hgt, rx: 8 }),
        s("rect", { class: "accent", x: 0, y: 0, width: 6, height: hgt, rx: 3 }),
      );
    default:
      return s("rect", { class: "shape", width: w, height: hgt, rx: 3 });
  }
}

function edgePath(a, b, nodes) {
  const sx = a.x + a.w;
  const sy = a.y + a.h / 2;
  const tx = b.x;
  const ty = b.y + b.h / 2;
  if (tx < sx) {
    // A loop back: out to the right, under every node between the two ends, in from the
    // left, so that it never crosses a node.
    let bottom = Math.max(a.y + a.h, b.y + b.h);
    for (const n of nodes) {
      if (n.x + n.w >= tx - 30 && n.x <= sx + 30 && n.y <= bottom + 40 && n.y + n.h > bottom - 1) bottom = Math.max(bottom, n.y + n.h);
    }
    const below = bottom + 34;
    const d = `M${sx},${sy} C${sx + 60},${sy} ${sx + 60},${below} ${sx},${below} L${tx},${below} C${tx - 60},${below} ${tx - 60},${ty} ${tx},${ty}`;
    return { d, lx: (sx + tx) / 2, ly: below };
  }
  // The editor's (React Flow's) bezier from a right handle to a left handle.
  const offset = (distance) => (distance >= 0 ? 0.5 * distance : 0.25 * 25 * Math.sqrt(-distance));
  const k = Math.max(offset(tx - sx), 24);
  const d = `M${sx},${sy} C${sx + k},${sy} ${tx - k},${ty} ${tx},${ty}`;
  return { d, lx: (sx + tx) / 2, ly: (sy + ty) / 2 };
}

export class Canvas {
  constructor(graph, { onSelect, label }) {
    this.graph = graph;
    this.onSelect = onSelect;
    this.scale = 1;
    this.tx = 0;
    this.ty = 0;
    this.nodeEls = new Map();
    this.edgeEls = [];
    this.selected = null;
    this.follow = true;
    this.byId = new Map(graph.nodes.map((n) => [n.id, n]));
    this.order = [...graph.nodes].sort((p, q) => p.x - q.x || p.y - q.y).map((n) => n.id);
    this.focusId = this.order.find((id) => /start/i.test(this.byId.get(id).type)) || this.order[0] || null;

    const helpId = `canvas-help-${Math.random().toString(36).slice(2, 8)}`;
    this.viewport = s("g", { class: "viewport" });
    this.svg = s(
      "svg",
      {
        class: "graph",
        role: "group",
        "aria-label": label || "Workflow canvas",
        "aria-describedby": helpId,
      },
      s(
        "defs",
        {},
        s(
          "marker",
          { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 11, markerHeight: 11, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
          s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }),
        ),
        s(
          "marker",
          { id: "arrow-taken", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 11, markerHeight: 11, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
          s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow-taken" }),
        ),
      ),
      this.viewport,
    );
    const button = (text, title, onclick) =>
      h("button", { type: "button", class: "tool", title, "aria-label": title, onclick }, text);
    this.el = h(
      "div",
      { class: "canvas" },
      h(
        "div",
        { class: "canvas-tools" },
        button("−", "Zoom out", () => this.zoom(1 / 1.25)),
        button("+", "Zoom in", () => this.zoom(1.25)),
        button("Fit", "Fit the workflow to the view", () => this.fit()),
        (this.followButton = h(
          "button",
          { type: "button", class: "tool", "aria-pressed": "true", title: "Keep the running nodes in view", onclick: () => this.setFollow(!this.follow) },
          "Follow",
        )),
        h("span", { class: "layout-note" }, layoutNote(graph)),
      ),
      this.svg,
      (this.partNote = h("p", { class: "part-note", role: "status", hidden: true }, "")),
      h("p", { id: helpId, class: "sr-only" }, "Arrow keys move between nodes; Enter or Space opens the focused node in the inspector; plus and minus zoom; 0 fits the drawing."),
    );
    this.size = { width: 0, height: 0 };
    this.draw();
    this.bind();
  }

  /** The SVG's size, kept by a ResizeObserver: reading it never forces a layout (the
   * canvas pans while batches of events are applied). */
  viewSize() {
    if (!this.size.width) {
      const rect = this.svg.getBoundingClientRect();
      this.size = { width: rect.width, height: rect.height };
    }
    return this.size;
  }

  draw() {
    const g = this.graph;
    const groups = s("g", { class: "groups" });
    for (const grp of g.groups) {
      groups.append(
        s(
          "g",
          { class: "group", "data-group": grp.id },
          s("rect", { x: grp.x, y: grp.y, width: grp.w, height: grp.h, rx: 10 }),
          s("text", { x: grp.x + 12, y: grp.y + 18 }, truncate(grp.label, 48)),
        ),
      );
    }
    const edges = s("g", { class: "edges" });
    const labels = s("g", { class: "edge-labels" });
    g.edges.forEach((edge, index) => {
      const a = this.byId.get(edge.from);
      const b = this.byId.get(edge.to);
      if (!a || !b) {
        this.edgeEls.push(null);
        return;
      }
      const { d, lx, ly: wanted } = edgePath(a, b, g.nodes);
      const ly = edge.label ? this.placeLabel(lx, wanted, truncate(edge.label, 24).length * 6.6 + 12) : wanted;
      const path = s("path", { class: "edge", d, "marker-end": "url(#arrow)", "data-edge": index });
      edges.append(path);
      const count = s("text", { class: "edge-count", x: lx, y: ly + (edge.label ? 22 : 4), "text-anchor": "middle" }, "");
      labels.append(count);
      let label = null;
      if (edge.label) {
        const text = truncate(edge.label, 24);
        const width = text.length * 6.6 + 12;
        label = s(
          "g",
          { class: "edge-label", transform: `translate(${lx},${ly})`, "data-edge": index },
          s("rect", { x: -width / 2, y: -10, width, height: 20, rx: 10 }),
          s("text", { x: 0, y: 4, "text-anchor": "middle" }, text),
        );
        labels.append(label);
      }
      this.edgeEls.push({ path, label, count });
    });
    const nodes = s("g", { class: "nodes" });
    for (const n of g.nodes) {
      const category = CATEGORY[n.type] || "other";
      const title = s("title", {}, `${n.label} (${n.type})`);
      const glyph = s("text", { class: "glyph", x: n.w - 16, y: 20, "text-anchor": "middle", "aria-hidden": "true" }, "");
      const visits = s(
        "g",
        { class: "visits", transform: `translate(${n.w - 6},-8)`, "aria-hidden": "true" },
        s("rect", { x: -16, y: -9, width: 32, height: 18, rx: 9 }),
        s("text", { x: 0, y: 4, "text-anchor": "middle" }, ""),
      );
      const el = s(
        "g",
        {
          class: `node cat-${category}`,
          "data-node": n.id,
          "data-status": "pending",
          "data-type": n.type,
          transform: `translate(${n.x},${n.y})`,
          tabindex: n.id === this.focusId ? 0 : -1,
          role: "button",
          "aria-pressed": "false",
          "aria-label": `${n.label}, ${n.type}, pending`,
        },
        title,
        s("rect", { class: "focus-ring", x: -5, y: -5, width: n.w + 10, height: n.h + 10, rx: 12 }),
        shape(category, n.w, n.h),
        ...this.titleLines(n, category),
        glyph,
        visits,
        s("text", { class: "stats", x: 2, y: n.h + 14 }, ""),
      );
      const stats = el.querySelector(".stats");
      this.nodeEls.set(n.id, { el, glyph, visits, stats, visitsText: visits.querySelector("text"), node: n });
      nodes.append(el);
    }
    this.viewport.append(groups, edges, labels, nodes);
  }

  /** A free spot for an edge label centred at (x, y): moved down past the labels already
   * placed until its box overlaps none of them. */
  placeLabel(x, y, width) {
    this.placed ??= [];
    const overlaps = (p, yy) => Math.abs(p.x - x) < (p.w + width) / 2 + 4 && Math.abs(p.y - yy) < 24;
    let ly = y;
    for (let tries = 0; tries < 50 && this.placed.some((p) => overlaps(p, ly)); tries++) ly += 24;
    this.placed.push({ x, y: ly, w: width });
    return ly;
  }

  /** The node's name (wrapped onto a second line before it is cut) and its type. */
  titleLines(n, category) {
    const x = category === "branch" || category === "ask" ? 20 : 14;
    const lines = wrapLabel(n.label, Math.max(8, Math.floor((n.w - 44) / CHAR_PX)));
    const out = [];
    if (lines.length === 1) {
      out.push(s("text", { class: "title", x, y: 22 }, lines[0]));
      out.push(s("text", { class: "kind", x, y: 40 }, n.type));
    } else {
      out.push(s("text", { class: "title", x, y: 17 }, s("tspan", { x, dy: 0 }, lines[0]), s("tspan", { x, dy: 15 }, lines[1])));
      out.push(s("text", { class: "kind", x, y: 46 }, n.type));
    }
    return out;
  }

  bind() {
    const svg = this.svg;
    new ResizeObserver((entries) => {
      const box = entries[entries.length - 1].contentRect;
      const changed = box.width !== this.size.width || box.height !== this.size.height;
      this.size = { width: box.width, height: box.height };
      if (changed && this.fitted) this.fit();
    }).observe(svg);
    let drag = null;
    svg.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, tx: this.tx, ty: this.ty, moved: false, id: e.pointerId };
    });
    svg.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (!drag.moved && Math.hypot(dx, dy) > 4) {
        drag.moved = true;
        svg.setPointerCapture(drag.id);
        svg.classList.add("panning");
      }
      if (drag.moved) {
        this.setFollow(false);
        this.tx = drag.tx + dx;
        this.ty = drag.ty + dy;
        this.apply();
      }
    });
    const end = (e) => {
      if (!drag) return;
      const moved = drag.moved;
      drag = null;
      svg.classList.remove("panning");
      if (!moved && e.type === "pointerup") {
        const nodeEl = e.target.closest?.(".node");
        if (nodeEl) this.activate(nodeEl.dataset.node);
      }
    };
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
    svg.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        this.setFollow(false);
        const rect = svg.getBoundingClientRect();
        this.zoom(Math.exp(-e.deltaY * 0.0015), e.clientX - rect.left, e.clientY - rect.top);
      },
      { passive: false },
    );
    svg.addEventListener("keydown", (e) => this.key(e));
    svg.addEventListener("focusin", (e) => {
      const nodeEl = e.target.closest?.(".node");
      if (nodeEl) {
        this.setFocus(nodeEl.dataset.node, false);
        this.reveal(nodeEl.dataset.node);
      }
    });
  }

  key(e) {
    const id = e.target.closest?.(".node")?.dataset.node;
    if (!id) return;
    let next = null;
    switch (e.key) {
      case "Enter":
      case " ":
        e.preventDefault();
        this.activate(id);
        return;
      case "ArrowRight":
      case "ArrowLeft":
      case "ArrowUp":
      case "ArrowDown":
        next = this.nearest(id, e.key);
        break;
      case "Home":
        next = this.order[0];
        break;
      case "End":
        next = this.order[this.order.length - 1];
        break;
      case "+":
      case "=":
        this.zoom(1.25);
        break;
      case "-":
        this.zoom(1 / 1.25);
        break;
      case "0":
        this.fit();
        break;
      default:
        return;
    }
    e.preventDefault();
    if (next) this.setFocus(next, true);
  }

  nearest(id, key) {
    const from = this.byId.get(id);
    const cx = from.x + from.w / 2;
    const cy = from.y + from.h / 2;
    let best = null;
    let bestScore = Infinity;
    for (const n of this.graph.nodes) {
      if (n.id === id) continue;
      const dx = n.x + n.w / 2 - cx;
      const dy = n.y + n.h / 2 - cy;
      let main;
      let side;
      if (key === "ArrowRight") [main, side] = [dx, dy];
      else if (key === "ArrowLeft") [main, side] = [-dx, dy];
      else if (key === "ArrowDown") [main, side] = [dy, dx];
      else [main, side] = [-dy, dx];
      if (main <= 1) continue;
      const score = main + 2.5 * Math.abs(side);
      if (score < bestScore) {
        bestScore = score;
        best = n.id;
      }
    }
    return best;
  }

  setFollow(on) {
    this.follow = on;
    this.followButton.setAttribute("aria-pressed", String(on));
  }

  /** While following, pan so that the node that started last is in view. */
  keepInView(model) {
    if (!this.follow || !model.lastStarted) return;
    const state = model.nodes.get(model.lastStarted);
    if (state && state.status === "running") this.reveal(model.lastStarted);
  }

  setFocus(id, move) {
    if (!this.nodeEls.has(id)) return;
    if (this.focusId && this.focusId !== id) this.nodeEls.get(this.focusId)?.el.setAttribute("tabindex", "-1");
    this.focusId = id;
    const entry = this.nodeEls.get(id);
    entry.el.setAttribute("tabindex", "0");
    if (move) entry.el.focus();
  }

  activate(id) {
    this.setFocus(id, false);
    this.select(id);
    this.onSelect?.(id);
  }

  select(id) {
    if (this.selected) {
      const old = this.nodeEls.get(this.selected);
      old?.el.classList.remove("selected");
      old?.el.setAttribute("aria-pressed", "false");
    }
    this.selected = id;
    const entry = id ? this.nodeEls.get(id) : null;
    if (entry) {
      entry.el.classList.add("selected");
      entry.el.setAttribute("aria-pressed", "true");
    }
  }

  /** Pan so that node `id` is in view (when it is not). */
  reveal(id) {
    const n = this.byId.get(id);
    const rect = this.viewSize();
    if (!n || !rect.width) return;
    const left = n.x * this.scale + this.tx;
    const top = n.y * this.scale + this.ty;
    const right = left + n.w * this.scale;
    const bottom = top + n.h * this.scale;
    if (left >= 0 && top >= 0 && right <= rect.width && bottom <= rect.height) return;
    this.tx = rect.width / 2 - (n.x + n.w / 2) * this.scale;
    this.ty = rect.height / 2 - (n.y + n.h / 2) * this.scale;
    this.apply();
  }

  apply() {
    this.fitted = false;
    this.viewport.setAttribute("transform", `translate(${this.tx.toFixed(1)},${this.ty.toFixed(1)}) scale(${this.scale.toFixed(4)})`);
    this.drawMinimap();
  }

  /** A small overview in the corner while part of the drawing is out of view: the nodes,
   * and the part in view as a frame; a click there centres the view on that point. */
  drawMinimap() {
    const rect = this.viewSize();
    if (!rect.width) return;
    const b = this.graph.bounds;
    const show = !this.wholeInView();
    if (!this.minimap) {
      if (!show) return;
      const W = 160;
      const k = W / Math.max(b.w, 1);
      const H = Math.max(40, Math.min(120, (b.h + 40) * k));
      const kk = Math.min(k, H / Math.max(b.h + 40, 1));
      const frame = s("rect", { class: "minimap-view" });
      const map = s(
        "svg",
        { class: "minimap", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Overview of the workflow" },
        s("rect", { class: "minimap-back", width: W, height: H }),
        ...this.graph.nodes.map((n) => s("rect", { class: "minimap-node", "data-node": n.id, x: (n.x - b.x) * kk, y: (n.y - b.y + 20) * kk, width: Math.max(2, n.w * kk), height: Math.max(2, n.h * kk) })),
        frame,
      );
      map.addEventListener("pointerdown", (e) => {
        const box = map.getBoundingClientRect();
        const gx = (e.clientX - box.left) / kk + b.x;
        const gy = (e.clientY - box.top) / kk + b.y - 20;
        this.setFollow(false);
        this.tx = this.size.width / 2 - gx * this.scale;
        this.ty = this.size.height / 2 - gy * this.scale;
        this.apply();
      });
      this.minimap = { map, frame, k: kk };
      this.el.append(map);
    }
    const { map, frame, k } = this.minimap;
    map.style.display = show ? "" : "none";
    this.sayPart(show);
    if (!show) return;
    const x = ((-this.tx) / this.scale - b.x) * k;
    const y = ((-this.ty) / this.scale - b.y + 20) * k;
    frame.setAttribute("x", x.toFixed(1));
    frame.setAttribute("y", y.toFixed(1));
    frame.setAttribute("width", ((rect.width / this.scale) * k).toFixed(1));
    frame.setAttribute("height", ((rect.height / this.scale) * k).toFixed(1));
  }

  /** Say, beside the minimap, why part of the workflow is out of view and how to see it. */
  sayPart(show) {
    const note = this.partNote;
    const text = !show ? "" : this.tooLarge ? `Too large to show whole with names of ${MIN_LABEL_PX} px or more: drag to pan, or click the overview.` : "Part of the workflow is out of view: Fit shows it whole, the overview takes you there.";
    if (note.textContent !== text) note.textContent = text;
    note.hidden = !show;
  }

  zoom(factor, px, py) {
    const rect = this.svg.getBoundingClientRect();
    const cx = px ?? rect.width / 2;
    const cy = py ?? rect.height / 2;
    const scale = Math.min(3, Math.max(0.05, this.scale * factor));
    const k = scale / this.scale;
    this.tx = cx - (cx - this.tx) * k;
    this.ty = cy - (cy - this.ty) * k;
    this.scale = scale;
    this.apply();
  }

  /** The whole drawing in view, unless that would draw node names under MIN_LABEL_PX:
   * then as large as that allows, centred where it fits and from its start where it does
   * not (pan, or use the minimap, for the rest; the canvas says so). The view stays fitted
   * when the canvas changes size (the inspector opening or closing) until the reader pans
   * or zooms; the selected node is kept in view. */
  fit() {
    const rect = this.svg.getBoundingClientRect();
    const b = this.graph.bounds;
    if (!rect.width || !rect.height) return;
    const side = FIT_PAD;
    const top = FIT_TOP;
    const tall = b.h + 40;
    const whole = Math.min((rect.width - 2 * side) / Math.max(b.w, 1), (rect.height - top - side) / Math.max(tall, 1), 1.25);
    this.tooLarge = whole < MIN_LABEL_PX / TITLE_PX;
    this.scale = Math.max(MIN_LABEL_PX / TITLE_PX, whole);
    const w = b.w * this.scale;
    const hh = tall * this.scale;
    this.tx = w <= rect.width - 2 * side ? (rect.width - w) / 2 - b.x * this.scale : side - b.x * this.scale;
    if (hh <= rect.height - top - side) {
      this.ty = top + (rect.height - top - side - hh) / 2 - (b.y - 20) * this.scale;
    } else {
      const start = this.byId.get(this.focusId);
      const y = start ? start.y + start.h / 2 : b.y + b.h / 2;
      this.ty = Math.min(top - (b.y - 20) * this.scale, rect.height / 2 - y * this.scale);
    }
    this.apply();
    if (this.selected && this.tooLarge) this.reveal(this.selected); // the node being inspected stays in view
    this.fitted = true;
  }

  /** Whether the whole drawing is in view (the minimap is shown when it is not). */
  wholeInView() {
    const rect = this.viewSize();
    const b = this.graph.bounds;
    const left = b.x * this.scale + this.tx;
    const top = (b.y - 20) * this.scale + this.ty;
    return left >= -1 && top >= -1 && left + b.w * this.scale <= rect.width + 1 && top + (b.h + 40) * this.scale <= rect.height + 1;
  }

  /** The first view: Fit. */
  initialView() {
    this.fit();
  }

  /** Redraw what `dirty` (from RunModel.takeDirty) says changed. */
  update(model, dirty) {
    const ids = dirty.all ? this.nodeEls.keys() : dirty.nodes;
    const finished = model.finished();
    for (const id of ids) {
      const entry = this.nodeEls.get(id);
      const state = model.nodes.get(id);
      if (!entry || !state) continue;
      const { el, glyph, visits, visitsText, node, stats } = entry;
      const skipped = finished && state.visits === 0 && state.status === "pending";
      el.classList.toggle("not-executed", skipped);
      const badge = nodeStats(state);
      if (stats.textContent !== badge) stats.textContent = badge;
      if (el.dataset.status !== state.status) {
        el.dataset.status = state.status;
        glyph.textContent = GLYPH[state.status] || "";
      }
      const count = state.visits > 1 ? `×${state.visits}` : "";
      if (visitsText.textContent !== count) {
        visitsText.textContent = count;
        visits.classList.toggle("shown", Boolean(count));
      }
      el.classList.toggle("repaired", state.repairs > 0);
      const parts = [node.label, node.type, skipped ? "not executed" : state.status];
      if (badge) el.setAttribute("aria-description", badge);
      if (state.visits > 1) parts.push(`visited ${state.visits} times`);
      if (state.repairs) parts.push(`${state.repairs} repair${state.repairs > 1 ? "s" : ""}`);
      el.setAttribute("aria-label", parts.join(", "));
    }
    const edgeIndexes = dirty.all ? this.edgeEls.keys() : dirty.edges;
    for (const index of edgeIndexes) {
      const entry = this.edgeEls[index];
      const state = model.edges[index];
      if (!entry || !state) continue;
      const taken = state.count > 0;
      const current = model.lastEdge === index;
      entry.path.classList.toggle("taken", taken);
      entry.path.classList.toggle("current", current);
      entry.path.setAttribute("marker-end", taken ? "url(#arrow-taken)" : "url(#arrow)");
      entry.label?.classList.toggle("taken", taken);
      entry.label?.classList.toggle("current", current);
      const times = state.count > 1 ? `×${state.count}` : "";
      if (entry.count.textContent !== times) entry.count.textContent = times;
    }
  }
}
