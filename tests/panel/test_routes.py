"""The panel's routes on a real ``lattice serve`` (uvicorn in a thread): the page and its
files, and the JSON the page reads (a run's canvas, op records and initial state, the
new-run form of a workflow, the canvas of an inline document)."""

from __future__ import annotations

import asyncio
import builtins
import io
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.lower import lower
from lattice.runs.oplog import op_line
from lattice.runtime import Runner, RunStore
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.server.panel_api import PANEL_DIR
from tests.builders import approval, chain, node
from tests.conftest import EXAMPLES
from tests.server.helpers import TIMEOUT

TOKEN = "panel-token-for-tests"


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        yield client


def test_the_page_and_its_files_are_served(client: httpx.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "connect-src 'self'" in policy
    assert 'src="panel/js/main.js"' in page.text
    assert client.head("/").status_code == 200
    for name in sorted(p.relative_to(PANEL_DIR).as_posix() for p in PANEL_DIR.rglob("*.*")):
        response = client.get(f"/panel/{name}")
        assert response.status_code == 200, name
    assert client.get("/panel/js/main.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/panel/panel.css").headers["content-type"].startswith("text/css")


def test_the_page_loads_nothing_from_elsewhere() -> None:
    """No CDN: every URL the page's files name is relative to the server."""
    for path in PANEL_DIR.rglob("*.*"):
        text = path.read_text(encoding="utf-8")
        for scheme in ("http://", "https://", "//cdn", "@import"):
            hits = [line for line in text.splitlines() if scheme in line and "w3.org" not in line]
            assert not hits, (path.name, hits)


@pytest.mark.parametrize(
    "path",
    ["/panel/..%2Fpanel_api.py", "/panel/..%2F..%2Fserver%2Fapp.py", "/panel/nope.js", "/panel/js"],
)
def test_nothing_but_the_panel_files_is_served(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_a_run_is_drawn_on_its_workflow(client: httpx.Client, triage: str) -> None:
    graph = client.get(f"/v1/runs/{triage}/graph").json()
    assert graph["layout"] == "document"
    assert graph["workflow"]["id"] == "support-triage"
    classify = next(n for n in graph["nodes"] if n["id"] == "classify")
    assert (classify["x"], classify["y"], classify["ops"]) == (300, 300, ["classify"])
    assert graph["ops"]["classify"]["definition"]["writes"] == "$vars.classify.result"
    assert graph["inputs_schema"]["required"] == ["ticket"]
    assert client.get("/v1/runs/nope/graph").status_code == 404


def test_a_node_s_op_records_say_what_it_read_wrote_and_tried(
    client: httpx.Client, triage: str
) -> None:
    index = client.get(f"/v1/runs/{triage}/ops").json()["ops"]
    assert [o["op_id"] for o in index[:3]] == ["start", "classify", "init-revisions"]
    assert index[1]["attempts"] == 3
    classify = client.get(f"/v1/runs/{triage}/ops", params={"node": "classify"}).json()
    assert classify["total"] == 1
    record = classify["records"][0]
    assert record["label"] == "0002"
    assert record["inputs"] == {
        "$in.ticket": json.loads((EXAMPLES / "support-triage.inputs.json").read_text())["ticket"]
    }
    assert record["output"] == {"category": "billing", "urgency": 4}
    kinds = [a["kind"] for a in record["attempts"]]
    assert kinds == ["initial", "repair", "escalation"]
    assert record["attempts"][0]["violations"] == [
        {"pointer": "/urgency", "message": "is 9, at most 5 allowed"}
    ]
    assert "broke the contract" in record["attempts"][1]["messages"][-1]["content"]
    route = client.get(f"/v1/runs/{triage}/ops", params={"node": "route"}).json()
    assert [r["port"] for r in route["records"]] == ["Billing", "Billing"]
    last = client.get(f"/v1/runs/{triage}/ops", params={"node": "route", "limit": 1}).json()
    assert (last["total"], len(last["records"]), last["records"][0]["label"]) == (2, 1, "0013")
    assert client.get(f"/v1/runs/{triage}/ops", params={"node": "zz"}).json()["records"] == []


def test_the_state_a_run_started_from(client: httpx.Client, triage: str) -> None:
    initial = client.get(f"/v1/runs/{triage}/state").json()
    assert initial["vars"] == {} and initial["ctx"]["run_id"] == triage
    final = client.get(f"/v1/runs/{triage}/state", params={"at": "final"}).json()
    assert final["vars"]["revisions"] == 1
    assert client.get(f"/v1/runs/{triage}/state", params={"at": "middle"}).status_code == 422


def test_the_runs_list_says_tokens_and_cost(client: httpx.Client, triage: str) -> None:
    run = next(r for r in client.get("/v1/runs").json()["runs"] if r["run_id"] == triage)
    assert run["calls"] == 7 and run["tokens"] > 0 and "cost_usd" in run


def test_the_form_of_a_workflow(client: httpx.Client) -> None:
    form = client.get("/v1/forms/support-triage.json").json()
    assert form["inputs_schema"]["properties"]["ticket"]["type"] == "string"
    assert form["example_inputs"]["ticket"].startswith("Hello")
    assert form["mocks"] == [
        "analyst-panel.mock.json",
        "approval.mock.json",
        "support-triage-repair.mock.json",
        "support-triage.mock.json",
    ]
    assert form["default_mock"] == "support-triage.mock.json"
    assert len(form["graph"]["nodes"]) == 16
    bare = client.get("/v1/forms/approval.json").json()
    assert (bare["example_inputs"], bare["default_mock"]) == (None, "approval.mock.json")
    assert bare["graph"]["layout"] == "layered"
    assert client.get("/v1/forms/..%2Foutside.json").status_code in (400, 404)
    assert client.get("/v1/forms/missing.json").status_code == 404


def test_the_form_lists_the_fields_read_but_not_acted_on(client: httpx.Client, space: Path) -> None:
    doc = approval()
    doc["slashCommandOptions"] = {"allowedTools": "Bash", "model": "haiku"}
    (space / "workflows" / "asks-tools.json").write_text(json.dumps(doc))
    notes = client.get("/v1/forms/asks-tools.json").json()["notes"]
    assert any("allowedTools asks for Bash" in note for note in notes)
    assert any("model class 'small'" in note for note in notes)
    assert client.get("/v1/forms/approval.json").json()["notes"] == []


def test_the_canvas_of_an_inline_document(client: httpx.Client) -> None:
    graph = client.post("/v1/graph", json={"document": approval()}).json()
    assert graph["layout"] == "layered" and graph["diagnostics"] == []
    assert graph["ops"]["approve#switch"]["node"] == "approve"
    broken = client.post("/v1/graph", json={"document": {"nodes": [{"id": "a", "type": "promt"}]}})
    assert broken.status_code == 200
    assert {d["code"] for d in broken.json()["diagnostics"]} >= {"unknown-node-type"}
    assert client.post("/v1/graph", json={"nodes": []}).status_code == 422


def test_with_a_token_only_the_page_is_public(space: Path) -> None:
    settings = ServerSettings(runs_dir=space / "runs", token=TOKEN)
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=TIMEOUT) as anon:
        assert anon.get("/").status_code == 200
        assert anon.get("/panel/js/api.js").status_code == 200
        for path in ("/v1/runs", "/v1/runs/x/graph", "/v1/runs/x/ops", "/v1/forms/a.json"):
            assert anon.get(path).status_code == 401, path
        assert anon.post("/", json={}).status_code == 401  # only GET and HEAD are public
        authorised = anon.get("/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert authorised.status_code == 200


class ReadLog:
    """Every file opened for reading and every folder listed under ``root``, and whether
    it happened on a thread running an event loop (the server's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.root = str(root.resolve())
        self.entries: list[tuple[str, bool]] = []
        self._lock = threading.Lock()
        for module, name in ((io, "open"), (builtins, "open"), (os, "scandir")):
            monkeypatch.setattr(module, name, self._spy(getattr(module, name)))

    def _spy(self, real: Any) -> Any:
        def spy(path: Any, *args: Any, **kwargs: Any) -> Any:
            mode = args[0] if args else kwargs.get("mode", "r")
            target = os.fspath(path) if not isinstance(path, int) else ""
            if target.startswith(self.root) and not any(c in str(mode) for c in "wax+"):
                with self._lock:
                    self.entries.append((target, _on_a_loop()))
            return real(path, *args, **kwargs)

        return spy

    def read(self) -> str:
        return " ".join(Path(target).name for target, _ in self.entries)


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_routes_read_run_folders_off_the_loop(
    client: httpx.Client, triage: str, space: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's runs and streams share one event loop: the routes that read run
    folders (and the workflows folder) do so on worker threads, never on the loop's."""
    log = ReadLog(monkeypatch, space)
    for path in (
        "/v1/runs",
        f"/v1/runs/{triage}",
        f"/v1/runs/{triage}/graph",
        f"/v1/runs/{triage}/state",
        f"/v1/runs/{triage}/ops",
        f"/v1/runs/{triage}/ops?node=classify",
        "/v1/forms/support-triage.json",
        "/v1/workflows",
        "/v1/workflows/approval.json",
    ):
        assert client.get(path).status_code == 200, path
    read = log.read()
    # the checkpoint is read from its copy in the journal
    for name in ("journal.jsonl", "workflow.json", "state_initial.json", "ops.jsonl"):
        assert name in read
    assert [target for target, on_loop in log.entries if on_loop] == []


@pytest.mark.parametrize("layout", ["ops.jsonl", "ops/"])
def test_the_op_index_comes_a_page_at_a_time(
    client: httpx.Client, space: Path, layout: str
) -> None:
    """A run of many ops is listed ``limit`` records at a time (50 by default), in op
    order, each page's ``next`` the ``after`` of the following one; from ``ops.jsonl``
    and from a folder written before it (a file per record in ``ops/``)."""
    folder = space / "runs" / "20000101T000000-many-ops"
    records = {
        f"{seq:04d}": {"op_id": f"op{seq}", "node_id": f"n{seq}", "kind": "SET"}
        for seq in range(1, 121)
    }
    records["0007.1.0001"] = {"op_id": "inner"}
    if layout == "ops/":
        (folder / "ops").mkdir(parents=True)
        for label, record in records.items():
            (folder / "ops" / f"{label}-{record['op_id']}.json").write_text(json.dumps(record))
    else:
        folder.mkdir(parents=True)
        lines = [op_line(label, r["op_id"], json.dumps(r)) for label, r in records.items()]
        (folder / "ops.jsonl").write_text("".join(sorted(lines, reverse=True)))
    path = f"/v1/runs/{folder.name}/ops"
    first = client.get(path).json()
    assert len(first["ops"]) == 50 and first["next"] == "0049"
    assert [o["label"] for o in first["ops"][6:9]] == ["0007", "0007.1.0001", "0008"]
    labels: list[str] = []
    after = None
    while True:
        params = {"limit": 33} | ({"after": after} if after is not None else {})
        page = client.get(path, params=params).json()
        labels.extend(o["label"] for o in page["ops"])
        after = page["next"]
        if after is None:
            break
        assert len(page["ops"]) == 33
    assert len(labels) == 121 and len(set(labels)) == 121
    assert labels[-1] == "0120"
    assert client.get(path, params={"limit": 500}).json()["next"] is None
    assert client.get(path, params={"after": "0120"}).json() == {"ops": [], "next": None}
    for params in ({"limit": 501}, {"limit": 0}, {"after": "x"}, {"node": "n1", "limit": 201}):
        response = client.get(path, params=params)
        assert response.status_code == 422, params
        assert response.json()["error"] == "invalid_request"


def test_a_node_s_records_leave_out_another_node_s_of_the_same_file_safe_name(
    client: httpx.Client, space: Path
) -> None:
    """Op names in a run folder are file-safe (``a"b`` is kept as ``a_b``): a node's
    records are its own, not those of another node whose id differs in such characters."""
    doc = chain(
        node('a"b', "variableStore", operation="set", name="quoted", value=1),
        node("a_b", "variableStore", operation="set", name="plain", value=2),
    )
    result = Runner(lower(doc), store=RunStore(space / "runs")).run()
    assert result.status == "completed" and result.run_dir is not None
    path = f"/v1/runs/{result.run_dir.name}/ops"
    for node_id in ('a"b', "a_b"):
        page = client.get(path, params={"node": node_id}).json()
        assert (page["total"], [r["node_id"] for r in page["records"]]) == (1, [node_id])
