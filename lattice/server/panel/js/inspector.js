// The inspector: what one node did. Its ExecIR ops; for every time one of them ran (its
// op record, a line of ops.jsonl), the inputs it read and the output it wrote; for
// LLM ops every attempt (model and class, the messages sent, masked as in the run
// folder, the raw answer, the failure category and violations with their JSON
// pointers, the repair packet, escalations, tokens and latency); for tool ops the
// request and the response; for agent ops the transcript (each turn: what the model
// wrote and the tools it called, each call's arguments and result) and the diff of every
// file it changed. While the node runs, its live events and the answer of its model
// call in flight as it arrives.

import { api, runPath } from "./api.js";
import { clear, fmtInt, fmtMs, h, preview, statusBadge, truncate } from "./dom.js";
import { tree } from "./tree.js";

const LIVE_TYPES = new Set([
  "op_started",
  "llm_request",
  "llm_response",
  "validation_failed",
  "output_salvaged",
  "repair_attempt",
  "retry",
  "escalated",
  "state_write",
  "branch_taken",
  "human_answer",
  "tool_call",
  "tool_result",
  "agent_started",
  "agent_turn",
  "tool_call_started",
  "tool_call_finished",
  "agent_finished",
  "fork_started",
  "fork_joined",
  "for_each_started",
  "for_each_finished",
  "op_finished",
  "run_halted",
  "run_failed",
]);

/** The most of a live answer kept and shown (its end: what is arriving). */
export const MAX_LIVE_CHARS = 4000;

/** Recorded events after which an op's streamed answer is no longer in flight. */
const ANSWER_ENDS = new Set(["llm_response", "retry", "op_finished", "run_failed", "run_halted"]);

/**
 * The answers of the model calls in flight, by op (and branch), built from their
 * `llm_delta` pieces; a recorded completion (or the op's end) drops one.
 */
export class LiveAnswers {
  constructor() {
    this.byOp = new Map();
    this.dirty = false;
  }

  delta(ev) {
    const key = `${ev.op_id}|${ev.branch || ""}`;
    const attempt = ev.data?.attempt;
    let answer = this.byOp.get(key);
    if (!answer || answer.attempt !== attempt) {
      answer = { op: ev.op_id, attempt, text: "", cut: false };
      this.byOp.set(key, answer);
    }
    answer.text += ev.data?.text || "";
    if (answer.text.length > MAX_LIVE_CHARS) {
      answer.text = answer.text.slice(-MAX_LIVE_CHARS);
      answer.cut = true;
    }
    this.dirty = true;
  }

  /** Pieces were dropped (the page did not keep up): every answer has a hole. */
  gap() {
    for (const answer of this.byOp.values()) answer.text += " … ";
    this.dirty = true;
  }

  recorded(ev) {
    if (!ANSWER_ENDS.has(ev.type) || !this.byOp.size) return;
    if (this.byOp.delete(`${ev.op_id}|${ev.branch || ""}`)) this.dirty = true;
  }

  clear() {
    this.byOp.clear();
    this.dirty = true;
  }

  /** The answer arriving for one of `ops`, if any. */
  of(ops) {
    for (const answer of this.byOp.values()) if (ops.includes(answer.op)) return answer;
    return null;
  }
}

function section(title, ...body) {
  return h("section", { class: "i-section" }, h("h4", {}, title), ...body);
}

function pre(text, cls = "") {
  return h("pre", { class: `code ${cls}`, tabindex: "0" }, text ?? "");
}

function meta(pairs) {
  const dl = h("dl", { class: "meta" });
  for (const [key, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    dl.append(h("dt", {}, key), h("dd", {}, value));
  }
  return dl;
}

function violations(list) {
  if (!Array.isArray(list) || !list.length) return null;
  return h(
    "table",
    { class: "violations" },
    h("caption", {}, "Violations"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "JSON pointer"), h("th", { scope: "col" }, "message"))),
    h(
      "tbody",
      {},
      list.map((v) => h("tr", {}, h("td", {}, h("code", {}, v.pointer || "/")), h("td", {}, v.message || ""))),
    ),
  );
}

function messages(list, open) {
  if (!Array.isArray(list) || !list.length) return null;
  return h(
    "details",
    { class: "messages", open },
    h("summary", {}, `Messages sent (${list.length})`),
    list.map((m) =>
      h(
        "div",
        { class: `msg role-${m.role}` },
        h("div", { class: "role" }, m.role),
        pre(typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 2)),
      ),
    ),
  );
}

