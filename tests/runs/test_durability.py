"""What a run folder promises besides surviving kill -9 (tests/runs/test_crash.py): an
interrupted run says so and resumes, a changed document is refused, budgets count what
they say, state is bounded, files honour the umask, a torn line is dropped."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.checkpoint import status_of
from lattice.runs.view import list_runs
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.runtime.state import StateLimits
from tests.builders import chain, conn, node, workflow


def three_calls() -> dict[str, Any]:
    return chain(
        node("a", "prompt", prompt="A"),
        node("b", "prompt", prompt="B {{ $vars.a.result }}"),
        node("c", "prompt", prompt="C {{ $vars.b.result }}"),
    )


def journal(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]


def events(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


# -- interrupted runs ----------------------------------------------------------------------------


class Blocking:
    """A provider whose second call never answers (until cancelled)."""

    name = "blocking"

    def __init__(self) -> None:
        self.calls = 0
        self.waiting = asyncio.Event()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        if self.calls == 2:
            self.waiting.set()
            await asyncio.Event().wait()
        return LLMResponse(text=f"answer {self.calls}")


def test_a_cancelled_run_is_interrupted_and_resumes_without_repeating_ops(tmp_path: Path) -> None:
    ir = lower(three_calls())
    provider = Blocking()

    async def cancel_mid_run() -> Path:
        task = asyncio.create_task(Runner(ir, provider=provider, store=RunStore(tmp_path)).arun())
        await provider.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (folder,) = tmp_path.iterdir()
        return folder

    folder = asyncio.run(cancel_mid_run())
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    assert checkpoint["status"] == "interrupted" == status_of(checkpoint)
    assert "interrupted" in list_runs(tmp_path)
    assert [line["op_id"] for line in journal(folder) if line["kind"] == "op"] == ["start", "a"]
    mock = MockProvider({"b": ["B!"], "c": ["C!"]})
    resumed = Runner.resume(folder, provider=mock)
    assert resumed.status == "completed"
    assert resumed.vars["a"]["result"] == "answer 1"
    assert [call.node_id for call in mock.calls] == ["b", "c"]


def test_a_killed_runs_folder_reads_interrupted(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    checkpoint = {
        "status": "running",
        "owner": {"pid": int(dead.stdout), "host": os.uname().nodename},
    }
    assert status_of(checkpoint) == "interrupted"
    assert (
        status_of({**checkpoint, "owner": {"pid": os.getpid(), "host": os.uname().nodename}})
        == "running"
    )


def test_stop_requested_ends_the_run_at_the_next_op_boundary(tmp_path: Path) -> None:
    ir = lower(three_calls())
    runner = Runner(ir, provider=MockProvider(default="ok"), store=RunStore(tmp_path))

    def stop_after_a(event: dict[str, Any]) -> None:
        if event["type"] == "op_finished" and event.get("op_id") == "a":
            runner.request_stop(event["run_id"])

    runner.subscribe(stop_after_a)
    result = runner.run()
    assert result.status == "interrupted"
    assert result.failure is not None and "lattice resume" in result.failure.recovery_action
    assert "b" not in result.vars
    resumed = Runner.resume(result.run_dir, provider=MockProvider(default="ok"))  # type: ignore[arg-type]
    assert resumed.status == "completed" and resumed.vars["c"]["result"] == "ok"


@pytest.mark.usefixtures("default_ctrl_c")
def test_ctrl_c_of_lattice_run_leaves_a_resumable_interrupted_folder(tmp_path: Path) -> None:
    slow = {"responses": {}, "default": "ok"}
    (tmp_path / "mock.json").write_text(json.dumps(slow))
    (tmp_path / "flow.json").write_text(json.dumps(three_calls()))
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_MOCK_RUN, str(tmp_path)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    runs = tmp_path / "runs"
    while time.monotonic() < deadline and not (
        runs.is_dir()
        and any(
            (f / "journal.jsonl").stat().st_size
            for f in runs.iterdir()
            if (f / "journal.jsonl").exists()
        )
    ):
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    (folder,) = runs.iterdir()
    assert "lattice resume" in err and str(folder.name) in err
    assert json.loads((folder / "checkpoint.json").read_text())["status"] == "interrupted"
    assert (
        main(
            ["resume", folder.name, "--runs-dir", str(runs), "--mock", str(tmp_path / "mock.json")]
        )
        == 0
    )


_SLOW_MOCK_RUN = """
import sys
from lattice.cli.main import main
from lattice.llm import mock
original = mock.MockProvider.__init__
def slow(self, *args, **kwargs):
    kwargs["latency"] = 0.3
    original(self, *args, **kwargs)
