"""The canvas of the execution panel: a workflow as the editor draws it, and how its
ExecIR ops and their edges land on it.

A cc-wf-studio document places every node (``position``, the top left corner; a child
of a ``group`` is placed relative to its group) and connects them port to port. The
panel draws those nodes and connections; the events of a run name ops, so the graph
also says which node each op belongs to (``sourceNode``, else the id before ``__`` of an
inlined sub-flow or before ``#`` of an op lowering added) and which drawn connection
each op edge travels along (the edge that lights up when the op leaves by that port).

A document whose nodes lack positions, or where two nodes sit on each other, is laid out in
layers here (longest path from the start, loops' back edges left out; each layer
ordered by the average place of its neighbours); a run without a document (ExecIR
only) is drawn op by op the same way. Nodes placed by the document are as wide as the
room to their right on the same row allows.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from lattice.document.models import SEQUENTIAL_PORT, normalize_port
from lattice.lower.branch_nodes import unique_labels

NODE_WIDTH = 176
NODE_HEIGHT = 52
LAYER_GAP = 240
"""Distance between the left edges of two layers of a computed layout."""
ROW_GAP = 84
"""Distance between the tops of two nodes of one layer (a node is 52 high; its badge
line sits in the 32 between)."""
GROUP_PADDING = 24


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _unwrap(document: Any) -> Mapping[str, Any]:
    """The workflow object of a document (cc-wf-studio's samples wrap it in ``workflow``)."""
    if not isinstance(document, Mapping):
        return {}
    inner = document.get("workflow")
    if isinstance(inner, Mapping) and "nodes" not in document:
        return inner
    return document


def _title(node: Mapping[str, Any]) -> str:
    data = node.get("data") if isinstance(node.get("data"), Mapping) else {}
    assert isinstance(data, Mapping)
    for value in (data.get("label"), data.get("name"), node.get("name"), node.get("id")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return str(node.get("id"))


def branch_labels(node: Mapping[str, Any]) -> list[str]:
    """The labels of a node's ``branch-N`` ports as the IR names them (switch and ifElse
    branches, askUserQuestion options)."""
    data = node.get("data")
    if not isinstance(data, Mapping):
        return []
    items = data.get("options") if node.get("type") == "askUserQuestion" else data.get("branches")
    if not isinstance(items, list):
        return []
    raw = [
        str(item.get("label") or "") if isinstance(item, Mapping) else str(item) for item in items
    ]
    return unique_labels(raw)


def edge_label(node: Mapping[str, Any] | None, port: str) -> str | None:
    """What a connection leaving ``node`` by ``port`` is labelled with (None: the
    sequential port)."""
    if port == SEQUENTIAL_PORT:
        return None
    if port.startswith("branch-") and port[7:].isdigit() and node is not None:
        labels = branch_labels(node)
        index = int(port[7:])
        if index < len(labels):
            return labels[index]
    return port


# -- the op -> node mapping ---------------------------------------------------------------


def node_of(op_id: str, op: Mapping[str, Any], node_ids: set[str] | dict[str, Any]) -> str | None:
    """The drawn node an op belongs to, or None."""
    source = op.get("sourceNode")
    candidates = [c for c in (source, op_id) if isinstance(c, str) and c]
    for candidate in candidates:
        if candidate in node_ids:
            return candidate
    for candidate in candidates:
        for separator in ("__", "#"):
            head = candidate.split(separator, 1)[0]
            if head != candidate and head in node_ids:
                return head
    return None


def _ops(ir: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    ops = ir.get("ops") if isinstance(ir, Mapping) else None
    if not isinstance(ops, Mapping):
        return {}
    return {str(k): v for k, v in ops.items() if isinstance(v, Mapping)}


def _next(op: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    for edge in op.get("next") or []:
        if isinstance(edge, Mapping) and isinstance(edge.get("to"), str):
            out.append((str(edge.get("port") or SEQUENTIAL_PORT), edge["to"]))
    return out


def _op_entries(
    ops: dict[str, Mapping[str, Any]],
    nodes: dict[str, Any],
    edges: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Each op's node, and the drawn edge each of its ports (and a FORK's branches)
    travel along."""
    owner = {op_id: node_of(op_id, op, nodes) for op_id, op in ops.items()}
    between: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, edge in enumerate(edges):
        between[(edge["from"], edge["to"])].append(index)

    def drawn(source: str | None, target_op: str, port: str) -> int | None:
        target = owner.get(target_op)
        if source is None or target is None or source == target:
            return None
        found = between.get((source, target), [])
        if len(found) > 1:
            for index in found:
                if edges[index]["label"] == port or edges[index]["port"] == port:
                    return index
        return found[0] if found else None

    out: dict[str, dict[str, Any]] = {}
    for op_id, op in ops.items():
        node = owner[op_id]
        entry: dict[str, Any] = {
            "node": node,
            "kind": op.get("kind"),
            "name": op.get("name"),
            "definition": op,
            "next": [
                {"port": port, "to": to, "edge": drawn(node, to, port)} for port, to in _next(op)
            ],
        }
        branches = op.get("branches")
        if isinstance(branches, list):
            entry["branches"] = [
                {"to": b, "edge": drawn(node, b, "")} for b in branches if isinstance(b, str)
            ]
        if isinstance(op.get("body"), str):
            entry["body"] = op["body"]
        out[op_id] = entry
    return out


# -- layouts ------------------------------------------------------------------------------


def layered_positions(  # noqa: C901
    ids: list[str], links: Iterable[tuple[str, str]], roots: Iterable[str] = ()
) -> dict[str, tuple[float, float]]:
    """Top-left corners of ``ids`` laid out left to right in layers: each node one layer
    after the furthest of its predecessors (back edges of loops left out), each layer
    ordered by the average row of its neighbours in the layer before."""
    order = {node: i for i, node in enumerate(ids)}
    succ: dict[str, list[str]] = {node: [] for node in ids}
    for a, b in links:
        if a in succ and b in succ and b not in succ[a] and a != b:
            succ[a].append(b)
    # Back edges: found by a depth-first walk from the roots (then from anything left).
    state: dict[str, int] = {}
    forward: dict[str, list[str]] = {node: [] for node in ids}
    starts = [r for r in roots if r in succ] + ids
    for start in starts:
        if start in state:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            node, i = stack[-1]
            if i < len(succ[node]):
                stack[-1] = (node, i + 1)
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    continue  # a back edge
                forward[node].append(nxt)
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                stack.pop()
    # Longest path layering over the forward edges (a DAG), in topological order.
    indegree = {node: 0 for node in ids}
    for node in ids:
        for nxt in forward[node]:
            indegree[nxt] += 1
    layer = {node: 0 for node in ids}
    ready = deque(node for node in ids if indegree[node] == 0)
    topo: list[str] = []
    while ready:
        node = ready.popleft()
        topo.append(node)
        for nxt in forward[node]:
            layer[nxt] = max(layer[nxt], layer[node] + 1)
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    preds: dict[str, list[str]] = {node: [] for node in ids}
    for node in ids:
        for nxt in forward[node]:
            preds[nxt].append(node)
    layers: dict[int, list[str]] = defaultdict(list)
    for node in ids:
        layers[layer[node]].append(node)
    row: dict[str, float] = {}
    for depth in sorted(layers):
        members = layers[depth]

        def key(node: str) -> tuple[float, int]:
            known = [row[p] for p in preds[node] if p in row]
            return (sum(known) / len(known) if known else float(order[node]), order[node])

        members.sort(key=key)
        for index, node in enumerate(members):
            row[node] = float(index)
    tallest = max((len(m) for m in layers.values()), default=1)
    out = {}
    for depth, members in layers.items():
        offset = (tallest - len(members)) * ROW_GAP / 2
        for index, node in enumerate(members):
            out[node] = (float(depth * LAYER_GAP), offset + index * ROW_GAP)
    return out


MIN_WIDTH = 96
CROWDED = (48.0, 24.0)
"""Two nodes closer than this (x, y) sit on each other: the positions are not usable."""


def _crowded(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return abs(a[0] - b[0]) < CROWDED[0] and abs(a[1] - b[1]) < CROWDED[1]


def widths(points: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Each node as wide as it can be without reaching the next node to its right on the
    same row (the editor draws some nodes narrower than others)."""
    out = {}
    for node, (x, y) in points.items():
        gaps = [
            ox - x
            for other, (ox, oy) in points.items()
            if other != node and ox > x and abs(oy - y) < NODE_HEIGHT
        ]
        room = min(gaps, default=NODE_WIDTH + 24) - 24
        out[node] = float(max(MIN_WIDTH, min(NODE_WIDTH, room)))
    return out


def _placed(nodes: list[Mapping[str, Any]]) -> dict[str, tuple[float, float]] | None:
    """Absolute top-left corners of the document's nodes, or None when a node has no
    position (or a group it sits in has none)."""
    by_id = {n["id"]: n for n in nodes}
    out: dict[str, tuple[float, float]] = {}

    def place(node_id: str, depth: int = 0) -> tuple[float, float] | None:
        if node_id in out:
            return out[node_id]
        node = by_id.get(node_id)
        if node is None or depth > 32:
            return None
        pos = node.get("position")
        x = _number(pos.get("x")) if isinstance(pos, Mapping) else None
        y = _number(pos.get("y")) if isinstance(pos, Mapping) else None
        if x is None or y is None:
            return None
        parent = node.get("parentId")
        if isinstance(parent, str) and parent in by_id:
            base = place(parent, depth + 1)
            if base is None:
                return None
            x, y = x + base[0], y + base[1]
        out[node_id] = (x, y)
        return out[node_id]

    for node in nodes:
        if place(node["id"]) is None:
            return None
    return out


def _group_size(node: Mapping[str, Any]) -> tuple[float, float] | None:
    for holder in (node.get("style"), node, node.get("measured"), node.get("data")):
        if isinstance(holder, Mapping):
            w, h = _number(holder.get("width")), _number(holder.get("height"))
            if w and h:
                return (w, h)
    return None


def _bounds(items: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    boxes = list(items)
    if not boxes:
        return {"x": 0.0, "y": 0.0, "w": float(NODE_WIDTH), "h": float(NODE_HEIGHT)}
    left = min(b["x"] for b in boxes)
    top = min(b["y"] for b in boxes)
    right = max(b["x"] + b["w"] for b in boxes)
    bottom = max(b["y"] + b["h"] for b in boxes)
    return {"x": left, "y": top, "w": right - left, "h": bottom - top}


# -- graphs -------------------------------------------------------------------------------


# long: the canvas in one pass: nodes, edges, layout, ops per node, groups, in the order the panel draws them
def document_graph(document: Any, ir: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The canvas of a workflow document (with ``ir``, its ExecIR as a dict: the ops on it)."""
    flow = _unwrap(document)
    listed = flow.get("nodes")
    raw_nodes = [
        n
        for n in (listed if isinstance(listed, list) else [])
        if isinstance(n, Mapping) and isinstance(n.get("id"), str) and n.get("id")
    ]
    seen: set[str] = set()
    nodes_in: list[Mapping[str, Any]] = []
    for n in raw_nodes:
        if n["id"] not in seen:
            seen.add(n["id"])
            nodes_in.append(n)
    by_id = {n["id"]: n for n in nodes_in}
    groups_in = [n for n in nodes_in if n.get("type") == "group"]
    drawn_in = [n for n in nodes_in if n.get("type") != "group"]
    drawn_ids = {n["id"] for n in drawn_in}

    edges: list[dict[str, Any]] = []
    for index, conn in enumerate(flow.get("connections") or []):
        if not isinstance(conn, Mapping):
            continue
        source, target = conn.get("from"), conn.get("to")
        if source not in drawn_ids or target not in drawn_ids:
            continue
        port_raw = conn.get("fromPort")
        port = normalize_port(port_raw if isinstance(port_raw, str) else None)
        edges.append(
            {
                "id": str(conn.get("id") or f"c{index}"),
                "from": source,
                "to": target,
                "port": port,
                "label": edge_label(by_id.get(str(source)), port),
            }
        )

    placed = _placed(nodes_in)
    layout = "document"
    if placed is not None:
        points = [placed[n["id"]] for n in drawn_in]
        if any(_crowded(a, b) for i, a in enumerate(points) for b in points[i + 1 :]):
            placed = None
    if placed is None:
        layout = "layered"
        ids = [n["id"] for n in drawn_in]
        roots = [n["id"] for n in drawn_in if n.get("type") == "start"]
        placed = layered_positions(ids, ((e["from"], e["to"]) for e in edges), roots)

    ops = _op_entries(_ops(ir), {n: True for n in drawn_ids}, edges)
    ops_by_node: dict[str, list[str]] = defaultdict(list)
    for op_id, entry in ops.items():
        if entry["node"] is not None:
            ops_by_node[entry["node"]].append(op_id)

    sizes = (
        widths({n["id"]: placed[n["id"]] for n in drawn_in})
        if layout == "document"
        else dict.fromkeys(drawn_ids, float(NODE_WIDTH))
    )
    nodes = []
    for n in drawn_in:
        x, y = placed[n["id"]]
        parent = n.get("parentId")
        nodes.append(
            {
                "id": n["id"],
                "type": str(n.get("type") or ""),
                "label": _title(n),
                "x": x,
                "y": y,
                "w": sizes[n["id"]],
                "h": NODE_HEIGHT,
                "group": parent if isinstance(parent, str) and parent in by_id else None,
                "ops": ops_by_node.get(n["id"], []),
            }
        )

    groups = []
    for g in groups_in:
        members = [n for n in nodes if n["group"] == g["id"]]
        size = _group_size(g)
        if layout == "document" and g["id"] in placed and size is not None:
            x, y = placed[g["id"]]
            box = {"x": x, "y": y, "w": size[0], "h": size[1]}
        elif members:
            inner = _bounds(members)
            box = {
                "x": inner["x"] - GROUP_PADDING,
                "y": inner["y"] - GROUP_PADDING - 16,
                "w": inner["w"] + 2 * GROUP_PADDING,
                "h": inner["h"] + 2 * GROUP_PADDING + 16,
            }
        else:
            continue
        groups.append({"id": g["id"], "label": _title(g), **box})

    inputs_schema = ir.get("inputsSchema") if isinstance(ir, Mapping) else None
    workflow = {
        "id": flow.get("id"),
        "name": flow.get("name"),
        "description": flow.get("description"),
    }
    return {
        "source": "document",
        "layout": layout,
        "workflow": workflow,
        "nodes": nodes,
        "groups": groups,
        "edges": edges,
        "ops": ops,
        "inputs_schema": inputs_schema if isinstance(inputs_schema, Mapping) else None,
        "bounds": _bounds([*nodes, *groups]),
    }


def execir_graph(ir: Mapping[str, Any]) -> dict[str, Any]:
    """The canvas of a run without a document: one node per op, laid out in layers."""
    ops = _ops(ir)
    edges: list[dict[str, Any]] = []
    for op_id, op in ops.items():
        branches = op.get("branches")
        for n, target in enumerate(branches if isinstance(branches, list) else [], 1):
            if target in ops:
                edges.append(
                    {
                        "id": f"{op_id}>{target}",
                        "from": op_id,
                        "to": target,
                        "port": "",
                        "label": f"branch {n}",
                    }
                )
        body = op.get("body")
        if isinstance(body, str) and body in ops:
            edges.append(
                {
                    "id": f"{op_id}>{body}",
                    "from": op_id,
                    "to": body,
                    "port": "",
                    "label": "each item",
                }
            )
        for port, target in _next(op):
            if target in ops:
                edges.append(
                    {
                        "id": f"{op_id}:{port}>{target}",
                        "from": op_id,
                        "to": target,
                        "port": port,
                        "label": None if port == SEQUENTIAL_PORT else port,
                    }
                )
    entry = ir.get("entry")
    placed = layered_positions(
        list(ops), ((e["from"], e["to"]) for e in edges), [entry] if isinstance(entry, str) else []
    )
    entries = _op_entries(ops, {op_id: True for op_id in ops}, edges)
    nodes = [
        {
            "id": op_id,
            "type": str(op.get("kind") or ""),
            "label": str(op.get("name") or op_id),
            "x": placed[op_id][0],
            "y": placed[op_id][1],
            "w": NODE_WIDTH,
            "h": NODE_HEIGHT,
            "group": None,
            "ops": [op_id],
        }
        for op_id, op in ops.items()
    ]
    workflow = ir.get("workflow") if isinstance(ir.get("workflow"), Mapping) else {}
    assert isinstance(workflow, Mapping)
    inputs_schema = ir.get("inputsSchema")
    return {
        "source": "execir",
        "layout": "layered",
        "workflow": {
            "id": workflow.get("id"),
            "name": workflow.get("name"),
            "description": workflow.get("description"),
        },
        "nodes": nodes,
        "groups": [],
        "edges": edges,
        "ops": entries,
        "inputs_schema": inputs_schema if isinstance(inputs_schema, Mapping) else None,
        "bounds": _bounds(nodes),
    }


def run_graph(document: Any, ir: Any) -> dict[str, Any]:
    """The canvas of a run folder's ``workflow.json`` (None when it has none) and
    ``execir.json``: the document when it has nodes, else the ops."""
    flow = _unwrap(document)
    ir_map = ir if isinstance(ir, Mapping) else None
    if isinstance(flow.get("nodes"), list) and flow["nodes"]:
        return document_graph(document, ir_map)
    return execir_graph(ir_map or {})