/** An agent attempt's model calls are its turns: their count and tokens, so that the
 * attempt says what the op's totals say (the attempt's own tokens are its last turn's). */
function agentCalls(attempt, turns) {
  const mine = turns.filter((t) => (t.attempt ?? 1) === (attempt.number ?? 1));
  if (!mine.length) return [];
  const sum = (key) => mine.reduce((n, t) => n + (t[key] || 0), 0);
  const numbers = mine.map((t) => t.turn).filter((n) => n !== undefined);
  const span = numbers.length > 1 ? ` (turns ${numbers[0]}–${numbers[numbers.length - 1]})` : numbers.length ? ` (turn ${numbers[0]})` : "";
  return [
    ["model calls", `${mine.length}${span}`],
    ["tokens", `${fmtInt(sum("input_tokens"))} in / ${fmtInt(sum("output_tokens"))} out, all turns`],
    ["last turn", attempt.input_tokens !== undefined ? `${fmtInt(attempt.input_tokens)} in / ${fmtInt(attempt.output_tokens)} out` : null],
  ];
}

function attemptCard(attempt, previous, turns) {
  const ok = attempt.ok === true || (!attempt.error_type && attempt.completion !== undefined);
  const kind = attempt.kind || "initial";
  const notes = [];
  const calls = turns ? agentCalls(attempt, turns) : [];
  if (kind === "repair") {
    notes.push(h("p", { class: "note" }, "Repair packet: the messages below were sent to repair the previous answer."));
  }
  if (kind === "escalation") {
    const from = previous ? previous.model_class : null;
    notes.push(h("p", { class: "note" }, `Escalated${from ? ` from ${from}` : ""} to ${attempt.model_class}.`));
  }
  if (kind === "retry") notes.push(h("p", { class: "note" }, "Retried after a provider error."));
  return h(
    "article",
    { class: `attempt${ok ? " ok" : " bad"}`, "data-kind": kind, "data-number": attempt.number, "data-calls": calls.length ? calls[0][1].split(" ")[0] : null },
    h(
      "h5",
      {},
      `Attempt ${attempt.number ?? "?"} · ${kind}`,
      " ",
      ok ? h("span", { class: "badge status-completed" }, "valid") : h("span", { class: "badge status-failed" }, attempt.error_type || "failed"),
    ),
    meta([
      ["model", attempt.model],
      ["class", attempt.model_class],
      ...(calls.length ? calls : [["tokens", attempt.input_tokens !== undefined ? `${fmtInt(attempt.input_tokens)} in / ${fmtInt(attempt.output_tokens)} out` : null]]),
      ["latency", attempt.latency_ms !== undefined ? fmtMs(attempt.latency_ms) : null],
      ["finish", attempt.finish_reason],
      ["request", attempt.request_chars !== undefined ? `${fmtInt(attempt.request_chars)} chars` : null],
      ["prompt hash", attempt.prompt_hash ? truncate(attempt.prompt_hash, 14) : null],
    ]),
    notes,
    messages(attempt.messages, kind === "repair"),
    attempt.completion !== undefined ? h("div", { class: "raw" }, h("div", { class: "label" }, "Raw output"), pre(attempt.completion, "completion")) : null,
    attempt.error_type && !ok ? h("p", { class: "failure" }, h("strong", {}, attempt.error_type), attempt.message ? `: ${attempt.message}` : "") : null,
    violations(attempt.violations),
  );
}

function toolCallCard(call) {
  const bad = call.is_error === true;
  const args = call.arguments && typeof call.arguments === "object" ? call.arguments : {};
  const changes = Array.isArray(call.changes) ? call.changes : [];
  return h(
    "article",
    { class: `tool-call${bad ? " bad" : " ok"}`, "data-tool": call.name, "data-call": call.id },
    h(
      "h6",
      {},
      h("code", {}, call.name),
      " ",
      bad ? h("span", { class: "badge status-failed" }, "error") : null,
      call.replayed ? h("span", { class: "badge" }, "from the journal") : null,
      call.duration_ms !== undefined ? h("span", { class: "muted" }, ` ${fmtMs(call.duration_ms)}`) : null,
    ),
    Object.keys(args).length ? tree(args, "arguments", { depth: 1 }) : null,
    h("div", { class: "raw" }, h("div", { class: "label" }, "Result"), pre(call.result, "tool-result")),
    changes.map((c) => diffBlock(c)),
  );
}