mock.MockProvider.__init__ = slow
sys.exit(main(["run", "flow.json", "--mock", "mock.json", "--runs-dir", "runs"]))
"""


# -- integrity -----------------------------------------------------------------------------------


def failed_run(tmp_path: Path) -> Path:
    doc = three_calls()
    result = Runner(
        lower(doc), provider=MockProvider({"a": ["A!"]}), store=RunStore(tmp_path), workflow=doc
    ).run()
    assert result.status == "failed" and result.run_dir is not None
    return result.run_dir


def test_resume_refuses_a_folder_whose_execir_changed(tmp_path: Path) -> None:
    folder = failed_run(tmp_path)
    execir = folder / "execir.json"
    execir.write_text(execir.read_text().replace('"B {{', '"EVIL {{'))
    with pytest.raises(LatticeUserError, match=r"execir\.json changed since the run started"):
        Runner.resume(folder, provider=MockProvider(default="x"))
    assert main(["resume", str(folder), "--mock", str(_mock_file(tmp_path))]) == 2


def test_accept_changed_relowers_the_document_when_completed_ops_keep_their_ids(
    tmp_path: Path,
) -> None:
    folder = failed_run(tmp_path)
    document = json.loads((folder / "workflow.json").read_text())
    document["nodes"][2]["data"]["prompt"] = "B, more politely: {{ $vars.a.result }}"
    (folder / "workflow.json").write_text(json.dumps(document))
    with pytest.raises(LatticeUserError, match=r"workflow\.json changed"):
        Runner.resume(folder, provider=MockProvider(default="x"))
    mock = MockProvider(default="x")
    result = Runner.resume(folder, provider=mock, accept_changed=True)
    assert result.status == "completed"
    assert "more politely" in mock.calls[0].messages[-1].content
    assert json.loads((folder / "execir.json").read_text())["ops"]["b"]["prompt"].startswith(
        "B, more"
    )


def test_accept_changed_refuses_a_document_that_drops_a_completed_op(tmp_path: Path) -> None:
    folder = failed_run(tmp_path)
    document = json.loads((folder / "workflow.json").read_text())
    document["nodes"][1]["id"] = "renamed"
    for connection in document["connections"]:
        connection["from"] = "renamed" if connection["from"] == "a" else connection["from"]
        connection["to"] = "renamed" if connection["to"] == "a" else connection["to"]
    document["nodes"][2]["data"]["prompt"] = "B {{ $vars.renamed.result }}"
    (folder / "workflow.json").write_text(json.dumps(document))
    with pytest.raises(LatticeUserError, match="has no op"):
        Runner.resume(folder, provider=MockProvider(default="x"), accept_changed=True)


def test_accept_changed_refuses_a_document_without_the_op_the_run_goes_on_at(
    tmp_path: Path,
) -> None:
    """The failed op (where the resume goes on) renamed: refused with a message, where the
    walk raised a KeyError before."""
    folder = failed_run(tmp_path)
    document = json.loads((folder / "workflow.json").read_text())
    document["nodes"][2]["id"] = "b2"
    for connection in document["connections"]:
        connection["from"] = "b2" if connection["from"] == "b" else connection["from"]
        connection["to"] = "b2" if connection["to"] == "b" else connection["to"]
    (folder / "workflow.json").write_text(json.dumps(document).replace("$vars.b.", "$vars.b2."))
    with pytest.raises(LatticeUserError, match=r"has no op\(s\) b\b.*goes on at"):
        Runner.resume(folder, provider=MockProvider(default="x"), accept_changed=True)


def test_resume_refuses_an_edited_ir_that_reads_a_secret_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An END op's output {{ $secrets.TOK }} in an edited execir.json made the secret the
    # run's output; lowering never puts a secret outside an HTTP call.
    monkeypatch.setenv("TOK", "sk-SECRET")
    folder = failed_run(tmp_path)
    (folder / "workflow.json").unlink()
    ir = json.loads((folder / "execir.json").read_text())
    ir["ops"]["end"]["output"] = "{{ $secrets.TOK }}"
    (folder / "execir.json").write_text(json.dumps(ir))
    args = ["resume", str(folder), "--accept-changed", "--mock", str(_mock_file(tmp_path))]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "sk-SECRET" not in out + err
    assert "ops['end'].output: $secrets.TOK: a secret may be read only in" in err


def _mock_file(tmp_path: Path) -> Path:
    path = tmp_path / "mock.json"
    path.write_text(json.dumps({"responses": {}, "default": "x"}))
    return path


# -- torn lines ----------------------------------------------------------------------------------


def test_a_torn_last_line_is_dropped_and_sequence_numbers_go_on(tmp_path: Path) -> None:
    folder = failed_run(tmp_path)
    last_seq = events(folder)[-1]["seq"]
    with open(folder / "events.jsonl", "a") as handle:
        handle.write('{"seq": 999, "type": "op_sta')
    with open(folder / "journal.jsonl", "a") as handle:
        handle.write('{"kind": "op", "op_id": "b", "chang')
    result = Runner.resume(folder, provider=MockProvider(default="x"))
    assert result.status == "completed"
    seqs = [e["seq"] for e in events(folder)]
    assert seqs == sorted(set(seqs)) and 999 not in seqs
    resumed = next(e for e in events(folder) if e["type"] == "run_resumed")
    assert resumed["seq"] == last_seq + 1
    assert resumed["data"]["segment"] == 2
    assert resumed["data"]["dropped_torn_lines"] == ["events.jsonl", "journal.jsonl"]


def test_segments_count_on_when_the_first_runs_events_were_lost(tmp_path: Path) -> None:
    """A run killed after its checkpoint but before its ``run_started`` line reached
    ``events.jsonl`` was still segment 1: its resumes are 2, then 3."""
    folder = failed_run(tmp_path)
    (folder / "events.jsonl").write_text("")
    assert Runner.resume(folder, provider=MockProvider({})).status == "failed"
    Runner.resume(folder, provider=MockProvider(default="x"))
    segments = [e["data"]["segment"] for e in events(folder) if e["type"] == "run_resumed"]
    assert segments == [2, 3]


# -- budgets -------------------------------------------------------------------------------------


class Failing:
    """Fails every call with the given error types in turn (all retryable)."""

    name = "failing"

    def __init__(self, *error_types: str) -> None:
        self.error_types = error_types
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        kind = self.error_types[self.calls % len(self.error_types)]
        self.calls += 1
        raise LatticeRunError(f"{kind} #{self.calls}", error_type=kind)


async def _no_sleep(seconds: float) -> None:
    return None


def test_retries_are_counted_per_call_not_per_error_type() -> None:
    provider = Failing("rate_limit_error", "provider_error", "timeout_error")
    ir = lower(chain(node("a", "prompt", prompt="A")))
    result = Runner(
        ir, provider=provider, store=RunStore(None), settings=RuntimeSettings(sleep=_no_sleep)
    ).run()
    assert result.status == "failed"
    assert provider.calls == 4  # the first request and 3 retries, whatever the mix


def test_every_request_sent_counts_toward_max_calls() -> None:
    provider = Failing("provider_error")
    ir = lower(three_calls())
    settings = RuntimeSettings(sleep=_no_sleep, max_calls=2)
    result = Runner(ir, provider=provider, store=RunStore(None), settings=settings).run()
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "budget_exceeded"
    assert provider.calls == 2
    assert result.usage.requests == 2 and result.usage.calls == 0
    assert "--max-calls" in result.failure.summary


def test_a_growing_value_stops_at_the_state_limit(tmp_path: Path) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("seed", "variableStore", operation="set", name="text", value="ab"),
            node("double", "dataTransform", expression="join('', [vars.text, vars.text])"),
            node(
                "store", "variableStore", operation="set", name="text", value="$vars.double.result"
            ),
            node(
                "enough",
                "ifElse",
                evaluationTarget="$vars.text",
                branches=[
                    {"label": "long", "condition": "jmespath:length(@) > `100000000`"},
                    {"label": "more", "condition": "", "isDefault": True},
                ],
            ),
            node("end", "end"),
        ],
        [
            conn("start", "seed"),
            conn("seed", "double"),
            conn("double", "store"),
            conn("store", "enough"),
            conn("enough", "end", "branch-0"),
            conn("enough", "double", "branch-1"),
        ],
    )
    settings = RuntimeSettings(
        state_limits=StateLimits(max_state_bytes=100_000, max_value_bytes=60_000)
    )
    result = Runner(lower(doc), store=RunStore(tmp_path), settings=settings).run()
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "state_limit"
    assert result.run_dir is not None
    size = sum(p.stat().st_size for p in result.run_dir.rglob("*") if p.is_file())
    assert size < 2_000_000


def test_the_config_sets_the_state_limits_and_retries(tmp_path: Path) -> None:
    from lattice.config import load_config
    from lattice.runtime.settings import settings_from_config

    path = tmp_path / "lattice.toml"
    path.write_text(
        "[runtime]\nmax_state_bytes = 1000\nmax_value_bytes = 500\nmax_retries = 7\n[runs]\ndurability = 'os'\n"
    )
    config = load_config(path)
    settings = settings_from_config(config)
    assert settings.state_limits == StateLimits(max_state_bytes=1000, max_value_bytes=500)
    assert settings.retry.max_retries == 7
    assert config.runs.durability == "os"


# -- files ---------------------------------------------------------------------------------------


def test_run_files_honour_the_umask(tmp_path: Path) -> None:
    result = Runner(
        lower(three_calls()), provider=MockProvider(default="x"), store=RunStore(tmp_path)
    ).run()
    assert result.run_dir is not None
    modes = {
        p.name: stat.S_IMODE(p.stat().st_mode) for p in result.run_dir.rglob("*") if p.is_file()
    }
    mask = os.umask(0)
    os.umask(mask)

    assert {"events.jsonl", "journal.jsonl", "checkpoint.json", "state_final.json"} <= set(modes)
    assert set(modes.values()) == {0o666 & ~mask}


@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_both_durability_levels_resume_the_same(tmp_path: Path, durability: str) -> None:
    doc = three_calls()
    store = RunStore(tmp_path, durability=durability)  # type: ignore[arg-type]
    failed = Runner(lower(doc), provider=MockProvider({"a": ["A!"]}), store=store).run()
    assert failed.status == "failed" and failed.run_dir is not None
    resumed = Runner.resume(failed.run_dir, provider=MockProvider(default="x"), store=store)
    assert resumed.status == "completed" and resumed.vars["a"]["result"] == "A!"


def test_resume_takes_a_run_id_and_explains_a_wrong_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = failed_run(tmp_path / "runs")
    mock = str(_mock_file(tmp_path))
    assert main(["resume", "nope", "--runs-dir", str(tmp_path / "runs"), "--mock", mock]) == 2
    assert "no run folder nope" in capsys.readouterr().err
    (tmp_path / "some.json").write_text("{}")
    assert main(["resume", str(tmp_path / "some.json"), "--mock", mock]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert main(["resume", folder.name, "--runs-dir", str(tmp_path / "runs"), "--mock", mock]) == 0


def test_resume_goes_on_after_a_scripted_failure(tmp_path: Path) -> None:
    script = {
        "a": ["A!"],
        "b": [{"$error": "api_key_error", "message": "bad key"}, "B!"],
        "c": ["C!"],
    }
    failed = Runner(
        lower(three_calls()), provider=MockProvider(script), store=RunStore(tmp_path)
    ).run()
    assert failed.status == "failed" and failed.failure is not None
    assert failed.failure.category == "api_key_error"
    resumed = Runner.resume(failed.run_dir, provider=MockProvider(script))  # type: ignore[arg-type]
    assert resumed.status == "completed", resumed.failure
    assert resumed.vars["b"]["result"] == "B!" and resumed.vars["c"]["result"] == "C!"


def test_a_resume_with_an_edited_script_asks_it_afresh_for_the_failed_op(tmp_path: Path) -> None:
    """The failed op consumed the old script's item; the edited script's list starts over
    for it (the user replaced the failure), while committed ops are not asked again."""
    script: dict[str, list[Any]] = {
        "a": ["A!"],
        "b": [{"$error": "invalid_request", "message": "refused"}],
        "c": ["C!"],
    }
    failed = Runner(
        lower(three_calls()), provider=MockProvider(script), store=RunStore(tmp_path)
    ).run()
    assert failed.status == "failed" and failed.run_dir is not None
    again = Runner.resume(failed.run_dir, provider=MockProvider(script))
    assert again.status == "failed" and again.failure is not None
    assert again.failure.category == "mock_exhausted"  # the same script: it went on
    fixed = {**script, "b": ["B!"]}
    resumed = Runner.resume(failed.run_dir, provider=MockProvider(fixed))
    assert resumed.status == "completed", resumed.failure
    assert resumed.vars["a"]["result"] == "A!" and resumed.vars["b"]["result"] == "B!"
    assert resumed.vars["c"]["result"] == "C!"


def test_a_bad_line_inside_the_journal_is_refused_and_nothing_is_cut(tmp_path: Path) -> None:
    """A crash tears only the last line: a bad line with committed lines after it is
    someone's edit, and cutting there would throw those ops away."""
    result = Runner(
        lower(three_calls()), provider=MockProvider(default="x"), store=RunStore(tmp_path)
    ).run()
    assert result.run_dir is not None
    journal = result.run_dir / "journal.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) >= 3
    lines[1] = "{ not json"
    stop = json.loads(lines[-1])  # the final checkpoint's copy
    checkpoint = json.loads(stop["files"]["checkpoint.json"])
    checkpoint["status"] = "failed"  # as if it had stopped there
    stop["files"]["checkpoint.json"] = json.dumps(checkpoint)
    lines[-1] = json.dumps(stop)
    journal.write_text("\n".join(lines) + "\n")
    (result.run_dir / "checkpoint.json").write_text(json.dumps(checkpoint))
    size = journal.stat().st_size
    with pytest.raises(LatticeUserError, match=r"journal.jsonl:2: not a JSON line"):
        Runner.resume(result.run_dir, provider=MockProvider(default="x"), accept_changed=True)
    assert journal.stat().st_size == size


