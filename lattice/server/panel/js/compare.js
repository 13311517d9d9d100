// Two runs side by side (`#/compare/<a>/<b>`, the panel's `lattice runs diff`): run A's
// canvas with the nodes whose outputs or model calls differ marked, and the nodes only
// one of the runs went through; the statuses, usage and outputs of both; each differing
// node's changes (JSON pointers, A's value → B's).

import { api, runPath } from "./api.js";
import { Canvas } from "./canvas.js";
import { clear, fmtInt, h, statusBadge } from "./dom.js";
import { tree } from "./tree.js";

function nodesOnPath(path, graph) {
  const out = new Set();
  for (const step of path) {
    const op = step.split(" → ")[0];
    const node = graph.ops[op]?.node;
    if (node) out.add(node);
  }
  return out;
}

/** One change as `lattice runs diff` words it (`{"path", "old"?, "new"?}`), marked
 * added (+), removed (−) or changed (~): a sign and a word, the colour only a third. */
function change(c) {
  const pointer = c.path || "/";
  const [kind, sign, text] = !("old" in c)
    ? ["added", "+", `added ${JSON.stringify(c.new)}`]
    : !("new" in c)
      ? ["removed", "−", `removed ${JSON.stringify(c.old)}`]
      : ["changed", "~", `${JSON.stringify(c.old)} → ${JSON.stringify(c.new)}`];
  return h("li", { class: `code change change-${kind}`, "data-change": kind }, h("span", { class: "sign", "aria-hidden": "true" }, sign), h("code", {}, pointer), `: ${text}`);
}

export class CompareView {
  constructor({ a, b }) {
    this.a = a;
    this.b = b;
    this.el = h("div", { class: "compare-page" }, h("p", { class: "muted" }, "Comparing the runs…"));
  }

  async start() {
    let diff;
    let graph;
    try {
      [diff, graph] = await Promise.all([api(runPath(this.a, `/compare/${encodeURIComponent(this.b)}`)), api(runPath(this.a, "/graph"))]);
    } catch (err) {
      clear(this.el).append(h("h1", {}, "Cannot compare these runs"), h("p", { class: "error" }, err.message), h("p", {}, h("a", { href: "#/" }, "All runs")));
      return;
    }
    if (this.dead) return;
    this.diff = diff;
    const canvas = new Canvas(graph, { onSelect: (id) => this.focus(id), label: "Run A's workflow, differences marked" });
    const onA = nodesOnPath(diff.path.a, graph);
    const onB = nodesOnPath(diff.path.b, graph);
    const inherited = new Set(diff.rerun ? diff.rerun.nodes : []);
    for (const [id, entry] of canvas.nodeEls) {
      const differs = Object.hasOwn(diff.nodes, id);
      entry.el.classList.toggle("inherited", inherited.has(id));
      entry.el.classList.toggle("differs", differs);
      entry.el.classList.toggle("only-a", onA.has(id) && !onB.has(id));
      entry.el.classList.toggle("only-b", onB.has(id) && !onA.has(id));
      entry.el.dataset.status = onA.has(id) || onB.has(id) || inherited.has(id) ? "completed" : "pending";
    }
    this.canvas = canvas;
    const link = (id) => h("a", { href: `#/runs/${encodeURIComponent(id)}` }, h("code", {}, id));
    const side = (label, id, status, usage, output) =>
      h(
        "section",
        { class: `compare-side side-${label.toLowerCase()}`, "aria-label": `Run ${label}` },
        h("h2", {}, `${label} `, link(id), " ", statusBadge(status)),
        h("p", { class: "muted" }, `${fmtInt(usage.calls || 0)} calls · ${fmtInt((usage.input_tokens || 0) + (usage.output_tokens || 0))} tokens`),
        output === null || output === undefined ? h("p", { class: "muted" }, "no output") : tree(output, "output", { depth: 2 }),
      );
    this.details = h("ul", { class: "compare-nodes" });
    for (const [node, info] of Object.entries(diff.nodes)) {
      const label = graph.nodes.find((n) => n.id === node)?.label || node;
      const lines = [];
      if (info.calls) lines.push(h("li", { class: "code change change-changed", "data-change": "changed" }, h("span", { class: "sign", "aria-hidden": "true" }, "~"), `model calls ${info.calls.a.calls} → ${info.calls.b.calls} (repairs ${info.calls.a.repairs} → ${info.calls.b.repairs}, escalations ${info.calls.a.escalations} → ${info.calls.b.escalations})`));
      for (const c of (info.outputs || []).slice(0, 20)) lines.push(change(c));
      this.details.append(h("li", { "data-node": node }, h("button", { type: "button", class: "link", onclick: () => this.focus(node) }, label), h("ul", {}, lines)));
    }
    const pathNote = diff.path.same
      ? `Both runs took the same path (${diff.path.a.length} ops).`
      : `The paths part at step ${diff.path.diverges_at}: A ${diff.path.a.slice(diff.path.diverges_at - 1, diff.path.diverges_at + 2).join(" · ")} — B ${diff.path.b.slice(diff.path.diverges_at - 1, diff.path.diverges_at + 2).join(" · ")}`;
    const rerun = diff.rerun;
    const rerunNote = rerun
      ? h(
          "p",
          { id: "compare-rerun" },
          `${rerun.run.toUpperCase()} is a re-run of ${rerun.run === "b" ? "A" : "B"} from ${graph.ops[rerun.op]?.name || rerun.op}${rerun.visit > 1 ? ` (visit ${rerun.visit})` : ""}: `,
          `the ${rerun.steps.length} step${rerun.steps.length === 1 ? "" : "s"} before it ${rerun.steps.length === 1 ? "is" : "are"} inherited from ${rerun.run === "b" ? "A" : "B"}, not compared; what follows is.`,
        )
      : null;
    const keys = [h("span", { class: "key differs" }, "output or calls differ"), h("span", { class: "key only-a" }, "only A went here"), h("span", { class: "key only-b" }, "only B went here")];
    if (rerun) keys.push(h("span", { class: "key inherited" }, "inherited by the re-run"));
    clear(this.el).append(
      h("header", { class: "compare-head" }, h("h1", {}, "Compare runs"), h("p", { class: diff.changed ? "" : "muted", id: "compare-summary" }, diff.changed ? `${Object.keys(diff.nodes).length} node(s) differ. ${pathNote}` : `No difference. ${pathNote}`), rerunNote || ""),
      h("section", { class: "canvas-area compare-canvas", "aria-label": "Workflow canvas" }, canvas.el),
      h("p", { class: "legend" }, keys),
      h("div", { class: "compare-sides" }, side("A", this.a, diff.status.a, diff.usage.a, diff.output.a), side("B", this.b, diff.status.b, diff.usage.b, diff.output.b)),
      h("section", { class: "compare-detail" }, h("h2", {}, "What differs"), Object.keys(diff.nodes).length ? this.details : h("p", { class: "muted" }, "No node's outputs or model calls differ.")),
    );
    requestAnimationFrame(() => canvas.initialView());
  }

  focus(id) {
    this.canvas.select(id);
    for (const li of this.details.children) li.classList.toggle("selected", li.dataset.node === id);
    this.details.querySelector(`li[data-node="${CSS.escape(id)}"]`)?.scrollIntoView({ block: "nearest" });
  }

  destroy() {
    this.dead = true;
  }
}
