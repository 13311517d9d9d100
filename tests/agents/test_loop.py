"""The agent loop in a run: turns, tool calls, results, the contract, bounds and grants."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.base import Message
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings
from lattice.tools.toolset import Toolset
from lattice.workspace.grants import WorkspaceGrant
from tests.agents.fixtures import RecordingToolset, ScriptedModel, answer, calls, recording_agents
from tests.agents.killing import redone
from tests.builders import chain, lower_ok, node, op_record, op_records

FIX_SCHEMA = {
    "type": "object",
    "properties": {"fixed": {"type": "boolean"}, "file": {"type": "string"}},
    "required": ["fixed", "file"],
    "additionalProperties": False,
}


def agent_ir(**data: Any) -> Any:
    fields = {"prompt": "Fix the bug", "builtInType": "general-purpose", "outputSchema": FIX_SCHEMA}
    return lower_ok(chain(node("fix", "subAgent", **{**fields, **data})))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    return root


def fix_script() -> list[Any]:
    return [
        calls(("Read", {"file_path": "app.py"}), ("LS", {"file_path": "."})),
        calls(("Edit", {"file_path": "app.py", "old_string": "a - b", "new_string": "a + b"})),
        answer('{"fixed": true, "file": "app.py"}'),
    ]


def run(ir: Any, model: ScriptedModel, settings: RuntimeSettings, tmp_path: Path) -> Any:
    return Runner(ir, provider=model, settings=settings, store=RunStore(tmp_path / "runs")).run({})


def test_an_agent_reads_edits_and_answers_under_its_contract(
    workspace: Path, tmp_path: Path
) -> None:
    model = ScriptedModel({"fix": fix_script()})
    opened: list[RecordingToolset] = []
    settings = RuntimeSettings(
        agents=recording_agents(workspace, opened=opened, read=True, write=True)
    )
    result = run(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    assert result.output == {"fixed": True, "file": "app.py"}
    assert (workspace / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    # the model saw the tools granted, and each turn answered the previous one's calls
    first, second, third = model.requests
    assert [t.name for t in first.tools] == [
        "Read",
        "LS",
        "Glob",
        "Grep",
        "Edit",
        "MultiEdit",
        "Write",
    ]  # Bash is asked for and not granted
    tool_messages = [m for m in second.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["call_0", "call_1"]
    assert tool_messages[0].content.endswith("2\t    return a - b")
    assert third.messages[-1].content == "changed app.py"
    assert result.usage.requests == 3
    assert opened[0].closed
    # recorded: the transcript, the change and its diff in the run folder
    (record,) = op_records(result.run_dir, "fix")
    assert record["seq"] == 2
    turns = record["transcript"]["turns"]
    assert [[c["name"] for c in t["tool_calls"]] for t in turns] == [["Read", "LS"], ["Edit"], []]
    (change,) = record["changes"]
    assert change["path"] == "app.py" and change["before"] != change["after"]
    diff = (result.run_dir / change["diff_file"]).read_text()
    assert "-    return a - b" in diff and "+    return a + b" in diff
    types = [e["type"] for e in result.events]
    assert types.count("tool_call_started") == 3 and types.count("tool_call_finished") == 3
    assert types.count("agent_turn") == 3


def test_a_toolset_that_fails_to_open_has_those_opened_before_it_closed(
    workspace: Path, tmp_path: Path
) -> None:
    opened: list[RecordingToolset] = []
    base = recording_agents(workspace, opened=opened, read=True)
    first = base.toolsets
    assert first is not None

    def factory(grant: WorkspaceGrant, tools: tuple[str, ...]) -> Iterator[Toolset]:
        yield from first(grant, tools)
        raise RuntimeError("the second toolset's server did not start")

    model = ScriptedModel({"fix": []})
    result = run(
        agent_ir(), model, RuntimeSettings(agents=replace(base, toolsets=factory)), tmp_path
    )
    assert result.status == "failed"
    assert "did not start" in result.failure.summary
    assert len(opened) == 1 and opened[0].closed
    assert model.requests == []


def test_tools_not_granted_are_not_offered(workspace: Path, tmp_path: Path) -> None:
    model = ScriptedModel({"fix": [answer('{"fixed": false, "file": "app.py"}')]})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True))
    named = agent_ir(tools="Read, LS, Glob, Grep, Edit, MultiEdit, Write, Bash")
    result = run(named, model, settings, tmp_path)
    assert result.status == "completed"
    assert [t.name for t in model.requests[0].tools] == ["Read", "LS", "Glob", "Grep"]
    (started,) = [e for e in result.events if e["type"] == "agent_started"]
    refused = {r["tool"]: r["grant"] for r in started["data"]["refused"]}
    assert set(refused) == {"Edit", "MultiEdit", "Write", "Bash"}
    assert refused["Edit"] == "[agents] allow = ['write'] (or --allow write)"


def test_an_agent_asking_for_every_tool_gets_the_grant_and_refuses_nothing(
    workspace: Path, tmp_path: Path
) -> None:
    model = ScriptedModel({"fix": [answer('{"fixed": false, "file": "app.py"}')]})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True, shell=True))
    result = run(agent_ir(), model, settings, tmp_path)  # general-purpose: every tool
    assert [t.name for t in model.requests[0].tools] == ["Read", "LS", "Glob", "Grep", "Bash"]
    (started,) = [e for e in result.events if e["type"] == "agent_started"]
    assert started["data"]["refused"] == []


def test_nothing_is_granted_by_default(workspace: Path, tmp_path: Path) -> None:
    model = ScriptedModel({"fix": [answer('{"fixed": false, "file": "?"}')]})
    result = run(agent_ir(), model, RuntimeSettings(), tmp_path)
    assert result.status == "completed"
    assert model.requests[0].tools == ()
    assert (workspace / "app.py").read_text().endswith("a - b\n")


def test_a_bad_final_answer_is_repaired_like_an_llm_answer(workspace: Path, tmp_path: Path) -> None:
    script = [
        *fix_script()[:2],
        answer('{"fixed": "yes"}'),
        answer('{"fixed": true, "file": "app.py"}'),
    ]
    model = ScriptedModel({"fix": script})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True, write=True))
    result = run(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    assert result.output == {"fixed": True, "file": "app.py"}
    repair = model.requests[-1]
    assert repair.messages[-1].role == "user" and "fixed" in repair.messages[-1].content
    assert result.usage.requests == 4


def repair_script(*, then: list[Any]) -> list[Any]:
    """Reads, edits, answers against the schema, and (asked to repair) reads again."""
    return [
        *fix_script()[:2],
        answer('{"fixed": "yes"}'),
        calls(("Read", {"file_path": "app.py"})),
        *then,
    ]


def test_a_repair_goes_on_in_the_agents_conversation(workspace: Path, tmp_path: Path) -> None:
    model = ScriptedModel(
        {"fix": repair_script(then=[answer('{"fixed": true, "file": "app.py"}')])}
    )
    opened: list[RecordingToolset] = []
    settings = RuntimeSettings(
        agents=recording_agents(workspace, opened=opened, read=True, write=True)
    )
    result = run(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    answered, repair, after_read = model.requests[2:]
    # the repair request: the whole conversation so far, the answer it fixes, the packet
    done = len(answered.messages)
    assert repair.messages[:done] == answered.messages
    assert [m.tool_calls for m in answered.messages if m.role == "assistant"] != []
    assert repair.messages[done] == Message("assistant", '{"fixed": "yes"}')
    packet = repair.messages[done + 1]
    assert packet.role == "user" and "broke the contract" in packet.content
    assert len(repair.messages) == done + 2 and repair.tools  # its tools still offered
    assert after_read.messages[: done + 2] == repair.messages
    assert after_read.messages[-1].role == "tool"
    # the tools ran once each, the transcript keeps every turn of both attempts
    assert [name for name, _ in opened[0].ran] == ["Read", "LS", "Edit", "Read"]
    turns = op_record(result.run_dir, "fix")["transcript"]["turns"]
    assert [t["attempt"] for t in turns] == [1, 1, 1, 2, 2]
    assert result.usage.requests == 5


class Killed(BaseException):
    """Stands for kill -9: nothing in the run catches it, so nothing more is written."""


def killed(request: Any) -> Any:
    raise Killed


def test_a_run_killed_during_a_repair_resumes_without_sending_or_running_anything_again(
    workspace: Path, tmp_path: Path
) -> None:
    model = ScriptedModel({"fix": repair_script(then=[killed])})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True, write=True))
    with pytest.raises(Killed):
        run(agent_ir(), model, settings, tmp_path)
    (folder,) = (tmp_path / "runs").iterdir()
    later = ScriptedModel({"fix": [answer('{"fixed": true, "file": "app.py"}')]})
    opened: list[RecordingToolset] = []
    again = RuntimeSettings(
        agents=recording_agents(workspace, opened=opened, read=True, write=True)
    )
    done = Runner.resume(folder, provider=later, settings=again)
    assert done.status == "completed", done.failure
    # only the request that had no answer is sent, with the conversation it was sent with
    (sent,) = later.requests
    assert sent.messages == model.requests[-1].messages
    assert opened[0].ran == []  # every tool call's result came from the journal
    assert redone(folder) == ([], [])
    assert (workspace / "app.py").read_text().endswith("a + b\n")
    turns = op_record(done.run_dir, "fix")["transcript"]["turns"]
    assert [t["attempt"] for t in turns] == [1, 1, 1, 2, 2]
    assert done.usage.requests == 5


def test_the_turn_bound_asks_for_the_answer_without_tools(workspace: Path, tmp_path: Path) -> None:
    looping = [calls(("Read", {"file_path": "app.py"}))] * 2
    model = ScriptedModel({"fix": [*looping, answer('{"fixed": false, "file": "app.py"}')]})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True))
    result = run(agent_ir(maxTurns=3), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    assert [bool(r.tools) for r in model.requests] == [True, True, False]
    assert "give your final answer now" in model.requests[-1].messages[-1].content


def test_a_model_that_keeps_calling_tools_past_its_bound_fails_the_op(
    workspace: Path, tmp_path: Path
) -> None:
    model = ScriptedModel({"fix": [calls(("Read", {"file_path": "app.py"}))] * 9})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True))
    result = run(agent_ir(maxTurns=2, escalate=False), model, settings, tmp_path)
    assert result.status == "failed"
    assert result.failure.category == "agent_limit"
    # both turns were answered, and both count (the last one's tokens too)
    assert len(model.requests) == 2
    assert (result.usage.requests, result.usage.calls, result.usage.input_tokens) == (2, 2, 20)


def test_the_tool_call_bound_refuses_the_calls_past_it(workspace: Path, tmp_path: Path) -> None:
    three = calls(*[("Read", {"file_path": "app.py"})] * 3)
    model = ScriptedModel({"fix": [three, answer('{"fixed": false, "file": "app.py"}')]})
    opened: list[RecordingToolset] = []
    settings = RuntimeSettings(agents=recording_agents(workspace, opened=opened, read=True))
    result = run(agent_ir(maxToolCalls=2), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    assert len(opened[0].ran) == 2
    last = [m for m in model.requests[1].messages if m.role == "tool"]
    assert last[2].content.startswith("Error: the agent's tool-call budget is used up")
    assert not model.requests[1].tools


def test_every_turn_counts_against_the_runs_call_budget(workspace: Path, tmp_path: Path) -> None:
    model = ScriptedModel({"fix": fix_script()})
    settings = RuntimeSettings(
        max_calls=2, agents=recording_agents(workspace, read=True, write=True)
    )
    result = run(agent_ir(), model, settings, tmp_path)
    assert result.status == "failed"
    assert result.failure.category == "budget_exceeded"
    assert len(model.requests) == 2


def test_a_tool_the_model_was_not_offered_answers_with_an_error(
    workspace: Path, tmp_path: Path
) -> None:
    script = [calls(("Bash", {"command": "rm -rf /"})), answer('{"fixed": false, "file": "-"}')]
    model = ScriptedModel({"fix": script})
    settings = RuntimeSettings(agents=recording_agents(workspace, read=True))
    result = run(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed"
    (tool,) = [m for m in model.requests[1].messages if m.role == "tool"]
    assert tool.content == "Error: There is no tool 'Bash'; the tools are: Read, LS, Glob, Grep."


def test_each_tool_call_is_an_execute_tool_span_under_its_op(
    workspace: Path, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lattice.telemetry import TelemetrySettings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = RuntimeSettings(
        agents=recording_agents(workspace, read=True, write=True),
        telemetry=TelemetrySettings(tracer_provider=provider),
    )
    model = ScriptedModel({"fix": fix_script()})
    assert run(agent_ir(), model, settings, tmp_path).status == "completed"
    spans = exporter.get_finished_spans()
    (op,) = [s for s in spans if s.name == "AGENT fix"]
    tools = sorted(
        (s for s in spans if s.name.startswith("execute_tool")), key=lambda s: s.start_time or 0
    )
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == ["Read", "LS", "Edit"]
    assert all(s.parent is not None and s.parent.span_id == op.context.span_id for s in tools)
    assert [s.attributes["gen_ai.tool.call.id"] for s in tools] == ["call_0", "call_1", "call_0"]
    assert tools[2].attributes["lattice.tool.changes"] == ("app.py",)


def test_secrets_are_masked_in_tool_events_and_for_the_model(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "app.py").write_text("TOKEN = 'sk-live-123456'\n")
    model = ScriptedModel(
        {"fix": [calls(("Read", {"file_path": "app.py"})), answer('{"fixed": false, "file": "x"}')]}
    )
    settings = RuntimeSettings(
        agents=recording_agents(workspace, read=True), secrets_allow=("AGENT_TOKEN",)
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_TOKEN", "sk-live-123456")
        result = run(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed"
    (finished,) = [e for e in result.events if e["type"] == "tool_call_finished"]
    assert "sk-live-123456" not in finished["data"]["result"]
    assert "sk-live-123456" not in (result.run_dir / "events.jsonl").read_text()
    (tool,) = [m for m in model.requests[1].messages if m.role == "tool"]
    assert "TOKEN = '***'" in tool.content  # the model is never offered the value


def _interrupt(request: Any) -> Any:
    raise KeyboardInterrupt  # the run stops here, as Ctrl-C or a crash would stop it


def test_under_patch_only_reads_see_the_agents_own_changes_after_a_resume_too(
    workspace: Path, tmp_path: Path
) -> None:
    """The file is never written; the agent's later Read and Edit of it see its change,
    in the run that made it and in a resumed run that takes the change from the journal."""
    edit = calls(("Edit", {"file_path": "app.py", "old_string": "a - b", "new_string": "a + b"}))
    read = calls(("Read", {"file_path": "app.py"}))
    again = calls(("Edit", {"file_path": "app.py", "old_string": "a + b", "new_string": "b + a"}))
    settings = RuntimeSettings(
        agents=recording_agents(workspace, read=True, write=True, patch_only=True)
    )
    ir = agent_ir(outputSchema=None)
    first = ScriptedModel({"fix": [edit, _interrupt]})
    store = RunStore(tmp_path / "runs")
    with pytest.raises(KeyboardInterrupt):
        Runner(ir, provider=first, settings=settings, store=store).run({})
    (folder,) = (tmp_path / "runs").iterdir()
    model = ScriptedModel({"fix": [read, again, answer("done")]})  # the edit turn is journaled
    result = Runner.resume(folder, provider=model, settings=settings, store=store)
    assert result.status == "completed", result.failure
    assert (workspace / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    read_answer = [m for m in model.requests[1].messages if m.role == "tool"][-1].content
    assert read_answer.endswith("2\t    return a + b")
    record = op_record(folder, "fix")
    first_change, second_change = record["changes"]
    assert not first_change["applied"] and not second_change["applied"]
    assert second_change["before"] == first_change["after"]
    assert "-    return a + b" in (folder / second_change["diff_file"]).read_text()