def test_queued_answers_come_from_the_last_ask_in_journal_order(tmp_path: Path) -> None:
    """A branch's ASK committed before a later ASK of the main walk: the queue left is the
    later one's (main-walk lines were read first, then branch lines, and the older
    branch queue won, handing out an answer already used)."""
    from lattice.runs.journal import JOURNAL, read_journal
    from lattice.runtime.resume import journal_position

    lines = [
        {"kind": "op", "op_seq": 2, "op_id": "ask_a", "branch": "0001.1", "answers": {"b": "x"}},
        {"kind": "op", "op_seq": 3, "op_id": "ask_b", "answers": {}, "next": None},
    ]
    (tmp_path / JOURNAL).write_text("".join(json.dumps(line) + "\n" for line in lines))
    journal = read_journal(tmp_path)
    assert journal is not None and journal.answers == {}
    _, answers = journal_position(lower(three_calls()), journal, {"initial_answers": {"a": 1}})
    assert answers == {}


# -- usage across a crash ------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for kill -9: nothing in the run catches it, so nothing more is written."""


SCHEMA_X = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def two_branches() -> dict[str, Any]:
    """start → b1 (prompt) and b2 (a prompt with a schema) → merge → end."""
    return workflow(
        [
            node("start", "start"),
            node("b1", "prompt", prompt="B1"),
            node("b2", "prompt", prompt="B2", outputSchema=SCHEMA_X),
            node("merge", "prompt", prompt="M {{ $vars.b1.result }} {{ $vars.b2.result.x }}"),
            node("end", "end"),
        ],
        [
            conn("start", "b1"),
            conn("start", "b2"),
            conn("b1", "merge"),
            conn("b2", "merge"),
            conn("merge", "end"),
        ],
    )