function diffBlock(change) {
  return h(
    "div",
    { class: "diff", "data-path": change.path },
    h("div", { class: "label" }, `${change.applied === false ? "Patch (not applied)" : "Changed"}: ${change.path}`),
    change.diff ? diffText(change.diff) : pre("(no difference)", "diff-text"),
  );
}

const DIFF_LINE = [
  [/^(\+\+\+|---) /, "file", ""],
  [/^@@/, "hunk", ""],
  [/^\+/, "add", "added"],
  [/^-/, "del", "removed"],
];

/** A unified diff, a line per row: added lines green, removed red, each keeping its
 * + or − sign (and a screen reader's "added"/"removed"), so colour is never the only
 * sign; a count of both above. */
export function diffText(text) {
  let added = 0;
  let removed = 0;
  const lines = String(text).replace(/\n$/, "").split("\n").map((line) => {
    const [, cls, said] = DIFF_LINE.find(([re]) => re.test(line)) || [null, "ctx", ""];
    if (cls === "add") added += 1;
    if (cls === "del") removed += 1;
    return h("span", { class: `dl dl-${cls}` }, said ? h("span", { class: "sr-only" }, `${said}: `) : null, line || " ");
  });
  return h(
    "div",
    { class: "diff-view" },
    h("div", { class: "diff-count" }, h("span", { class: "n-add" }, `+${added}`), " ", h("span", { class: "n-del" }, `−${removed}`)),
    h("pre", { class: "code diff-text", tabindex: "0" }, lines),
  );
}

function turnCard(turn) {
  const calls = Array.isArray(turn.tool_calls) ? turn.tool_calls : [];
  const final = !calls.length;
  return h(
    "article",
    { class: `turn${final ? " final" : ""}`, "data-turn": turn.turn },
    h(
      "h5",
      {},
      `Turn ${turn.turn ?? "?"}`,
      turn.attempt > 1 ? ` · attempt ${turn.attempt}` : "",
      " ",
      final ? h("span", { class: "badge status-completed" }, "answer") : h("span", { class: "badge" }, `${calls.length} tool call${calls.length > 1 ? "s" : ""}`),
      turn.tools_offered === false ? h("span", { class: "badge status-halted" }, "no tools offered") : null,
    ),
    meta([
      ["model", turn.model],
      ["tokens", turn.input_tokens !== undefined ? `${fmtInt(turn.input_tokens)} in / ${fmtInt(turn.output_tokens)} out` : null],
      ["finish", turn.finish_reason],
    ]),
    turn.text ? pre(turn.text, "completion") : null,
    calls.map((c) => toolCallCard(c)),
  );
}

function transcriptView(record) {
  const transcript = record.transcript;
  if (!transcript || !Array.isArray(transcript.turns)) return [];
  const out = [
    section(
      "Transcript",
      meta([
        ["tools", (transcript.tools || []).join(", ") || "none granted"],
        ["turns", String(transcript.turns.length)],
        ["tool calls", String(transcript.tool_calls ?? 0)],
      ]),
      transcript.turns.map((t) => turnCard(t)),
    ),
  ];
  const changes = Array.isArray(record.changes) ? record.changes : [];
  if (changes.length) out.push(section("Files it changed", changes.map((c) => diffBlock(c))));
  return out;
}

function failureBlock(error) {
  if (!error || typeof error !== "object") return null;
  return section(
    "Failure",
    meta([
      ["category", error.category],
      ["summary", error.summary],
      ["next step", error.recovery_action],
    ]),
    error.details ? tree(error.details, "details", { depth: 1 }) : null,
  );
}

