// The run as a waterfall: one row per op that ran (per visit and per branch), placed on
// the run's time axis, with its duration, tokens, the model attempts it made and the
// tools it called. Parallel branches and forEach items show in lanes of their own (the
// branch id beside the row). Clicking a row selects its node; selecting a node marks
// its rows. Rows are redrawn at most a few times a second, and only the last
// MAX_ROWS are drawn.

import { fmtInt, fmtMs, h } from "./dom.js";

export const MAX_ROWS = 400;

/** Ops that only hand over (a JOIN, the END of a forEach item or of an inlined
 * sub-flow inside a branch) take no time of their own and belong to a node whose row is
 * already drawn: no row of their own, or the node would be drawn twice. */
function bookkeeping(step) {
  return step.kind === "JOIN" || (step.kind === "END" && Boolean(step.branch));
}

/** A FORK's row spans its branches: named by them, not by the node it leaves. */
function forkLabel(entry) {
  const n = entry?.definition?.branches?.length;
  return `⑃ ${n ? `${n} parallel branches` : "parallel branches"}`;
}

export class Timeline {
  constructor({ graph, onSelect, onRerun }) {
    this.graph = graph;
    this.onSelect = onSelect;
    this.onRerun = onRerun;
    /** Whether the run has stopped (a step of it can be re-run from). */
    this.rerunnable = false;
    this.labels = new Map(graph.nodes.map((n) => [n.id, n.label]));
    this.selected = null;
    this.body = h("ol", { class: "timeline-rows", "aria-label": "Ops in the order they started" });
    this.note = h("p", { class: "muted timeline-note" });
    this.el = h(
      "section",
      { class: "timeline", "aria-labelledby": "timeline-title" },
      h("h2", { id: "timeline-title" }, "Timeline"),
      this.note,
      this.body,
    );
  }

  /** Redraw from the model's steps (the whole list: it is short next to the events). */
  render(model) {
    const steps = model.steps;
    model.stepsDirty = false;
    const start = model.startedAt ?? 0;
    const end = Math.max(model.endedAt ?? start, start + 1);
    const span = end - start;
    const drawn = [];
    const visits = new Map();
    for (const step of steps) {
      let visit = 0;
      if (!step.branch) {
        visit = (visits.get(step.op) || 0) + 1;
        visits.set(step.op, visit);
      }
      if (!bookkeeping(step)) drawn.push([step, visit]);
    }
    const first = Math.max(0, drawn.length - MAX_ROWS);
    this.note.textContent = drawn.length
      ? `${drawn.length} step${drawn.length === 1 ? "" : "s"} over ${fmtMs(span)}${first ? ` · the last ${MAX_ROWS} shown` : ""}`
      : "No op has started yet.";
    this.body.replaceChildren(...drawn.slice(first).map(([step, visit]) => this.row(step, start, span, visit)));
  }

  row(step, start, span, visit) {
    const left = Number.isNaN(step.start) ? 0 : ((step.start - start) / span) * 100;
    const ms = step.ms ?? (Number.isNaN(step.start) ? 0 : Date.now() - step.start);
    const width = Math.max(0.4, Math.min(100 - left, (ms / span) * 100));
    const status = step.end === null ? "running" : step.error || step.port === "failed" ? "failed" : "completed";
    const facts = [fmtMs(step.ms)];
    if (step.tokens) facts.push(`${fmtInt(step.tokens)} tok`);
    const attempts = step.attempts.length > 1 || step.attempts.some((a) => a.kind !== "initial")
      ? h("span", { class: "attempts" }, step.attempts.map((a) => h("span", { class: `attempt-chip kind-${a.kind}`, title: `${a.kind} (${a.model_class})` }, a.kind)))
      : null;
    const tools = step.tools.length
      ? h("ul", { class: "tool-rows" }, step.tools.map((t) => h("li", { class: t.error ? "tool-error" : "" }, `${t.name} ${t.ms === null ? "…" : fmtMs(t.ms)}`)))
      : null;
    const label = step.kind === "FORK" ? forkLabel(this.graph.ops[step.op]) : this.labels.get(step.node) || step.op;
    const bar = h("div", { class: "timeline-bar" });
    bar.style.left = `${left.toFixed(2)}%`; // set through the CSSOM: the page's CSP refuses style attributes
    bar.style.width = `${width.toFixed(2)}%`;
    const row = h(
      "li",
      {
        class: `timeline-row status-${status}${step.node === this.selected ? " selected" : ""}`,
        "data-node": step.node || "",
        "data-op": step.op,
        "data-ms": String(step.ms ?? ""),
      },
      h(
        "button",
        { type: "button", class: "timeline-name", title: `${label} · ${step.kind}`, onclick: () => step.node && this.onSelect(step.node) },
        step.branch ? h("span", { class: "lane" }, step.branch) : null,
        label,
      ),
      h("div", { class: "timeline-track" }, bar),
      h("span", { class: "timeline-facts" }, facts.join(" · ")),
      attempts,
      tools,
    );
    if (this.rerunnable && visit && step.kind !== "END") {
      row.append(
        h(
          "button",
          { type: "button", class: "rerun link", title: "Edit the state this step started with and run again from it", onclick: () => this.onRerun(step.op, visit, label) },
          "Re-run from here",
        ),
      );
    }
    return row;
  }

  select(id) {
    this.selected = id;
    for (const row of this.body.children) row.classList.toggle("selected", row.dataset.node === id);
  }
}
