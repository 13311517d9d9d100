// What the canvas shows of a run, folded from its events (docs/runs.md#eventsjsonl):
// each node's status and visit count, the edges the run took, the run's usage. Events
// are applied one at a time and mark what they changed, so that a batch of events
// costs one pass over them and one redraw of the nodes and edges they touched.

const TERMINAL = new Set(["completed", "failed", "halted", "interrupted"]);

function parentTrack(track) {
  // "0003.1" -> "" ; "0003.1.0002.2" -> "0003.1"
  const parts = track.split(".");
  return parts.length > 2 ? parts.slice(0, -2).join(".") : "";
}

export class RunModel {
  constructor(graph) {
    this.graph = graph;
    this.nodeIds = graph.nodes.map((n) => n.id);
    this.reset();
  }

  reset() {
    this.nodes = new Map();
    for (const id of this.nodeIds) {
      this.nodes.set(id, {
        status: "pending",
        visits: 0,
        running: new Set(),
        calls: 0,
        repairs: 0,
        escalations: 0,
        tokens: 0,
        ms: 0,
        items: 0,
        lastPort: null,
        events: [],
      });
    }
    // The timeline: one step per op execution (op id and branch), in start order.
    this.steps = [];
    this.openSteps = new Map();
    this.startedAt = null;
    this.endedAt = null;
    this.edges = this.graph.edges.map(() => ({ count: 0, last: -1 }));
    this.trackLast = new Map();
    this.resumeFrom = null;
    this.status = "pending";
    this.applied = 0;
    this.lastSeq = 0;
    this.lastEdge = null;
    this.lastStarted = null;
    this.usage = { calls: 0, input_tokens: 0, output_tokens: 0 };
    this.finishedUsage = null;
    this.dirtyNodes = new Set();
    this.dirtyEdges = new Set();
    this.dirtyAll = true;
  }

  nodeOfOp(opId) {
    const entry = this.graph.ops[opId];
    return entry ? entry.node : null;
  }

  /** The model request an event reports, or null. An agent op makes one request per
   * turn (`agent_turn`); its `llm_response` repeats the attempt's last turn, so it is not
   * counted again (as `lattice runs show` and the run's usage count them). */
  request(ev, type, data) {
    const agent = this.graph.ops[ev.op_id]?.kind === "AGENT";
    if (type === "agent_turn" || (type === "llm_response" && !agent)) {
      return { input: data.input_tokens || 0, output: data.output_tokens || 0 };
    }
    return null;
  }

  light(edgeIndex, seq) {
    if (edgeIndex === null || edgeIndex === undefined) return;
    const edge = this.edges[edgeIndex];
    if (!edge) return;
    edge.count += 1;
    edge.last = seq;
    if (this.lastEdge !== null && this.lastEdge !== edgeIndex) this.dirtyEdges.add(this.lastEdge);
    this.lastEdge = edgeIndex;
    this.dirtyEdges.add(edgeIndex);
  }

  settle(id, node) {
    if (node.running.size) node.status = "running";
    this.dirtyNodes.add(id);
  }

  /** Whether the run has ended (not halted: a halted run goes on when answered). */
  finished() {
    return this.status === "completed" || this.status === "failed" || this.status === "interrupted";
  }

  /** Keep the timeline: a step opens at op_started and closes at op_finished. */
  step(ev, type, data, id) {
    const at = ev.ts ? Date.parse(ev.ts) : NaN;
    if (!Number.isNaN(at)) {
      if (this.startedAt === null) this.startedAt = at;
      this.endedAt = at;
    }
    if (!ev.op_id) return;
    const key = `${ev.op_id}|${ev.branch || ""}`;
    if (type === "op_started") {
      const kind = this.graph.ops[ev.op_id]?.kind || data.kind || "";
      const step = { op: ev.op_id, node: id, branch: ev.branch || "", kind, start: at, end: null, ms: null, tokens: 0, attempts: [], tools: [], port: null, error: null };
      this.steps.push(step);
      this.openSteps.set(key, step);
      this.stepsDirty = true;
      return;
    }
    const step = this.openSteps.get(key);
    if (!step) return;
    this.stepsDirty = true;
    switch (type) {
      case "llm_request":
        step.attempts.push({ kind: data.kind || "initial", model_class: data.model_class || "", ok: null });
        break;
      case "llm_response":
      case "agent_turn": {
        const request = this.request(ev, type, data);
        if (request) step.tokens += request.input + request.output;
        break;
      }
      case "validation_failed":
        if (step.attempts.length) step.attempts[step.attempts.length - 1].ok = false;
        break;
      case "tool_call":
      case "tool_call_started":
        step.tools.push({ id: data.call_id ?? null, name: data.tool || data.name || "tool", ms: null, error: false });
        break;
      case "tool_result":
      case "tool_call_finished": {
        // parallel calls of one turn finish in any order: matched by their call id
        const open = step.tools.find((t) => t.ms === null && t.id === (data.call_id ?? null)) ?? step.tools.findLast((t) => t.ms === null);
        if (open) {
          open.ms = data.duration_ms ?? null;
          open.error = Boolean(data.is_error);
        }
        break;
      }
      case "op_finished":
        step.end = at;
        step.ms = typeof data.duration_ms === "number" ? data.duration_ms : (Number.isNaN(at) ? null : at - step.start);
        step.port = data.port ?? null;
        step.error = data.error_type || null;
        this.openSteps.delete(key);
        break;
      default:
        break;
    }
  }