function recordView(record, definition, open) {
  const attempts = Array.isArray(record.attempts) ? record.attempts : [];
  const turns = Array.isArray(record.transcript?.turns) ? record.transcript.turns : null;
  const badges = [];
  if (attempts.length) badges.push(h("span", { class: "badge" }, `${attempts.length} attempt${attempts.length > 1 ? "s" : ""}`));
  if (turns) badges.push(h("span", { class: "badge" }, `${turns.length} model call${turns.length === 1 ? "" : "s"}`));
  if (record.transcript) badges.push(h("span", { class: "badge" }, `${record.transcript.tool_calls ?? 0} tool calls`));
  if (attempts.some((a) => a.kind === "repair")) badges.push(h("span", { class: "badge status-halted" }, "repaired"));
  if (attempts.some((a) => a.kind === "escalation")) badges.push(h("span", { class: "badge status-halted" }, "escalated"));
  if (record.error) badges.push(h("span", { class: "badge status-failed" }, record.error.category || "error"));
  const body = [];
  body.push(
    meta([
      ["op", record.op_id],
      ["kind", record.kind],
      ["branch", record.branch],
      ["port", record.port],
      ["duration", fmtMs(record.duration_ms)],
      ["writes", definition?.writes],
    ]),
  );
  body.push(section("Inputs it read", record.inputs && Object.keys(record.inputs).length ? tree(record.inputs, "inputs", { depth: 1 }) : h("p", { class: "muted" }, "none")));
  if (record.kind === "TOOL_CALL") {
    body.push(section("Request", definition?.call ? tree(definition.call, "call", { depth: 2 }) : h("p", { class: "muted" }, "–")));
    body.push(section("Response", record.output === undefined || record.output === null ? h("p", { class: "muted" }, record.error ? "none (the call failed)" : "none") : tree(record.output, "response", { depth: 2 })));
  }
  if (record.kind === "AGENT") body.push(...transcriptView(record));
  if (attempts.length) {
    body.push(section("Model attempts", attempts.map((a, i) => attemptCard(a, attempts[i - 1], turns))));
  }
  if (record.kind !== "TOOL_CALL") {
    body.push(section("Output it wrote", record.output === undefined ? h("p", { class: "muted" }, "none") : tree(record.output, "output", { depth: 2 })));
  }
  const failure = failureBlock(record.error);
  if (failure) body.push(failure);
  return h(
    "details",
    { class: "record", open, "data-op": record.op_id, "data-label": record.label, "data-keep": `record-${record.label}` },
    h("summary", {}, h("span", { class: "label-seq" }, `#${record.label}`), " ", h("strong", {}, record.op_id), ` · ${record.kind}`, record.port ? ` → ${record.port}` : "", " ", badges),
    h("div", { class: "record-body" }, body),
  );
}

export class Inspector {
  constructor({ runId, graph, model, events, answers, onClose }) {
    this.runId = runId;
    this.onClose = onClose;
    this.answers = answers;
    this.graph = graph;
    this.model = model;
    this.events = events;
    this.nodeId = null;
    this.timer = null;
    this.fetching = null;
    this.records = null;
    this.el = h(
      "aside",
      { class: "inspector", "aria-labelledby": "inspector-title", tabindex: "-1" },
      h("h2", { id: "inspector-title" }, "Inspector"),
      h("p", { class: "muted" }, "Select a node on the canvas (click it, or Tab to the canvas, move with the arrow keys and press Enter)."),
    );
  }

  show(nodeId) {
    this.nodeId = nodeId;
    this.records = null;
    this.draw();
    this.el.scrollTop = 0;
    this.load();
  }

  async load() {
    const nodeId = this.nodeId;
    if (!nodeId) return;
    try {
      const data = await api(runPath(this.runId, `/ops?node=${encodeURIComponent(nodeId)}&limit=50`));
      if (this.nodeId !== nodeId) return;
      this.records = data;
    } catch (err) {
      if (this.nodeId !== nodeId) return;
      this.records = { error: err.message, records: [] };
    }
    this.render();
  }

