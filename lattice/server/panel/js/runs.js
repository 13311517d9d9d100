// The home page: the runs list (status, workflow, started, duration, calls, tokens,
// cost; searched by words, filtered by status, "waiting on me" first among them, a page
// of PAGE_SIZE at a time, refreshed every REFRESH_MS) and the new-run form, generated
// from the chosen workflow's inputs schema, with a mock script to choose for offline demos.

import { ApiError, api } from "./api.js";
import { append, clear, duration, fmtCost, fmtInt, fmtMs, fmtTime, h, statusBadge } from "./dom.js";
import { inputsForm } from "./form.js";

/** The status filter: "waiting on me" is a run halted on a question only a person answers. */
const FILTERS = [
  ["", "all"],
  ["halted", "waiting on me"],
  ["running", "running"],
  ["completed", "completed"],
  ["failed", "failed"],
  ["interrupted", "interrupted"],
];
const REFRESH_MS = 2000;
export const PAGE_SIZE = 50;
const SEARCH_DELAY_MS = 250;

export class HomeView {
  constructor({ navigate }) {
    this.navigate = navigate;
    this.filter = sessionStorage.getItem("lattice.panel.filter") || "";
    this.search = sessionStorage.getItem("lattice.panel.search") || "";
    /** The `before` cursor of each page up to the one shown (the first is null). */
    this.cursors = [null];
    this.next = null;
    this.timer = null;
    this.inputs = null;
    this.formInfo = null;
    this.el = h("div", { class: "home" });
    this.status = h("p", { class: "muted", role: "status", "aria-live": "polite" });
    this.tbody = h("tbody");
    this.formBox = h("div", { class: "form-box" });
    this.build();
  }

