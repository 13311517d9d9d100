// One run: its header (status, usage, actions), its question or failure report, the
// canvas, the inspector and the state view with its slider over the event sequence.
//
// Events arrive over SSE as JSON text and are applied in batches, at most MAX_BATCH per
// animation frame: parsed, folded into the RunModel, then only the nodes and edges
// they touched are redrawn. The time each batch took is kept in `stats` (the browser
// tests read it).

import { api, follow, runPath } from "./api.js";
import { approvalCard } from "./approvals.js";
import { Canvas } from "./canvas.js";
import { clear, duration, fmtCost, fmtInt, fmtMs, fmtTime, h, preview, statusBadge } from "./dom.js";
import { Inspector, LiveAnswers } from "./inspector.js";
import { RunModel } from "./model.js";
import { StateTimeline } from "./state.js";
import { openRerun } from "./rerun.js";
import { Timeline } from "./timeline.js";
import { tree } from "./tree.js";

export const MAX_BATCH = 1000;
const STATE_RENDER_MS = 250;

export const stats = { batches: [], events: 0 };

/** How a run was started (its meta.started_by, docs/services.md), in words. */
function startedByText(by) {
  if (!by || !by.via) return "—";
  switch (by.via) {
    case "cli":
      return "lattice run";
    case "library":
      return "Python (Runner)";
    case "api":
      return "HTTP API";
    case "mcp":
      return `MCP tool ${by.tool}`;
    case "webhook":
      return `webhook ${by.trigger} (delivery ${by.delivery})`;
    case "schedule":
      return `schedule ${by.schedule} (tick ${by.tick})`;
    default:
      return String(by.via);
  }
}

/** The deployed version a run ran (its meta.workflow_version, docs/services.md), if any. */
function versionFacts(version) {
  if (!version || !version.name) return [];
  const title = `document ${version.digest}`;
  return [h("dt", {}, "version"), h("dd", { id: "run-version", title }, `${version.name}@${version.version}`)];
}

function recordBatch(size, ms, parts) {
  stats.batches.push({ size, ms, ...parts });
  if (stats.batches.length > 500) stats.batches.splice(0, stats.batches.length - 500);
  stats.events += size;
}

export class RunView {
  constructor({ runId, node, navigate }) {
    this.runId = runId;
    this.initialNode = node;
    this.navigate = navigate;
    this.events = [];
    this.queue = [];
    this.queueHead = 0;
    this.requested = [];
    this.scheduled = false;
    this.cursor = 0;
    this.live = true;
    this.run = null;
    this.stream = null;
    this.openPaths = new Set(["$vars"]);
    this.stateTimer = null;
    this.lastStateRender = 0;
    this.el = h("div", { class: "run-page" }, h("p", { class: "muted" }, "Loading the run…"));
  }

  async start() {
    let graph;
    let initial;
    try {
      [this.run, graph, initial] = await Promise.all([
        api(runPath(this.runId)),
        api(runPath(this.runId, "/graph")),
        api(runPath(this.runId, "/state")).catch(() => null),
      ]);
    } catch (err) {
      clear(this.el).append(h("h1", {}, "Run not found"), h("p", { class: "error" }, err.message), h("p", {}, h("a", { href: "#/" }, "All runs")));
      return;
    }
    if (this.dead) return;
    this.graph = graph;
    this.model = new RunModel(graph);
    this.timeline = new StateTimeline(initial);
    this.canvas = new Canvas(graph, {
      onSelect: (id) => this.selectNode(id),
      label: `Workflow ${graph.workflow?.name || graph.workflow?.id || ""}: ${graph.nodes.length} nodes`,
    });
    this.waterfall = new Timeline({
      graph,
      onSelect: (id) => this.selectNode(id),
      onRerun: (op, visit, label) => openRerun({ runId: this.runId, op, visit, label, navigate: (id) => { location.hash = `#/runs/${encodeURIComponent(id)}`; } }),
    });
    this.answers = new LiveAnswers();
    this.inspector = new Inspector({ runId: this.runId, graph, model: this.model, events: this.events, answers: this.answers, onClose: () => this.closeInspector() });
    this.build();
    requestAnimationFrame(() => this.canvas.initialView());
    if (this.initialNode && graph.nodes.some((n) => n.id === this.initialNode)) this.selectNode(this.initialNode);
    this.clock = setInterval(() => this.renderHead(), 1000);
    this.followFrom(0);
  }