  /** New events were applied: reload the node's records when one of its ops ended. */
  touched(events) {
    if (!this.nodeId) return;
    let reload = false;
    let live = false;
    for (const ev of events) {
      if (!ev.op_id || this.graph.ops[ev.op_id]?.node !== this.nodeId) continue;
      live = true;
      if (ev.type === "op_finished" || ev.type === "run_halted" || ev.type === "run_failed") reload = true;
    }
    if (reload) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.load(), 150);
    } else if (live) {
      this.renderLive();
    }
  }

  liveEvents() {
    const state = this.model.nodes.get(this.nodeId);
    if (!state || state.status !== "running") return [];
    const indexes = state.events;
    let start = indexes.length - 1;
    while (start > 0 && this.events[indexes[start]].type !== "op_started") start--;
    return indexes.slice(Math.max(start, 0)).map((i) => this.events[i]).filter((ev) => LIVE_TYPES.has(ev.type));
  }

  renderLive() {
    const box = this.el.querySelector(".live");
    if (!box) return;
    clear(box);
    const live = this.liveEvents();
    if (!live.length) return;
    box.append(
      h("h3", {}, "Running now"),
      h(
        "ol",
        { class: "live-events" },
        live.slice(-30).map((ev) => h("li", {}, h("code", {}, ev.type), " ", h("span", { class: "muted" }, preview(ev.data, 90)))),
      ),
    );
  }

  /** The answer of the node's model call in flight, as it arrives (only its text node
   * changes: called once per batch of events, i.e. at most once per frame). */
  renderAnswer() {
    if (!this.answers?.dirty) return;
    this.answers.dirty = false;
    const box = this.el.querySelector(".live-answer");
    if (!box) return;
    const node = this.graph.nodes.find((n) => n.id === this.nodeId);
    const answer = node ? this.answers.of(node.ops) : null;
    if (!answer) {
      if (box.firstChild) clear(box);
      return;
    }
    let text = box.querySelector("pre");
    if (!text) {
      text = pre("", "answer-text");
      box.append(h("h3", {}, "Answer so far"), text);
    }
    box.dataset.op = answer.op;
    box.dataset.attempt = answer.attempt ?? "";
    text.textContent = answer.cut ? `…${answer.text}` : answer.text;
  }

  render() {
    // What the reader opened or closed, and where they were, survive a redraw.
    const kept = new Map();
    for (const d of this.el.querySelectorAll("details[data-keep]")) kept.set(d.dataset.keep, d.open);
    const focusKeep = document.activeElement?.closest?.("details[data-keep]")?.dataset.keep;
    this.draw();
    for (const d of this.el.querySelectorAll("details[data-keep]")) {
      if (kept.has(d.dataset.keep)) d.open = kept.get(d.dataset.keep);
    }
    if (focusKeep) this.el.querySelector(`details[data-keep="${CSS.escape(focusKeep)}"] > summary`)?.focus();
  }

  draw() {
    const el = clear(this.el);
    const node = this.graph.nodes.find((n) => n.id === this.nodeId);
    if (!node) {
      el.append(h("h2", { id: "inspector-title" }, "Inspector"), h("p", { class: "muted" }, "Select a node on the canvas."));
      return;
    }
    const state = this.model.nodes.get(node.id);
    el.append(
      ...(this.onClose ? [h("button", { type: "button", class: "inspector-close", title: "Close the inspector (the canvas takes its room)", "aria-label": "Close the inspector", onclick: () => this.onClose() }, "×")] : []),
      h("h2", { id: "inspector-title" }, node.label),
      h(
        "p",
        { class: "node-meta" },
        h("code", {}, node.id),
        ` · ${node.type} · `,
        statusBadge(state?.status),
        state && state.visits > 1 ? ` · visited ${state.visits} times` : "",
        state && state.calls ? ` · ${state.calls} model call${state.calls > 1 ? "s" : ""}, ${fmtInt(state.tokens)} tokens` : "",
      ),
    );
    const ops = node.ops.map((id) => [id, this.graph.ops[id]]);
    el.append(
      h(
        "details",
        { class: "ops-def", "data-keep": "ops-def" },
        h("summary", {}, `ExecIR ops (${ops.length})`),
        h(
          "ul",
          {},
          ops.map(([id, entry]) => h("li", {}, h("code", {}, id), ` ${entry.kind}`, entry.definition ? tree(entry.definition, id, { depth: 0 }) : null)),
        ),
      ),
    );
    el.append(h("div", { class: "live", "aria-live": "polite" }));
    this.renderLive();
    el.append(h("div", { class: "live-answer", "aria-live": "off" }));
    if (this.answers) this.answers.dirty = true;
    this.renderAnswer();
    const box = h("div", { class: "records" });
    el.append(box);
    if (this.records === null) {
      box.append(h("p", { class: "muted" }, "Loading its op records…"));
      return;
    }
    if (this.records.error) box.append(h("p", { class: "error" }, this.records.error));
    const records = this.records.records || [];
    if (!records.length) {
      box.append(h("p", { class: "muted" }, state?.status === "pending" ? "It has not run yet." : "No op record yet (written when the op ends)."));
      return;
    }
    box.append(h("h3", {}, this.records.total > records.length ? `Its ops, the last ${records.length} of ${this.records.total}` : `Its ops (${records.length})`));
    records.forEach((record, i) => {
      box.append(recordView(record, this.graph.ops[record.op_id]?.definition, i === records.length - 1 || records.length <= 3));
    });
  }
}