  build() {
    const filter = h(
      "select",
      {
        id: "status-filter",
        onchange: (e) => {
          this.filter = e.target.value;
          sessionStorage.setItem("lattice.panel.filter", this.filter);
          this.firstPage();
        },
      },
      FILTERS.map(([value, label]) => h("option", { value, selected: value === this.filter }, label)),
    );
    let typing = null;
    const search = h("input", {
      type: "search",
      id: "runs-search",
      value: this.search,
      placeholder: "id, workflow, status, date (2026-12-02)",
      "aria-describedby": "runs-search-help",
      oninput: (e) => {
        clearTimeout(typing);
        typing = setTimeout(() => {
          this.search = e.target.value.trim();
          sessionStorage.setItem("lattice.panel.search", this.search);
          this.firstPage();
        }, SEARCH_DELAY_MS);
      },
    });
    this.newer = h("button", { type: "button", id: "runs-newer", onclick: () => this.turn(-1) }, "◀ Newer");
    this.older = h("button", { type: "button", id: "runs-older", onclick: () => this.turn(1) }, "Older ▶");
    this.pageNote = h("span", { class: "muted", id: "runs-page" });
    this.el.append(
      h(
        "section",
        { class: "runs-list", "aria-labelledby": "runs-title" },
        h(
          "div",
          { class: "section-head" },
          h("h1", { id: "runs-title" }, "Runs"),
          h(
            "div",
            { class: "filters", role: "search" },
            h("div", { class: "filter" }, h("label", { for: "runs-search" }, "Search"), search),
            h("div", { class: "filter" }, h("label", { for: "status-filter" }, "Status"), filter),
          ),
        ),
        h("p", { id: "runs-search-help", class: "sr-only" }, "Every word must be found in the run's id, workflow, status or start time (UTC, as 2026-12-02T13)."),
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "runs" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                ["Status", "Workflow", "Started", "Duration", "Calls", "Tokens", "Cost"].map((t) => h("th", { scope: "col" }, t)),
              ),
            ),
            this.tbody,
          ),
        ),
        this.status,
        h("nav", { class: "pager", "aria-label": "Pages of runs" }, this.newer, this.pageNote, this.older),
      ),
      h("section", { class: "new-run", "aria-labelledby": "new-run-title" }, h("h2", { id: "new-run-title" }, "New run"), this.formBox),
    );
    this.loadWorkflows();
  }

  start() {
    this.refresh();
  }

  destroy() {
    clearTimeout(this.timer);
    this.timer = null;
    this.dead = true;
  }

  /** Back to the newest runs (the search or the filter changed). */
  firstPage() {
    this.cursors = [null];
    this.refresh();
  }

  /** To the next older (+1) or newer (-1) page. */
  turn(direction) {
    if (direction > 0 && this.next) this.cursors.push(this.next);
    else if (direction < 0 && this.cursors.length > 1) this.cursors.pop();
    else return;
    this.refresh();
  }

  async refresh() {
    clearTimeout(this.timer);
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (this.filter) params.set("status", this.filter);
    if (this.search) params.set("q", this.search);
    const before = this.cursors[this.cursors.length - 1];
    if (before) params.set("before", before);
    const asked = params.toString();
    try {
      const data = await api(`v1/runs?${asked}`);
      if (this.dead) return;
      this.next = data.next || null;
      this.renderRuns(data.runs || []);
      const page = this.cursors.length;
      const count = (data.runs || []).length;
      const first = (page - 1) * PAGE_SIZE + 1;
      this.pageNote.textContent = count ? `${first}–${first + count - 1}` : "";
      this.newer.disabled = page === 1;
      this.older.disabled = !this.next;
      const label = FILTERS.find(([value]) => value === this.filter)?.[1];
      this.status.textContent = count
        ? ""
        : this.search || this.filter
          ? `No run found (${[this.filter ? `status: ${label}` : "", this.search ? `search: “${this.search}”` : ""].filter(Boolean).join(", ")}).`
          : "No runs yet: start one below.";
    } catch (err) {
      if (this.dead) return;
      this.status.textContent = `Cannot list runs: ${err.message}`;
    }
    if (!this.dead) this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
  }

  renderRuns(runs) {
    const signature = JSON.stringify(runs.map((r) => [r.run_id, r.status, r.calls, r.tokens, r.cost_usd, r.finished_at]));
    const running = runs.some((r) => r.status === "running");
    if (signature === this.signature && !running) return;
    this.signature = signature;
    const focused = this.tbody.contains(document.activeElement) ? document.activeElement.closest("tr")?.dataset.run : null;
    const rows = runs.map((run) => {
      const href = `#/runs/${encodeURIComponent(run.run_id)}`;
      const name = run.workflow_name || run.workflow || "(unnamed)";
      return h(
        "tr",
        { "data-run": run.run_id, "data-status": run.status },
        h("td", {}, statusBadge(run.status)),
        h("td", {}, h("a", { href }, name), h("div", { class: "run-id" }, run.run_id)),
        h("td", {}, fmtTime(run.started_at)),
        h("td", { class: "num" }, fmtMs(duration(run.started_at, run.status === "running" ? null : run.finished_at))),
        h("td", { class: "num" }, fmtInt(run.calls)),
        h("td", { class: "num" }, fmtInt(run.tokens)),
        h("td", { class: "num" }, fmtCost(run.cost_usd)),
      );
    });
    clear(this.tbody).append(...rows);
    if (focused) this.tbody.querySelector(`tr[data-run="${CSS.escape(focused)}"] a`)?.focus();
  }

  async loadWorkflows() {
    const box = clear(this.formBox);
    let list;
    try {
      list = (await api("v1/workflows")).workflows || [];
    } catch (err) {
      box.append(h("p", { class: "error" }, `Cannot list workflows: ${err.message}`));
      return;
    }
    if (!list.length) {
      box.append(h("p", { class: "muted" }, "No workflows to start: run lattice serve --workflows DIR to start runs of the documents in DIR from here."));
      return;
    }
    const select = h(
      "select",
      { id: "workflow-select", name: "workflow", onchange: () => this.loadForm(select.value) },
      list.map((w) => h("option", { value: w.name, disabled: w.valid === false }, `${w.name}${w.valid === false ? " (has errors)" : ""}`)),
    );
    const first = list.find((w) => w.valid !== false);
    if (first) select.value = first.name;
    this.fields = h("div", { class: "form-fields" });
    this.formError = h("div", { class: "form-error", role: "alert" });
    const form = h(
      "form",
      { id: "new-run-form", onsubmit: (e) => this.submit(e), novalidate: true },
      h("div", { class: "field" }, h("label", { for: "workflow-select" }, "Workflow"), select),
      this.fields,
      this.formError,
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "start-run" }, "Start run")),
    );
    box.append(form);
    this.select = select;
    if (first) await this.loadForm(first.name);
  }

  async loadForm(name) {
    const fields = clear(this.fields);
    clear(this.formError);
    fields.append(h("p", { class: "muted" }, "Loading…"));
    let info;
    try {
      info = await api(`v1/forms/${name.split("/").map(encodeURIComponent).join("/")}`);
    } catch (err) {
      clear(fields).append(h("p", { class: "error" }, err.message));
      return;
    }
    if (this.select.value !== name) return;
    this.formInfo = info;
    this.inputs = inputsForm(info.inputs_schema, info.example_inputs);
    const mock = h(
      "select",
      { id: "mock-select", name: "mock" },
      h("option", { value: "" }, "none: the server's provider"),
      (info.mocks || []).map((m) => h("option", { value: m, selected: m === info.default_mock }, m)),
    );
    const latency = h("input", { id: "mock-latency", type: "number", min: "0", max: "60000", step: "50", value: "0", "aria-describedby": "mock-latency-help" });
    const answers = h("textarea", { id: "answers-input", rows: 2, class: "json", spellcheck: "false", placeholder: '{"<nodeId>": "<option>"}' }, info.example_answers ? JSON.stringify(info.example_answers) : "");
    append(clear(fields), [
      info.description ? h("p", { class: "help wf-desc" }, info.description) : null,
      (info.notes || []).length
        ? h("details", { class: "wf-notes" }, h("summary", {}, `Read, not acted on (${info.notes.length})`), h("ul", {}, info.notes.map((n) => h("li", {}, n))))
        : null,
      h("fieldset", {}, h("legend", {}, "Inputs"), this.inputs.el),
      h(
        "fieldset",
        { class: "provider" },
        h("legend", {}, "Model"),
        h("div", { class: "field" }, h("label", { for: "mock-select" }, "Mock script"), mock, h("p", { class: "help" }, "Scripted answers (docs/mocks.md): runs offline, no model called.")),
        h("div", { class: "field" }, h("label", { for: "mock-latency" }, "Pause before each mock answer (ms)"), latency, h("p", { class: "help", id: "mock-latency-help" }, "Slows a mock run down so you can watch it.")),
        h("div", { class: "field" }, h("label", { for: "answers-input" }, "Answers in advance (JSON, optional)"), answers),
      ),
    ]);
    this.mock = mock;
    this.latency = latency;
    this.answers = answers;
  }

  async submit(e) {
    e.preventDefault();
    clear(this.formError);
    if (!this.inputs) return;
    const inputs = this.inputs.read();
    if (inputs === null) return;
    const body = { workflow: this.select.value, inputs };
    if (this.mock.value) body.mock = this.mock.value;
    const latency = Number(this.latency.value);
    if (latency > 0) body.mock_latency_ms = latency;
    if (this.answers.value.trim()) {
      try {
        body.answers = JSON.parse(this.answers.value);
      } catch (err) {
        this.formError.append(h("p", {}, `Answers: not valid JSON (${err.message})`));
        return;
      }
    }
    const button = this.el.querySelector("#start-run");
    button.disabled = true;
    try {
      const started = await api("v1/runs", { method: "POST", body });
      this.navigate(`#/runs/${encodeURIComponent(started.run_id)}`);
    } catch (err) {
      const rest = err instanceof ApiError ? this.inputs.showDiagnostics(err.body.diagnostics) : [];
      append(this.formError, [
        h("p", {}, err.message),
        rest.length ? h("ul", {}, rest.map((d) => h("li", {}, d.pointer ? h("code", {}, d.pointer) : null, " ", d.message))) : null,
      ]);
    } finally {
      button.disabled = false;
    }
  }
}