  destroy() {
    this.dead = true;
    this.stream?.close();
    clearInterval(this.clock);
    clearTimeout(this.stateTimer);
    clearTimeout(this.timelineTimer);
    this.visibility?.disconnect();
  }

  // -- layout -------------------------------------------------------------------------

  build() {
    this.head = h("header", { class: "run-head" });
    this.notice = h("div", { class: "notice-area", "aria-live": "polite" });
    this.slider = h("input", {
      type: "range",
      id: "state-slider",
      min: "0",
      max: "0",
      value: "0",
      step: "1",
      "aria-describedby": "state-position",
      oninput: () => this.seekSoon(Number(this.slider.value)),
    });
    this.position = h("p", { id: "state-position", class: "position", "aria-live": "off" });
    this.liveButton = h("button", { type: "button", id: "state-live", onclick: () => this.goLive() }, "Live");
    this.stateTree = h("div", { class: "state-tree" });
    const step = (dir) => () => this.stepWrite(dir);
    this.stateView = h(
      "section",
      { class: "state-view", "aria-labelledby": "state-title" },
      h("h2", { id: "state-title" }, "State"),
      h(
        "div",
        { class: "slider-row" },
        h("label", { for: "state-slider" }, "Event"),
        this.slider,
        h("button", { type: "button", id: "state-prev", title: "Previous state write", onclick: step(-1) }, "◀ write"),
        h("button", { type: "button", id: "state-next", title: "Next state write", onclick: step(1) }, "write ▶"),
        this.liveButton,
      ),
      this.position,
      this.stateTree,
    );
    this.conn = h("span", { class: "conn", role: "status" });
    // While no node is selected the inspector has nothing to say: the canvas takes its
    // column (the inspector moves beside the timeline) until a node is selected.
    clear(this.el).append(
      (this.grid = h(
        "div",
        { class: "run-grid wide-canvas" },
        this.head,
        this.notice,
        h("section", { class: "canvas-area", "aria-label": "Workflow canvas" }, this.canvas.el),
        this.inspector.el,
        this.waterfall.el,
        this.stateView,
      )),
    );
    this.renderHead();
    this.renderNotice();
    this.renderState();
    this.waterfall.render(this.model);
    this.visibility = new IntersectionObserver((entries) => {
      this.stateVisible = entries[entries.length - 1].isIntersecting;
      if (this.stateVisible && this.stateStale) this.renderState();
    });
    this.visibility.observe(this.stateTree);
  }

  /** The header: built once; its facts are updated in place and its buttons only
   * when the status changes, so that keyboard focus is not lost. */
  renderHead() {
    if (!this.head || !this.run) return;
    const run = this.run;
    const status = run.status;
    const usage = run.status === "running" || !run.usage ? this.model.usage : run.usage;
    const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
    if (!this.facts) {
      const dd = (id) => h("dd", { id });
      this.facts = {
        badge: h("span"),
        duration: dd("run-duration"),
        calls: dd("run-calls"),
        tokens: dd("run-tokens"),
        cost: dd("run-cost"),
        actions: h("div", { class: "actions" }),
      };
      const f = this.facts;
      clear(this.head).append(
        h("div", { class: "title-row" }, h("h1", {}, this.graph.workflow?.name || run.workflow || "Run"), f.badge, this.conn),
        h(
          "dl",
          { class: "run-facts" },
          h("dt", {}, "run"),
          h("dd", {}, h("code", {}, run.run_id)),
          h("dt", {}, "started"),
          h("dd", {}, fmtTime(run.started_at)),
          h("dt", {}, "by"),
          h("dd", { id: "run-started-by" }, startedByText(run.started_by)),
          ...versionFacts(run.workflow_version),
          h("dt", {}, "duration"),
          f.duration,
          h("dt", {}, "calls"),
          f.calls,
          h("dt", {}, "tokens"),
          f.tokens,
          h("dt", {}, "cost"),
          f.cost,
        ),
        (f.lineage = h("p", { class: "lineage" })),
        f.actions,
      );
    }
    const f = this.facts;
    const set = (el, text) => {
      if (el.textContent !== text) el.textContent = text;
    };
    set(f.duration, fmtMs(duration(run.started_at, status === "running" ? null : run.finished_at)));
    set(f.calls, fmtInt(usage.calls || 0));
    set(f.tokens, fmtInt(tokens));
    set(f.cost, fmtCost(run.cost_usd));
    this.renderLineage(f.lineage, run);
    const stopped = status === "completed" || status === "failed" || status === "halted" || status === "interrupted";
    const rerunnable = stopped && run.rerunnable !== false;
    if (this.waterfall.rerunnable !== rerunnable) {
      this.waterfall.rerunnable = rerunnable;
      this.waterfall.render(this.model);
    }
    const resumable = (status === "failed" || status === "interrupted") && run.failure?.resumable !== false;
    if (f.status !== status || f.resumable !== resumable) {
      if (f.status !== status) f.badge.replaceWith((f.badge = statusBadge(status)));
      f.status = status;
      f.resumable = resumable;
      const focused = f.actions.contains(document.activeElement);
      const actions = [];
      if (status === "running") actions.push(h("button", { type: "button", id: "cancel-run", onclick: () => this.cancel() }, "Cancel"));
      if (resumable) actions.push(h("button", { type: "button", id: "resume-run", class: "primary", onclick: () => this.resume() }, "Resume"));
      const back = h("a", { href: "#/", class: "back" }, "All runs");
      clear(f.actions).append(...actions, back);
      if (focused) (actions[0] || back).focus();
    }
  }

