// Re-run from here: the state a step of a stopped run started with, in a JSON editor,
// checked as it is typed (JSON) and by the server when sent (the workflow's inputs
// schema), then a new run from that step (POST /v1/runs/{id}/rerun), linked to this one.

import { api, runPath } from "./api.js";
import { h } from "./dom.js";

/** Open the dialog for visit `visit` of op `op` of run `runId`; `navigate(runId)` opens
 * the new run. */
export async function openRerun({ runId, op, visit, label, navigate }) {
  const error = h("p", { class: "field-error", role: "alert", id: "rerun-error" });
  const editor = h("textarea", { id: "rerun-state", class: "json", rows: 16, spellcheck: "false", "aria-describedby": "rerun-help rerun-error" });
  const start = h("button", { type: "submit", class: "primary", id: "rerun-start" }, "Run from here");
  const dialog = h(
    "dialog",
    { class: "rerun-dialog", "aria-labelledby": "rerun-title" },
    h(
      "form",
      {
        method: "dialog",
        onsubmit: async (e) => {
          e.preventDefault();
          let state;
          try {
            state = JSON.parse(editor.value);
          } catch (err) {
            error.textContent = `Not JSON: ${err.message}`;
            return;
          }
          start.disabled = true;
          try {
            const started = await api(runPath(runId, "/rerun"), { method: "POST", body: { op, visit, state } });
            dialog.close();
            dialog.remove();
            navigate(started.run_id);
          } catch (err) {
            const where = err.body?.diagnostics?.map((d) => `${d.pointer || ""} ${d.message}`).join("; ");
            error.textContent = where || err.message;
            start.disabled = false;
          }
        },
      },
      h("h2", { id: "rerun-title" }, `Re-run from “${label}”${visit > 1 ? ` (visit ${visit})` : ""}`),
      h(
        "p",
        { id: "rerun-help", class: "help" },
        "The state this step started with: edit \"in\" (the workflow's inputs, $in in the document, checked against its inputs schema) and \"vars\" (its variables, $vars), then run. The new run starts at this step and is linked to this one.",
      ),
      editor,
      error,
      h(
        "div",
        { class: "actions" },
        start,
        h("button", { type: "button", onclick: () => { dialog.close(); dialog.remove(); } }, "Cancel"),
      ),
    ),
  );
  editor.addEventListener("input", () => {
    try {
      JSON.parse(editor.value);
      error.textContent = "";
      start.disabled = false;
    } catch (err) {
      error.textContent = `Not JSON: ${err.message}`;
      start.disabled = true;
    }
  });
  document.body.append(dialog);
  dialog.showModal();
  try {
    const point = await api(runPath(runId, `/rerun?op=${encodeURIComponent(op)}&visit=${visit}`));
    editor.value = JSON.stringify(point.state, null, 2);
    editor.focus();
  } catch (err) {
    error.textContent = err.message;
    start.disabled = true;
  }
}