class Staged:
    """b2's first answer breaks its schema; b1 answers only after it, and b2's repair is
    sent only once b1's op has finished (so b1's journal line counts b2's first answer).
    With ``kill``, the repair request kills the process instead of being answered."""

    name = "staged"

    def __init__(self, *, kill: bool = False, staged: bool = True) -> None:
        self.kill = kill
        self.staged = staged
        self.sent: list[str] = []
        self.b2_answered = asyncio.Event()
        self.b1_finished = asyncio.Event()

    def listen(self, event: dict[str, Any]) -> None:
        if event["type"] == "op_finished" and event.get("op_id") == "b1":
            self.b1_finished.set()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        node_id = str(request.node_id)
        repair = "broke the contract" in request.messages[-1].content
        request.sending()  # as a live provider says, right before it sends
        self.sent.append(node_id)
        if self.staged and node_id == "b1":
            await self.b2_answered.wait()
        if self.staged and repair:
            await self.b1_finished.wait()
            if self.kill:
                raise Killed
        if node_id == "b2" and not repair:
            self.b2_answered.set()
            return LLMResponse(text="not json", usage=TokenUsage(7, 2), model="m")
        text = '{"x": 1}' if node_id == "b2" else node_id
        return LLMResponse(text=text, usage=TokenUsage(5, len(text)), model="m")


