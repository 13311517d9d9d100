// The HTTP API of `lattice serve` (docs/server.md), the bearer token when the server has
// one, and a run's events as Server-Sent Events read with fetch (so that the token can
// be sent, which EventSource cannot do).

import { h } from "./dom.js";

const TOKEN_KEY = "lattice.panel.token";

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

let asking = null;

/** Ask for the server's token once (a modal dialog); resolves when one was given. */
function askToken(message) {
  if (asking) return asking;
  asking = new Promise((resolve) => {
    const input = h("input", {
      type: "password",
      id: "token-input",
      autocomplete: "off",
      "aria-describedby": "token-help",
    });
    const dialog = h(
      "dialog",
      { class: "token-dialog", "aria-labelledby": "token-title" },
      h(
        "form",
        { method: "dialog" },
        h("h2", { id: "token-title" }, "This server needs a token"),
        h("p", { id: "token-help" }, message || "Give the token lattice serve was started with (--token or $LATTICE_SERVER_TOKEN). It is kept for this tab only."),
        h("label", { for: "token-input" }, "Token"),
        input,
        h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Use token")),
      ),
    );
    dialog.addEventListener("close", () => {
      try {
        sessionStorage.setItem(TOKEN_KEY, input.value);
      } catch {
        /* private mode: the token lives as long as the page */
      }
      fallbackToken = input.value;
      dialog.remove();
      asking = null;
      resolve();
    });
    document.body.append(dialog);
    dialog.showModal();
    input.focus();
  });
  return asking;
}

let fallbackToken = null;

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  const t = token() || fallbackToken;
  if (t) out.Authorization = `Bearer ${t}`;
  return out;
}

/** A JSON API call relative to the page (the server may sit under a path prefix). Every
 * call says it comes from the panel (`X-Lattice-Client`): the gateway journals the
 * approvals it sends as decided through the panel (a label, not a credential). */
export async function api(path, { method = "GET", body, signal } = {}) {
  for (let tries = 0; ; tries++) {
    const sent = { "X-Lattice-Client": "panel", ...(body === undefined ? {} : { "Content-Type": "application/json" }) };
    const init = { method, headers: headers(sent), signal };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(path, init);
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { error: "invalid_response", message: text.slice(0, 200) };
    }
    if (res.status === 401 && tries < 3) {
      await askToken(tries ? "That token was refused; try again." : undefined);
      continue;
    }
    if (!res.ok) throw new ApiError(res.status, data);
    return data;
  }
}

export function runPath(runId, rest = "") {
  return `v1/runs/${encodeURIComponent(runId)}${rest}`;
}

/**
 * Follow a run's events from after `afterSeq`. `onData(raw)` gets each event's JSON
 * text (parsing is left to the consumer, which does it in batches); `onEnd(status)`
 * once the stream ends. With `onDelta(kind, raw)` the stream asks for the pieces of
 * model answers too (`?deltas=1`): `kind` is `llm_delta` (a piece, not recorded, no id)
 * or `llm_delta_gap` (pieces dropped because this page did not keep up). A dropped
 * connection is followed again from the last id seen. Returns {close()}.
 */
export function follow(runId, afterSeq, { onData, onDelta, onEnd, onState }) {
  let last = afterSeq;
  let closed = false;
  let controller = null;
  let retry = null;

  async function connect() {
    controller = new AbortController();
    onState?.("connecting");
    let ended = false;
    try {
      const deltas = onDelta ? "&deltas=1" : "";
      const res = await fetch(runPath(runId, `/events?last_event_id=${last}${deltas}`), {
        headers: headers({ Accept: "text/event-stream" }),
        signal: controller.signal,
        cache: "no-store",
      });
      if (res.status === 401) {
        await askToken();
        if (!closed) connect();
        return;
      }
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      onState?.("live");
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let id = null;
          let event = "message";
          let data = "";
          for (const line of block.split("\n")) {
            if (!line || line.startsWith(":")) continue;
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            let val = colon < 0 ? "" : line.slice(colon + 1);
            if (val.startsWith(" ")) val = val.slice(1);
            if (field === "id") id = val;
            else if (field === "event") event = val;
            else if (field === "data") data = data ? `${data}\n${val}` : val;
          }
          if (event === "end") {
            ended = true;
            let status = null;
            try {
              status = JSON.parse(data).status;
            } catch {
              /* an end without a status */
            }
            onState?.("ended");
            onEnd?.(status);
            controller.abort();
            return;
          }
          if (event === "llm_delta" || event === "llm_delta_gap") {
            onDelta?.(event, data);
            continue;
          }
          if (data) {
            if (id !== null) last = Number(id);
            onData(data);
          }
        }
      }
    } catch (err) {
      if (closed || ended) return;
    }
    if (!closed && !ended) {
      onState?.("reconnecting");
      retry = setTimeout(connect, 1000);
    }
  }

  connect();
  return {
    close() {
      closed = true;
      clearTimeout(retry);
      controller?.abort();
    },
    get last() {
      return last;
    },
  };
}
