"""A branch session from the terminal and from ``lattice resume --answer``, and after
``kill -9``.

``lattice run`` of the shipped branch-session example in a subprocess, against a local
OpenAI-compatible server that answers each request from what it asks (the plan, a reply
quoting the person's message, the summary, the checklist). At a terminal (stdin a pty)
the session is a chat prompt: each line typed is a message. The journal tells what a
resume re-did: a ``request`` line for a request whose answer was already journaled is a
model turn sent again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.llm.fake_server import FakeLLMServer, serve
from tests.agents.killing import journal_lines, redone
from tests.conftest import EXAMPLES
from tests.runs.test_crash import configure, environment

NODE = "branchSession-review"
DOCUMENT = EXAMPLES / "branch-session.json"
INPUTS = EXAMPLES / "branch-session.inputs.json"
MESSAGE = re.compile(r"The person's message:\n(.*?)(?:\n\n|$)", re.DOTALL)
WAIT = 30.0


def answer(body: dict[str, Any]) -> str:
    """What the stand-in model says to each request of the example."""
    messages = body["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    user = "\n".join(m["content"] for m in messages if m["role"] == "user")
    if "has ended" in system:
        return "SUMMARY: " + " / ".join(re.findall(r'"person":"([^"]*)"', user))
    if "interactive session" in system:
        found = MESSAGE.search(user)
        assert found, user
        return f"REPLY to {found.group(1)!r}"
    if "implementation plan" in user:
        return "PLAN: 1. flag 2. tests"
    return "CHECKLIST"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serve(answer, latency=0.2) as fake:
        yield fake


class Terminal:
    """``lattice ARGS`` with a pty as its stdin (so it asks at the terminal): lines are
    typed into it with ``type``; stdout and stderr are read when it ends."""

    def __init__(self, work: Path, config: Path, *args: str) -> None:
        master, slave = os.openpty()
        self.master = master
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lattice.cli.main", *args],
            cwd=work,
            env={**environment(config), "COLUMNS": "200"},
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(slave)

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=WAIT)
        os.close(self.master)
        return self.process.returncode, out.decode(), err.decode()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=WAIT)
        os.close(self.master)


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert process.poll() is None, "the run ended before it got there"
        assert time.monotonic() < deadline, "the run never got there"
        time.sleep(0.01)


def committed(runs: Path, op_id: str, count: int) -> Callable[[], bool]:
    """True once the run under ``runs`` has committed ``op_id`` ``count`` times."""

    def check() -> bool:
        folders = list(runs.glob("*/journal.jsonl")) if runs.is_dir() else []
        if not folders:
            return False
        ops = [
            line
            for line in journal_lines(folders[0].parent)
            if line.get("kind") == "op" and line["op_id"] == op_id
        ]
        return len(ops) >= count

    return check


def run_args(runs: Path) -> list[str]:
    return ["run", str(DOCUMENT), "--inputs", str(INPUTS), "--runs-dir", str(runs)]


def resume(work: Path, config: Path, folder: Path, *answers: str) -> tuple[int, str]:
    args = [arg for text in answers for arg in ("--answer", f"{NODE}={text}")]
    done = subprocess.run(
        [sys.executable, "-m", "lattice.cli.main", "resume", str(folder), *args],
        cwd=work,
        env=environment(config),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    return done.returncode, done.stderr.decode()


def session_of(folder: Path) -> dict[str, Any]:
    final = json.loads((folder / "state_final.json").read_text())
    session: dict[str, Any] = final["vars"][NODE]
    return session


def received(server: FakeLLMServer) -> Counter[str]:
    """The requests the model got, by what they were for."""
    kinds: Counter[str] = Counter()
    for request in server.received:
        kinds[answer(request.body).split(" ", 1)[0].rstrip(":")] += 1
    return kinds


def test_a_session_at_the_terminal_is_a_chat(tmp_path: Path, server: FakeLLMServer) -> None:
    config = configure(tmp_path, server)
    runs = tmp_path / "runs"
    terminal = Terminal(tmp_path, config, *run_args(runs))
    wait_for(committed(runs, f"{NODE}#message", 0), terminal.process)
    for line in ("Which step touches the writer?", "Print sizes too.", "/done"):
        terminal.type(line)
    code, out, err = terminal.finish()
    assert code == 0, err
    assert json.loads(out) == "CHECKLIST"
    # the opening, then each reply, was shown before the next message was asked for
    assert "Branch session: Review the plan together" in err
    assert "REPLY to 'Which step touches the writer?'" in err
    assert "REPLY to 'Print sizes too.'" in err
    assert err.count("your message, /done to end the session") == 3
    (folder,) = runs.iterdir()
    session = session_of(folder)
    assert session["result"] == "SUMMARY: Which step touches the writer? / Print sizes too."
    assert received(server) == {"PLAN": 1, "REPLY": 2, "SUMMARY": 1, "CHECKLIST": 1}


def test_an_empty_line_halts_and_resume_answers_one_message_each(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    config = configure(tmp_path, server)
    runs = tmp_path / "runs"
    terminal = Terminal(tmp_path, config, *run_args(runs))
    terminal.type("")
    code, _, err = terminal.finish()
    assert code == 3, err
    assert f"--answer {NODE}=<text>" in err
    (folder,) = runs.iterdir()
    code, err = resume(tmp_path, config, folder, "First?")
    assert code == 3, err
    assert "REPLY to 'First?'" in err, "the halted run shows the reply as its question"
    code, err = resume(tmp_path, config, folder, "Second?")
    assert code == 3, err
    code, err = resume(tmp_path, config, folder, "/done")
    assert code == 0, err
    assert [t["person"] for t in session_of(folder)["transcript"]] == ["First?", "Second?"]
    assert received(server) == {"PLAN": 1, "REPLY": 2, "SUMMARY": 1, "CHECKLIST": 1}
    assert redone(folder) == ([], [])


def test_kill_9_between_turns_loses_and_resends_nothing(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    config = configure(tmp_path, server)
    runs = tmp_path / "runs"
    terminal = Terminal(tmp_path, config, *run_args(runs))
    terminal.type("Which step touches the writer?")
    # the first turn is journaled: the run now waits at the terminal for the next message
    wait_for(committed(runs, f"{NODE}#turn", 1), terminal.process)
    terminal.kill()
    (folder,) = runs.iterdir()
    code, err = resume(tmp_path, config, folder, "Print sizes too.")
    assert code == 3, err
    code, err = resume(tmp_path, config, folder, "/done")
    assert code == 0, err
    session = session_of(folder)
    assert [t["person"] for t in session["transcript"]] == [
        "Which step touches the writer?",
        "Print sizes too.",
    ]
    assert session["transcript"][0]["assistant"] == "REPLY to 'Which step touches the writer?'"
    # no turn lost, none sent twice
    assert received(server) == {"PLAN": 1, "REPLY": 2, "SUMMARY": 1, "CHECKLIST": 1}
    assert redone(folder) == ([], [])


class HeldReply:
    """The stand-in model, holding its first answer to ``message`` until released (the
    run is killed meanwhile); asked again, it answers at once."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.arrived = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        text = answer(body)
        if text == f"REPLY to {self.message!r}" and not self.arrived.is_set():
            self.arrived.set()
            self.release.wait(WAIT)
        return text