def test_usage_after_a_resume_counts_a_siblings_recorded_answer_once(tmp_path: Path) -> None:
    ir = lower(two_branches())
    reference_provider = Staged()
    reference_runner = Runner(ir, provider=reference_provider, store=RunStore(tmp_path / "ref"))
    reference_runner.subscribe(reference_provider.listen)
    reference = reference_runner.run()
    assert reference.status == "completed", reference.failure
    killed = Staged(kill=True)
    runner = Runner(ir, provider=killed, store=RunStore(tmp_path / "runs"))
    runner.subscribe(killed.listen)
    with pytest.raises(Killed):
        runner.run()
    (folder,) = (tmp_path / "runs").iterdir()
    committed = [line["op_id"] for line in journal(folder) if line["kind"] == "op"]
    assert committed == ["start", "b1"]  # b2 was mid-op, its first answer recorded
    again = Staged(staged=False)
    resumed = Runner.resume(folder, provider=again)
    assert resumed.status == "completed", resumed.failure
    assert again.sent == ["b2", "merge"]  # the recorded answer was not asked again
    expected = reference.usage.to_json()
    expected["requests"] = len(killed.sent) + len(again.sent)  # every request sent
    assert resumed.usage.to_json() == expected


class KilledAtRepair:
    """A mock script's provider whose b2 answers only once b1's op has finished, and
    whose b2 repair request kills the process (``Killed``)."""

    name = "mock"

    def __init__(self, inner: MockProvider) -> None:
        self.inner = inner
        self.b1_finished = asyncio.Event()
        self.checkpoint = inner.checkpoint  # a CheckpointedProvider, as the mock is
        self.restore = inner.restore

    def listen(self, event: dict[str, Any]) -> None:
        if event["type"] == "op_finished" and event.get("op_id") == "b1":
            self.b1_finished.set()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.node_id == "b2":
            if "broke the contract" in request.messages[-1].content:
                raise Killed
            await self.b1_finished.wait()
        return await self.inner.complete(request)