  /** "Re-run of <parent> from <op>" and the runs re-run from this one, as links. */
  renderLineage(el, run) {
    const key = JSON.stringify([run.parent, run.reruns]);
    if (el.dataset.key === key) return;
    el.dataset.key = key;
    const link = (id) => h("a", { href: `#/runs/${encodeURIComponent(id)}` }, h("code", {}, id));
    const parts = [];
    const compare = (a, b) => h("a", { class: "compare-link", href: `#/compare/${encodeURIComponent(a)}/${encodeURIComponent(b)}` }, "compare");
    if (run.parent) parts.push(h("span", { class: "parent" }, "Re-run of ", link(run.parent.run_id), ` from ${run.parent.op}${run.parent.visit > 1 ? ` (visit ${run.parent.visit})` : ""} (`, compare(run.parent.run_id, run.run_id), ")"));
    if (run.reruns && run.reruns.length) {
      parts.push(h("span", { class: "reruns" }, "Re-runs: ", ...run.reruns.flatMap((r, i) => [i ? ", " : "", link(r.run_id), ` from ${r.op} (`, compare(run.run_id, r.run_id), ")"])));
    }
    el.replaceChildren(...parts);
  }

  renderNotice() {
    const box = clear(this.notice);
    const run = this.run;
    if (!run) return;
    if (run.status === "halted" && run.question) {
      box.append(this.questionCard(run.question));
    } else if (run.status === "running" && this.requested.length) {
      // approval_requested events came: the run halts for them in a moment
      box.append(approvalCard({ approvals: this.requested, node: this.requested[0].node, waiting: true }));
    } else if ((run.status === "failed" || run.status === "interrupted") && run.failure) {
      box.append(this.failureCard(run.failure, run.status));
    } else if (run.status === "completed" && run.output !== undefined && run.output !== null) {
      box.append(
        h(
          "details",
          { class: "notice done" },
          h("summary", {}, h("strong", {}, "Completed"), " · output: ", h("span", { class: "muted" }, preview(run.output, 100))),
          tree(run.output, "output", { depth: 2 }),
        ),
      );
    }
  }

  /** Post answers to the halted run, then follow it as it goes on. */
  async sendAnswers(body) {
    await api(runPath(this.runId, "/answers"), { method: "POST", body });
    this.requested = [];
    this.run = { ...this.run, status: "running", question: null };
    this.renderHead();
    this.renderNotice();
    this.followFrom(this.stream ? this.stream.last : this.model.lastSeq);
  }

