// The approval card: an agent's tool calls waiting for a person (docs/agents.md,
// "Approvals"). Each call shows its tool, its arguments and what it would do (an edit's
// diff, a command and its folder, an MCP server) with Allow once / Allow for this run /
// Deny and a reason. The parallel calls of one turn are decided one by one and sent
// together; "all" buttons decide every call at once.

import { clear, h } from "./dom.js";
import { diffText } from "./inspector.js";
import { tree } from "./tree.js";

const CHOICES = [
  ["allow", "Allow once"],
  ["allow_run", "Allow for this run"],
  ["deny", "Deny"],
];

const SAID = { allow: "allowed once", allow_run: "allowed for this run", deny: "denied" };

/** What a call would do: an edit's diff, a command and its folder, an MCP server. */
function preview(item) {
  if (item.diff) return h("div", { class: "approval-diff", "data-path": item.arguments?.file_path || "" }, diffText(item.diff));
  if (item.command !== undefined) {
    return h(
      "div",
      { class: "approval-command" },
      h("pre", { class: "code" }, `$ ${item.command}`),
      item.cwd ? h("p", { class: "muted" }, "in ", h("code", {}, item.cwd)) : null,
    );
  }
  if (item.server) return h("p", { class: "approval-mcp" }, "MCP server ", h("code", {}, item.server), " · tool ", h("code", {}, item.mcp_tool || item.tool));
  return null;
}

/** A short line saying what the call is about (its file, its command). */
function target(item) {
  const args = item.arguments || {};
  return args.file_path || args.path || args.command || args.pattern || args.url || "";
}

/**
 * The card for `approvals` (the halted run's `question.approvals`, or the
 * `approval_requested` events of a run that is halting: `waiting` and no buttons yet).
 * `send(decisions)` posts `{"<id>": "allow" | {"decision": "deny", "reason": …}}` and
 * resolves, or throws an Error whose message the card shows.
 */
export function approvalCard({ approvals, node, waiting = false, send }) {
  const chosen = new Map();
  const rows = [];
  const error = h("p", { class: "field-error", role: "alert" });
  const many = approvals.length > 1;
  const sendButton = h("button", { type: "button", class: "primary send-approvals", disabled: true, onclick: () => submit() }, "Send decisions");
  const count = h("span", { class: "muted approval-count", role: "status" });
  let busy = false;

  function decisions(ids) {
    const out = {};
    for (const row of rows) {
      if (!ids.includes(row.item.id)) continue;
      const choice = chosen.get(row.item.id);
      const reason = row.reason.value.trim();
      out[row.item.id] = choice === "deny" && reason ? { decision: "deny", reason } : choice;
    }
    return out;
  }

  async function submit(ids = [...chosen.keys()]) {
    if (busy || !ids.length) return;
    busy = true;
    clear(error);
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    try {
      await send(decisions(ids));
    } catch (err) {
      error.textContent = err.message;
      busy = false;
      for (const b of card.querySelectorAll("button")) b.disabled = false;
      refresh();
    }
  }

  function choose(id, choice) {
    chosen.set(id, choice);
    if (!many) submit([id]);
    else refresh();
  }

  function refresh() {
    for (const row of rows) {
      const choice = chosen.get(row.item.id);
      row.el.dataset.decision = choice || "";
      for (const b of row.buttons) b.setAttribute("aria-pressed", String(b.dataset.decision === choice));
      row.status.textContent = choice ? `Your decision: ${SAID[choice]}` : "";
    }
    if (many) {
      count.textContent = `${chosen.size} of ${approvals.length} decided`;
      sendButton.disabled = busy || waiting || !chosen.size;
      sendButton.textContent = chosen.size < approvals.length && chosen.size ? `Send ${chosen.size} decision${chosen.size > 1 ? "s" : ""} (the rest wait)` : "Send decisions";
    }
  }

  approvals.forEach((item, index) => {
    const reasonId = `approval-reason-${index}`;
    const reason = h("input", { type: "text", id: reasonId, class: "approval-reason", placeholder: "why not (the model is told)", autocomplete: "off" });
    const buttons = CHOICES.map(([choice, label]) =>
      h(
        "button",
        {
          type: "button",
          class: `decide decide-${choice}${choice === "allow" && !many ? " primary" : ""}`,
          "data-decision": choice,
          "aria-pressed": many ? "false" : null,
          disabled: waiting,
          onclick: () => choose(item.id, choice),
        },
        label,
      ),
    );
    const status = h("p", { class: "approval-status", role: "status" });
    const el = h(
      "li",
      { class: "approval", "data-id": item.id, "data-tool": item.tool },
      h(
        "div",
        { class: "approval-head" },
        h("strong", { class: "approval-tool" }, item.tool),
        " ",
        h("span", { class: "approval-target" }, String(target(item))),
        h("code", { class: "approval-id muted" }, item.id),
      ),
      item.why ? h("p", { class: "approval-why muted" }, `Asks because of ${item.why}`) : null,
      preview(item),
      h("details", { class: "approval-args", open: !item.diff && item.command === undefined }, h("summary", {}, "Arguments"), tree(item.arguments || {}, "arguments", { depth: 2 })),
      h(
        "div",
        { class: "approval-decide" },
        h("label", { for: reasonId }, "Reason for a denial"),
        reason,
        h("div", { class: "options", role: "group", "aria-label": `Decide ${item.tool} ${item.id}` }, buttons),
      ),
      status,
    );
    rows.push({ item, el, reason, buttons, status });
  });

  const all = many
    ? h(
        "div",
        { class: "options approval-all", role: "group", "aria-label": "Decide every call" },
        h("span", {}, `All ${approvals.length} calls:`),
        CHOICES.map(([choice, label]) =>
          h(
            "button",
            {
              type: "button",
              class: `decide-all decide-all-${choice}`,
              "data-decision": choice,
              disabled: waiting,
              onclick: () => {
                for (const row of rows) chosen.set(row.item.id, choice);
                refresh();
                submit();
              },
            },
            `${label}: all`,
          ),
        ),
      )
    : null;

  const title = many ? `${approvals.length} tool calls wait for your approval` : `${approvals[0]?.tool || "A tool call"} waits for your approval`;
  const card = h(
    "section",
    { class: `notice question approvals${waiting ? " waiting" : ""}`, "aria-labelledby": "question-title", "data-node": node || "" },
    h("h2", { id: "question-title" }, title),
    h("p", { class: "question-text" }, `The agent ${node ? `“${node}” ` : ""}asked to run ${many ? "these calls (one turn; each decided on its own)" : "this call"}.`),
    all,
    h("ol", { class: "approval-list" }, rows.map((r) => r.el)),
    many ? h("div", { class: "actions" }, sendButton, " ", count) : null,
    error,
    h("p", { class: "muted approval-note" }, waiting ? "The run is halting to wait for you…" : "Deciding resumes the run: an allowed call runs, a denied one is answered to the model as a refusal it can react to."),
  );
  refresh();
  return card;
}