def test_an_edited_script_keeps_the_cursor_of_answers_a_branch_replays(tmp_path: Path) -> None:
    """Killed while b2 (a branch) had an answer recorded after the last committed op, the
    run resumes with an edited script: b2's answer is replayed, so the script's cursor is
    not taken back before it (its repair gets the next item, not the first again)."""
    script = {"b1": ["one"], "b2": ["not json", '{"x": 1}'], "merge": ["M"]}
    killed = KilledAtRepair(MockProvider(script))
    runner = Runner(lower(two_branches()), provider=killed, store=RunStore(tmp_path))
    runner.subscribe(killed.listen)
    with pytest.raises(Killed):
        runner.run()
    (folder,) = tmp_path.iterdir()
    kinds = [(line["kind"], line.get("op_id")) for line in journal(folder)]
    assert kinds.index(("op", "b1")) < kinds.index(("answer", "b2"))
    edited = MockProvider({**script, "merge": ["M, edited"]})
    resumed = Runner.resume(folder, provider=edited)
    assert resumed.status == "completed", resumed.failure
    assert resumed.vars["b2"]["result"] == {"x": 1}
    assert [call.node_id for call in edited.calls] == ["b2", "merge"]  # the repair, merge


def test_usage_after_a_resume_counts_a_halted_branchs_answer(tmp_path: Path) -> None:
    """A branch op that halted (the model asked for missing information) asks again
    when resumed with the answer: its first answer is spent, not one to replay."""
    doc = two_branches()
    ask = {"error": "missing_information", "details": "Which one?"}
    script = {"b1": ["one"], "b2": [ask, {"x": 2}], "merge": ["M"]}
    first = MockProvider(script)
    halted = Runner(lower(doc), provider=first, store=RunStore(tmp_path)).run()
    assert halted.status == "halted" and halted.run_dir is not None
    resumed = Runner.resume(
        halted.run_dir, provider=MockProvider(script), answers={"b2": "the first"}
    )
    assert resumed.status == "completed"
    assert resumed.usage.requests == len(first.calls) + 2 == 4  # b1, b2; then b2 again, merge
    assert resumed.usage.calls == 4