  /** Send decisions on tool calls; when the run no longer waits (another door answered
   * first), show where it is now, saying why the decisions were not taken. */
  async sendApprovals(decisions) {
    try {
      await this.sendAnswers({ approvals: decisions });
    } catch (err) {
      if (err.status !== 409) throw err;
      this.run = await api(runPath(this.runId));
      this.renderHead();
      this.renderNotice();
      this.notice.prepend(h("p", { class: "field-error stale-approval", role: "alert" }, `Not sent: ${err.message}. The run was answered elsewhere; this is where it is now.`));
      if (this.run.status === "running") this.followFrom(this.stream ? this.stream.last : this.model.lastSeq);
    }
  }

  questionCard(q) {
    if (q.kind === "waiting_for_approval") {
      return approvalCard({ approvals: q.approvals || [], node: q.node_id, send: (decisions) => this.sendApprovals(decisions) });
    }
    const error = h("p", { class: "field-error", role: "alert" });
    const send = async (answer) => {
      clear(error);
      try {
        await this.sendAnswers({ answers: { [q.node_id]: answer } });
      } catch (err) {
        error.textContent = err.message;
      }
    };
    let controls;
    if (q.options && q.options.length && !q.multi_select) {
      controls = h("div", { class: "options" }, q.options.map((opt) => h("button", { type: "button", class: "option", "data-option": opt, onclick: () => send(opt) }, opt)));
    } else if (q.options && q.options.length) {
      const boxes = q.options.map((opt, i) => h("label", { class: "check" }, h("input", { type: "checkbox", value: opt, id: `opt-${i}` }), ` ${opt}`));
      controls = h(
        "form",
        {
          class: "options",
          onsubmit: (e) => {
            e.preventDefault();
            send(boxes.map((b) => b.querySelector("input")).filter((i) => i.checked).map((i) => i.value));
          },
        },
        boxes,
        h("button", { type: "submit", class: "primary" }, "Answer"),
      );
    } else if (q.session) {
      // a branch session: the question is the AI's last reply; "/done" ends the session
      const text = h("textarea", { id: "answer-text", rows: 3 });
      controls = h(
        "form",
        {
          class: "options",
          onsubmit: (e) => {
            e.preventDefault();
            send(text.value);
          },
        },
        h("label", { for: "answer-text" }, "Your message"),
        text,
        h("button", { type: "submit", class: "primary" }, "Send"),
        h("button", { type: "button", class: "end-session", onclick: () => send("/done") }, "End the session"),
      );
    } else {
      const text = h("textarea", { id: "answer-text", rows: 3 });
      controls = h(
        "form",
        {
          class: "options",
          onsubmit: (e) => {
            e.preventDefault();
            send(text.value);
          },
        },
        h("label", { for: "answer-text" }, "Your answer"),
        text,
        h("button", { type: "submit", class: "primary" }, "Answer"),
      );
    }
    return h(
      "section",
      { class: "notice question", "aria-labelledby": "question-title", "data-node": q.node_id },
      h("h2", { id: "question-title" }, q.kind === "missing_information" ? "The model needs information" : q.session ? "Branch session: your turn" : "Waiting for an answer"),
      h("p", { class: "question-text" }, q.question),
      controls,
      error,
      h("p", { class: "muted" }, "Answering resumes the run."),
    );
  }

  failureCard(f, status) {
    const node = f.node_id;
    return h(
      "section",
      { class: `notice failure status-${status}`, "aria-labelledby": "failure-title" },
      h("h2", { id: "failure-title" }, status === "failed" ? "The run failed" : "The run was interrupted"),
      h(
        "dl",
        { class: "meta" },
        h("dt", {}, "category"),
        h("dd", {}, h("code", {}, f.category || "–")),
        h("dt", {}, "summary"),
        h("dd", { class: "summary" }, f.summary || "–"),
        node ? [h("dt", {}, "node"), h("dd", {}, h("button", { type: "button", class: "link", onclick: () => this.selectNode(node, true) }, node))] : null,
        h("dt", {}, "next step"),
        h("dd", {}, f.recovery_action || "–"),
      ),
      f.details ? tree(f.details, "details", { depth: 1 }) : null,
      f.resumable === false
        ? h("p", { class: "muted", id: "no-resume" }, "A resume would fail the same way (a resumed run keeps what it was started with): follow the next step instead.")
        : h("div", { class: "actions" }, h("button", { type: "button", class: "primary", id: "resume-failed", onclick: () => this.resume() }, "Resume")),
      this.actionError = h("p", { class: "field-error", role: "alert" }),
    );
  }

  // -- actions ------------------------------------------------------------------------