def test_kill_9_during_a_reply_sends_only_that_reply_again(tmp_path: Path) -> None:
    held = HeldReply("Print sizes too.")
    with serve(held) as server:
        try:
            killed_during_the_reply(tmp_path, server, held)
        finally:
            held.release.set()


def killed_during_the_reply(tmp_path: Path, server: FakeLLMServer, held: HeldReply) -> None:
    config = configure(tmp_path, server)
    runs = tmp_path / "runs"
    terminal = Terminal(tmp_path, config, *run_args(runs))
    terminal.type("Which step touches the writer?")
    terminal.type("Print sizes too.")
    # the second message is journaled and the model has its request: kill before it answers
    wait_for(held.arrived.is_set, terminal.process)
    terminal.kill()
    (folder,) = runs.iterdir()
    assert committed(runs, f"{NODE}#message", 2)()
    code, err = resume(tmp_path, config, folder)
    assert code == 3, err  # the reply came, and the session waits for the next message
    assert "REPLY to 'Print sizes too.'" in err
    code, err = resume(tmp_path, config, folder, "/done")
    assert code == 0, err
    assert [t["person"] for t in session_of(folder)["transcript"]] == [
        "Which step touches the writer?",
        "Print sizes too.",
    ]
    # the reply in flight was asked again (its answer was never journaled); nothing else
    assert received(server) == {"PLAN": 1, "REPLY": 3, "SUMMARY": 1, "CHECKLIST": 1}
    assert redone(folder) == ([], [])


def test_with_a_grant_the_replies_use_the_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "export.py").write_text("def export(paths):\n    write_file(paths)\n")
    read = {"$tool_calls": [{"name": "Read", "arguments": {"file_path": "export.py"}}]}
    script = {
        "responses": {
            "prompt-plan": ["PLAN"],
            NODE: [read, "export() calls write_file() once.", "SUMMARY"],
            "prompt-checklist": ["CHECKLIST"],
        }
    }
    (tmp_path / "mock.json").write_text(json.dumps(script))
    (tmp_path / "answers.json").write_text(json.dumps({NODE: ["Where is the writer?", "/done"]}))
    code = main(
        [
            *run_args(tmp_path / "runs"),
            "--mock",
            str(tmp_path / "mock.json"),
            "--answers",
            str(tmp_path / "answers.json"),
            "--workspace",
            str(project),
            "--allow",
            "read",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["output"] == "CHECKLIST"
    session = result["vars"][NODE]
    assert session["transcript"] == [
        {"person": "Where is the writer?", "assistant": "export() calls write_file() once."}
    ]
    assert session["result"] == "SUMMARY"
    (folder,) = (tmp_path / "runs").iterdir()
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    started = {e["node_id"]: e["data"]["tools"] for e in events if e["type"] == "agent_started"}
    assert started[NODE] == ["Read", "LS", "Glob", "Grep"]
    # the prompt steps around it act as the main agent under the grant (docs/agents.md)
    assert started["prompt-plan"] == ["Read", "LS", "Glob", "Grep", "AskUserQuestion"]
    reads = [e["data"] for e in events if e["type"] == "tool_call_finished"]
    assert [(r["tool"], r["is_error"]) for r in reads] == [("Read", False)]
    assert "write_file(paths)" in reads[0]["result"], "the reply read the project's file"