def test_max_calls_counts_the_requests_a_killed_run_had_sent(tmp_path: Path) -> None:
    failing = Failing("provider_error")
    retries = 0

    async def killed_at_the_second_retry(seconds: float) -> None:
        nonlocal retries
        retries += 1
        if retries == 2:
            raise Killed  # after two failed requests

    ir = lower(three_calls())
    first = RuntimeSettings(sleep=killed_at_the_second_retry, max_calls=3)
    with pytest.raises(Killed):
        Runner(ir, provider=failing, store=RunStore(tmp_path), settings=first).run()
    assert failing.calls == 2
    (folder,) = tmp_path.iterdir()
    answering = MockProvider(default="ok")
    resumed = Runner.resume(
        folder, provider=answering, settings=RuntimeSettings(sleep=_no_sleep, max_calls=3)
    )
    assert resumed.status == "failed" and resumed.failure is not None
    assert resumed.failure.category == "budget_exceeded"
    assert failing.calls + len(answering.calls) == 3
    assert resumed.usage.requests == 3


# -- a crash before the first sync ---------------------------------------------------------------


def never_synced(tmp_path: Path) -> Path:
    """A folder as a power cut before a run's first sync may leave it: its starting files,
    an empty journal and an empty checkpoint.json."""
    folder = failed_run(tmp_path / "runs")
    kept = {"workflow.json", "execir.json", "input.json", "state_initial.json"}
    for path in folder.rglob("*"):
        if path.is_file() and path.name not in kept:
            path.unlink()
    (folder / "journal.jsonl").write_text("")
    (folder / "checkpoint.json").write_text("")
    return folder


def test_a_checkpoint_lost_before_the_first_sync_is_rebuilt_by_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = never_synced(tmp_path)
    assert main(["resume", str(folder), "--mock", str(_mock_file(tmp_path))]) == 0, (
        capsys.readouterr().err
    )
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    assert checkpoint["status"] == "completed" and checkpoint["run_id"] == folder.name
    final = json.loads((folder / "state_final.json").read_text())
    assert final["vars"]["c"]["result"] == "x"


def test_a_run_that_never_started_says_so_instead_of_a_read_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = never_synced(tmp_path)
    (folder / "state_initial.json").write_text('{"in": {}, "va')  # torn too
    assert main(["resume", str(folder), "--mock", str(_mock_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert f"run {folder.name} never started" in err and "nothing was recorded" in err
    assert "cannot read" not in err and "Traceback" not in err


def test_a_journal_written_before_request_lines_still_resumes(tmp_path: Path) -> None:
    failed = Runner(
        lower(three_calls()), provider=MockProvider({"a": ["A!"]}), store=RunStore(tmp_path)
    ).run()
    assert failed.status == "failed" and failed.run_dir is not None
    path = failed.run_dir / "journal.jsonl"
    older = [line for line in journal(failed.run_dir) if line["kind"] != "request"]
    for line in older:
        line.pop("model_class", None)
    older.append({"kind": "a kind from a later version"})
    path.write_text("".join(json.dumps(line) + "\n" for line in older))
    resumed = Runner.resume(failed.run_dir, provider=MockProvider(default="x"))
    assert resumed.status == "completed", resumed.failure
    assert resumed.vars["a"]["result"] == "A!"
    assert resumed.usage.calls == 3


class RefusedOnce:
    """Refuses its first call before sending it, as a batch's budget gate does (the row
    stops ``interrupted``, to go on in a later batch), then answers."""

    name = "refused-once"

    def __init__(self) -> None:
        self.refused = False
        self.sent: list[str] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        from lattice.runtime.context import Interrupted

        if not self.refused:
            self.refused = True
            raise Interrupted("the batch's budget is spent")
        self.sent.append(str(request.node_id))
        return LLMResponse(text="ok")


def test_a_call_refused_before_it_was_sent_costs_no_request_on_resume(tmp_path: Path) -> None:
    ir = lower(chain(node("a", "prompt", prompt="A")))
    settings = RuntimeSettings(max_calls=1)
    provider = RefusedOnce()
    stopped = Runner(ir, provider=provider, store=RunStore(tmp_path), settings=settings).run()
    assert stopped.status == "interrupted" and stopped.run_dir is not None
    resumed = Runner.resume(stopped.run_dir, provider=provider, settings=settings)
    assert resumed.status == "completed", resumed.failure
    assert provider.sent == ["a"] and resumed.usage.requests == 1