  async resume() {
    try {
      await api(runPath(this.runId, "/resume"), { method: "POST", body: {} });
    } catch (err) {
      if (this.actionError) this.actionError.textContent = err.message;
      else alert(err.message);
      return;
    }
    this.run = { ...this.run, status: "running", failure: null };
    this.renderHead();
    this.renderNotice();
    this.followFrom(this.stream ? this.stream.last : this.model.lastSeq);
  }

  async cancel() {
    try {
      await api(runPath(this.runId, "/cancel"), { method: "POST" });
    } catch (err) {
      alert(err.message);
    }
  }

  selectNode(id, focus = false) {
    this.canvas.select(id);
    this.waterfall.select(id);
    this.inspector.show(id);
    this.grid?.classList.toggle("wide-canvas", !id);
    const url = id ? `#/runs/${encodeURIComponent(this.runId)}?node=${encodeURIComponent(id)}` : `#/runs/${encodeURIComponent(this.runId)}`;
    if (location.hash !== url) history.replaceState(null, "", url);
    // the canvas gave the inspector its column back: keep the node in view
    if (id) requestAnimationFrame(() => this.canvas.reveal(id));
    if (focus) this.inspector.el.focus();
  }

  /** Close the inspector: the canvas takes its room again. */
  closeInspector() {
    const id = this.inspector.nodeId;
    this.selectNode(null);
    if (id) this.canvas.setFocus(id, true);
  }

  // -- events -------------------------------------------------------------------------

  followFrom(after) {
    this.stream?.close();
    this.stream = follow(this.runId, after, {
      onData: (raw) => {
        this.queue.push(raw);
        this.schedule();
      },
      onDelta: (kind, raw) => {
        this.queue.push({ kind, raw });
        this.schedule();
      },
      onEnd: (status) => this.ended(status),
      onState: (state) => {
        this.conn.textContent = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", ended: "" }[state] ?? "";
        this.conn.dataset.state = state;
      },
    });
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const run = () => {
      this.scheduled = false;
      if (!this.dead) this.flush();
    };
    if (document.hidden) setTimeout(run, 0);
    else requestAnimationFrame(run);
  }

  /** Apply up to MAX_BATCH queued events: parse, fold, redraw what they touched. The
   * pieces of model answers among them (never recorded) go to the live answers, in
   * their place: a recorded completion ends the answer it completes. */
  flush() {
    const t0 = performance.now();
    const end = Math.min(this.queue.length, this.queueHead + MAX_BATCH);
    const from = this.events.length;
    let requested = false;
    for (let i = this.queueHead; i < end; i++) {
      const item = this.queue[i];
      this.queue[i] = null;
      let ev;
      try {
        ev = JSON.parse(typeof item === "string" ? item : item.raw);
      } catch {
        continue; /* a line that is not JSON: skipped */
      }
      if (typeof item !== "string") {
        if (item.kind === "llm_delta") this.answers.delta(ev);
        else this.answers.gap();
        continue;
      }
      this.events.push(ev);
      this.answers.recorded(ev);
      if (ev.type === "approval_requested") {
        this.requested.push(ev.data || {});
        requested = true;
      } else if (ev.type === "run_resumed" && this.requested.length) {
        this.requested = [];
        requested = true;
      }
    }
    const t1 = performance.now();
    const size = end - this.queueHead;
    this.queueHead = end;
    if (this.queueHead > 20000) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
    const to = this.events.length;
    let t2 = t1;
    if (this.live) {
      this.model.applyRange(this.events, from, to);
      this.cursor = to;
      t2 = performance.now();
      this.canvas.update(this.model, this.model.takeDirty());
      this.canvas.keepInView(this.model);
    }
    const t3 = performance.now();
    this.slider.max = String(to);
    if (this.live) this.slider.value = String(to);
    this.renderPosition();
    this.renderHeadSoon();
    this.inspector.touched(this.events.slice(from, to));
    this.inspector.renderAnswer();
    if (requested && this.run?.status === "running") this.renderNotice();
    this.stateSoon();
    this.timelineSoon();
    const t4 = performance.now();
    recordBatch(size, t4 - t0, { parse: t1 - t0, fold: t2 - t1, draw: t3 - t2, rest: t4 - t3 });
    if (this.queueHead < this.queue.length) this.schedule();
  }