  /** Apply one event (its index in the run's event list is `index`). */
  apply(ev, index) {
    this.applied = index + 1;
    if (typeof ev.seq === "number") this.lastSeq = ev.seq;
    const type = ev.type;
    const data = ev.data || {};
    const id = ev.op_id ? this.nodeOfOp(ev.op_id) : null;
    const node = id !== null ? this.nodes.get(id) : undefined;
    if (node) node.events.push(index);
    this.step(ev, type, data, id);

    switch (type) {
      case "run_started":
      case "run_resumed":
        this.status = "running";
        if (type === "run_resumed") this.resumeFrom = data.from_op ?? null;
        break;
      case "op_started": {
        const kind = this.graph.ops[ev.op_id]?.kind;
        if (!node || kind === "FORK") {
          // A FORK only hands over to its branches: its node stays as it was.
          this.resumeFrom = null;
          break;
        }
        const track = ev.branch || "";
        let prev = this.trackLast.get(track);
        if (prev === undefined && track) prev = this.trackLast.get(parentTrack(track));
        const again = this.resumeFrom !== null && this.resumeFrom === ev.op_id;
        if (prev !== id && !again) node.visits += 1;
        if (node.visits === 0) node.visits = 1;
        this.resumeFrom = null;
        this.trackLast.set(track, id);
        node.running.add(`${ev.op_id}|${track}`);
        this.lastStarted = id;
        node.status = "running";
        this.dirtyNodes.add(id);
        break;
      }
      case "op_finished": {
        const entry = this.graph.ops[ev.op_id];
        if (node && entry?.kind !== "FORK") {
          node.running.delete(`${ev.op_id}|${ev.branch || ""}`);
          if (data.error_type) node.status = "failed";
          else if (data.port === "failed") node.status = "failed";
          else node.status = "completed";
          node.lastPort = data.port ?? null;
          if (typeof data.duration_ms === "number") node.ms += data.duration_ms;
          this.settle(id, node);
        }
        if (entry && data.port !== undefined) {
          const edge = entry.next.find((n) => n.port === data.port);
          if (edge) this.light(edge.edge, ev.seq);
        }
        break;
      }
      case "for_each_started":
        if (node) {
          node.items += data.items || 0;
          this.dirtyNodes.add(id);
        }
        break;
      case "fork_started": {
        const entry = this.graph.ops[ev.op_id];
        for (const branch of (entry && entry.branches) || []) this.light(branch.edge, ev.seq);
        break;
      }
      case "llm_response":
      case "agent_turn": {
        const request = this.request(ev, type, data);
        if (!request) break;
        this.usage.calls += 1;
        this.usage.input_tokens += request.input;
        this.usage.output_tokens += request.output;
        if (node) {
          node.calls += 1;
          node.tokens += request.input + request.output;
          this.dirtyNodes.add(id);
        }
        break;
      }
      case "repair_attempt":
        if (node) {
          node.repairs += 1;
          this.dirtyNodes.add(id);
        }
        break;
      case "escalated":
        if (node) {
          node.escalations += 1;
          this.dirtyNodes.add(id);
        }
        break;
      case "run_halted":
        this.status = "halted";
        if (node) {
          node.running.clear();
          node.status = "halted";
          this.dirtyNodes.add(id);
        }
        break;
      case "run_failed":
        this.status = "failed";
        if (node) {
          node.running.clear();
          node.status = "failed";
          this.dirtyNodes.add(id);
        }
        break;
      case "run_interrupted":
        this.status = "interrupted";
        for (const [nid, n] of this.nodes) {
          if (n.running.size) {
            n.running.clear();
            n.status = "interrupted";
            this.dirtyNodes.add(nid);
          }
        }
        break;
      case "run_finished":
        if (data.status) this.status = data.status;
        if (data.usage) this.finishedUsage = data.usage;
        this.dirtyAll = true; // nodes that never ran are greyed out now
        if (TERMINAL.has(this.status)) {
          for (const [nid, n] of this.nodes) {
            if (n.running.size) {
              n.running.clear();
              n.status = this.status === "completed" ? "completed" : "interrupted";
              this.dirtyNodes.add(nid);
            }
          }
        }
        break;
      default:
        break;
    }
  }

  /** Apply `events[from..to)`. */
  applyRange(events, from, to) {
    for (let i = from; i < to; i++) this.apply(events[i], i);
  }

  /** Rebuild from the start up to `count` events (time travel). */
  rebuild(events, count) {
    this.reset();
    this.applyRange(events, 0, count);
    this.dirtyAll = true;
  }

  takeDirty() {
    const out = { all: this.dirtyAll, nodes: this.dirtyNodes, edges: this.dirtyEdges };
    this.dirtyNodes = new Set();
    this.dirtyEdges = new Set();
    this.dirtyAll = false;
    return out;
  }
}