  /** Whether every event received so far has been applied (the browser tests ask). */
  idle() {
    return this.queueHead === this.queue.length;
  }

  renderHeadSoon() {
    const now = performance.now();
    if (now - (this.lastHead || 0) > 200) {
      this.lastHead = now;
      this.renderHead();
    }
  }

  async ended(status) {
    try {
      this.run = await api(runPath(this.runId));
    } catch {
      this.run = { ...this.run, status: status || this.run.status };
    }
    if (this.dead) return;
    this.answers.clear();
    this.inspector.renderAnswer();
    const drain = () => {
      if (this.queueHead < this.queue.length) {
        setTimeout(drain, 50);
        return;
      }
      this.renderHead();
      this.renderNotice();
      this.renderState();
    };
    drain();
  }

  // -- time travel --------------------------------------------------------------------

  seekSoon(count) {
    this.seekTarget = count;
    if (this.seekPending) return;
    this.seekPending = true;
    requestAnimationFrame(() => {
      this.seekPending = false;
      this.seek(this.seekTarget);
    });
  }

  seek(count) {
    const total = this.events.length;
    count = Math.max(0, Math.min(total, count));
    this.live = count === total;
    this.cursor = count;
    this.model.rebuild(this.events, count);
    this.canvas.update(this.model, this.model.takeDirty());
    this.timelineSoon();
    this.slider.value = String(count);
    this.renderPosition();
    this.renderState();
  }

  goLive() {
    this.seek(this.events.length);
  }

  stepWrite(dir) {
    let i = this.cursor + (dir > 0 ? 0 : -2);
    while (i >= 0 && i < this.events.length) {
      if (this.events[i].type === "state_write") {
        this.seek(i + 1);
        return;
      }
      i += dir > 0 ? 1 : -1;
    }
    this.seek(dir > 0 ? this.events.length : 0);
  }

  renderPosition() {
    const total = this.events.length;
    const ev = this.cursor > 0 ? this.events[this.cursor - 1] : null;
    let text = `${this.cursor} of ${total} events`;
    if (ev) {
      text += ` · #${ev.seq} ${ev.type}`;
      if (ev.node_id) text += ` (${ev.node_id})`;
      if (ev.type === "state_write" && ev.data?.path) text += ` ${ev.data.path}`;
    } else {
      text += " · the state the run started from";
    }
    text += this.live ? " · live" : " · in the past";
    this.position.textContent = text;
    this.slider.setAttribute("aria-valuetext", text);
    this.liveButton.disabled = this.live;
    this.stateView.classList.toggle("past", !this.live);
  }

  /** Redraw the timeline after the batch, at most every STATE_RENDER_MS (it follows the
   * slider: it shows the ops up to the event the slider is on). */
  timelineSoon() {
    if (this.timelineTimer) return;
    this.timelineTimer = setTimeout(() => {
      this.timelineTimer = null;
      if (!this.dead && this.model.stepsDirty) this.waterfall.render(this.model);
    }, STATE_RENDER_MS);
  }

  /** Redraw the state tree after the batch, at most every STATE_RENDER_MS, and only
   * while it is on screen (it is drawn when it comes into view). */
  stateSoon() {
    if (this.stateTimer) return;
    const wait = Math.max(0, STATE_RENDER_MS - (performance.now() - this.lastStateRender));
    this.stateTimer = setTimeout(() => {
      this.stateTimer = null;
      if (this.stateVisible === false) {
        this.stateStale = true;
        return;
      }
      this.renderState();
    }, wait);
  }

  renderState() {
    if (!this.timeline || this.dead) return;
    this.lastStateRender = performance.now();
    this.stateStale = false;
    const state = this.timeline.at(this.events, this.cursor);
    const ev = this.cursor > 0 ? this.events[this.cursor - 1] : null;
    const highlight = ev && ev.type === "state_write" ? ev.data?.path : null;
    // replaceChildren keeps the box's scroll position (no layout in between)
    this.stateTree.replaceChildren(
      ...["in", "vars", "tmp", "ctx"].map((root) =>
        tree(state[root], `$${root}`, { open: this.openPaths, depth: root === "vars" || root === "in" ? 1 : 0, highlight, path: `$${root}` }),
      ),
    );
  }
}
