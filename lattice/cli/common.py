"""What several commands share: lowering with diagnostics, JSON argument files,
``KEY=VALUE`` pairs, live progress, terminal questions and reporting a run's result."""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lattice.cli.main import EXIT_BY_STATUS
from lattice.config import FlagRules, LatticeConfig, with_agent_grants
from lattice.errors import Diagnostic, InputError, Severity
from lattice.events import EventKind
from lattice.ir.models import AskOp
from lattice.lower import lower_document
from lattice.lower.compiler import LoweringResult
from lattice.permissions.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    Choice,
    allow_run_scope,
)
from lattice.runs.redaction import make_redactor
from lattice.runs.view import count_calls, terminal_text
from lattice.runtime.results import RunResult
from lattice.runtime.settings import RuntimeSettings
from lattice.service.providers import ProviderChoice


def config_with_grants(config: LatticeConfig, args: argparse.Namespace) -> LatticeConfig:
    """``config`` with the agent grants of the command's flags (``add_agent_options``)."""
    return with_agent_grants(
        config,
        workspace=args.workspace,
        allow=args.allow,
        mcp_servers=args.allow_mcp,
        patch_only=args.patch_only,
        flags=FlagRules(
            allow=args.allow_rule,
            ask=args.ask_rule,
            deny=args.deny_rule,
            mode=args.permission_mode,
        ),
        claude_settings=not args.no_claude_settings,
        bypass_permissions=args.bypass_permissions,
    )


def note(text: str) -> None:
    """A ``lattice: ...`` line on stderr."""
    print(f"lattice: {text}", file=sys.stderr)


def print_diagnostics(diagnostics: Sequence[Diagnostic], source: str | None) -> None:
    for diagnostic in diagnostics:
        print(diagnostic.format(source), file=sys.stderr)


def lower_for_cli(path: str, config: LatticeConfig | None = None) -> LoweringResult:
    """Lower ``path``, printing its diagnostics. With a config, mcp nodes must name
    servers it declares; without a config file (none declared), a server a node names is
    a warning: a run could not reach it, but it may be configured later."""
    servers = list(config.mcp.servers) if config is not None else None
    unknown_mcp = Severity.ERROR if config is not None and config.source else Severity.WARNING
    result = lower_document(Path(path), mcp_servers=servers, unknown_mcp=unknown_mcp)
    print_diagnostics(result.diagnostics, path)
    return result


def read_json_object(path: str, what: str) -> dict[str, Any]:
    """A JSON object from a file named on the command line; anything else is an InputError."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    except RecursionError:
        raise InputError(f"{what} {path} is nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {path} must hold a JSON object")
    return data


PLACEHOLDER = re.compile(r"\s*(<[^<>\n]+>|…)\s*")
"""A value that is still a placeholder copied from the docs (``<answer>``, ``<text>``) or
from the command ``lattice mock init`` prints (``--input NAME=…``)."""


def parse_pairs(pairs: list[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a dict; a VALUE still in the docs' ``<placeholder>``
    form is refused, naming it (a value really in angle brackets goes in a JSON file)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{what} {pair!r} is not KEY=VALUE")
        if PLACEHOLDER.fullmatch(value):
            raise InputError(
                f"{what} {key.strip()}={value}: {value.strip()} is a placeholder from an "
                f"example, not a value: put the {key.strip()} itself there (a value that "
                "really is in angle brackets goes in a JSON file: --inputs FILE, --answers FILE)"
            )
        out[key.strip()] = value
    return out


def escape(text: str) -> str:
    """``text`` with rich's markup characters escaped (rich is imported on first use)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def terminal_asker(ask: AskOp, read: Callable[[str], str] | None = None) -> Any:
    """Ask an ASK op's question on the terminal, its options numbered from 1; an answer
    that is no option asks again, an empty one halts the run. Returns the chosen label
    (a list of labels for a multi-select question) or the text typed."""
    from rich.console import Console
    from rich.prompt import Prompt

    console = Console(stderr=True)
    console.print(f"\n[bold]{escape(terminal_text(ask.question, indent=''))}[/bold]")
    for number, option in enumerate(ask.options, start=1):
        said = terminal_text(option.description or "", indent="    ")
        extra = f" — {escape(said)}" if said else ""
        label = escape(terminal_text(option.label, indent="    "))
        console.print(f"  [cyan]{number}[/cyan]. {label}{extra}")
    if ask.once:
        hint = "your message, /done to end the session"
    elif not ask.options:
        hint = "your answer"
    elif ask.multi_select:
        hint = "numbers or labels, comma-separated"
    else:
        hint = "number or label"

    def prompt(text: str) -> str:
        return str(Prompt.ask(text, console=console, default="", show_default=False))

    while True:
        typed = (read or prompt)(f"Answer ({hint}, empty to stop)").strip()
        if not typed or not ask.options:
            return typed or None
        answer = option_answer(ask, typed)
        if answer is not None:
            return answer
        numbers = f"1-{len(ask.options)}" if len(ask.options) > 1 else "1"
        console.print(f"[red]{escape(typed)!r} is not an option[/red]: type {numbers} or a label")


def option_answer(ask: AskOp, typed: str) -> str | list[str] | None:
    """The label(s) ``typed`` names: numbers count from 1, labels match whatever their
    case; None when a part of it names no option."""
    labels = [option.label for option in ask.options]
    parts = [part.strip() for part in typed.split(",")] if ask.multi_select else [typed]
    chosen: list[str] = []
    for part in parts:
        if not part:
            continue
        by_label = [label for label in labels if label.lower() == part.lower()]
        if by_label:
            chosen.append(by_label[0])
        elif part.isdigit() and 1 <= int(part) <= len(labels):
            chosen.append(labels[int(part) - 1])
        else:
            return None
    if not chosen:
        return None
    return chosen if ask.multi_select else chosen[0]


class TerminalAsker:
    """``terminal_asker`` for a run whose progress line (set once it exists) is paused
    while the question waits for an answer."""

    def __init__(self) -> None:
        self.progress: Progress | None = None

    def __call__(self, ask: AskOp) -> Any:
        if self.progress is not None:
            self.progress.pause()
        # The event loop's own SIGINT handler only cancels the run's task, which waits
        # for this call: while a question waits, Ctrl-C interrupts the prompt itself.
        in_main = threading.current_thread() is threading.main_thread()
        handler = signal.signal(signal.SIGINT, signal.default_int_handler) if in_main else None
        try:
            return terminal_asker(ask)
        finally:
            if in_main:
                signal.signal(signal.SIGINT, handler)
            if self.progress is not None:
                self.progress.resume()


def show_approval(request: ApprovalRequest) -> str:
    """An approval request as the terminal shows it: the call, why it asks, what it does,
    with every control character written as an escape: a carriage return or an escape
    sequence in the model's command or diff cannot redraw what the person approves."""
    lines = [f"{request.node}: {request.tool} wants to run ({request.id}) - {request.why}"]
    preview = request.preview
    if "diff" in preview:
        lines.append(str(preview["diff"]).rstrip("\n"))
    elif "command" in preview:
        lines.append(f"  $ {preview['command']}")
        lines.append(f"  in {preview['cwd']}")
    elif "server" in preview:
        lines.append(f"  MCP server {preview['server']}, tool {preview['mcp_tool']}")
        lines.append(f"  arguments: {json.dumps(request.arguments, ensure_ascii=False)}")
    else:
        lines.append(f"  arguments: {json.dumps(request.arguments, ensure_ascii=False)}")
    return terminal_text("\n".join(lines), indent="")


def read_key(prompt: str) -> str:
    """One keypress from the terminal (no Enter needed), after ``prompt`` on stderr."""
    import termios
    import tty

    sys.stderr.write(prompt)
    sys.stderr.flush()
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        key = sys.stdin.read(1)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    sys.stderr.write(key + "\n")
    return key


class TerminalApprover:
    """Asks the person at the terminal to approve an agent's tool call, one keypress:
    y (allow once), a (allow for the rest of the agent's run what ``allow_run_scope``
    says: a command's prefix, every edit, the tool), n (deny, then
    a reason), anything else halts the run (answer later with ``lattice resume``)."""

    def __init__(
        self,
        key: Callable[[str], str] | None = None,
        line: Callable[[str], str] | None = None,
    ) -> None:
        self.progress: Progress | None = None
        self.key = key
        self.line = line

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision | None:
        if self.progress is not None:
            self.progress.pause()
        try:
            print(show_approval(request), file=sys.stderr)
            key = self.key or read_key
            scope = allow_run_scope(request.tool, request.arguments)
            pressed = key(
                f"Allow? [y]es once / [a]llow {scope} for the rest of this agent's run / "
                "[n]o / other: stop "
            )
            choice = APPROVALS_BY_KEY.get(pressed.strip().lower()[:1])
            if choice is None:
                return None
            line = self.line or input
            reason = line("Reason (told to the model): ").strip() if choice == "deny" else ""
            return ApprovalDecision(choice, "person", "terminal", reason)
        finally:
            if self.progress is not None:
                self.progress.resume()


APPROVALS_BY_KEY: dict[str, Choice] = {"y": "allow", "a": "allow_run", "n": "deny"}


class Progress:
    """Live progress on stderr (a rich status line) while a run goes on a terminal, with
    the answer of the model call in flight as it streams in.

    A listener that takes ``llm_delta`` events makes the run stream its model answers;
    this one takes them only when it shows them (``wants_deltas``)."""

    TAIL = 96
    """Characters of the streaming answer shown (its end, on one line)."""

    def __init__(self, live: bool) -> None:
        self.started = time.perf_counter()
        self.ops = 0
        self.calls = 0
        self.branches = 0
        self.run_id: str | None = None
        self.status: Any = None
        self.wants_deltas = live
        self.line = ""
        """The status line without the streaming answer."""
        self.streamed = ""
        """The end of the answer streaming in (whitespace folded)."""
        self.streaming_node: str | None = None
        if live:
            from rich.console import Console

            self.status = Console(stderr=True).status("starting…")
            self.status.start()

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        self.run_id = event["run_id"]
        if kind == EventKind.LLM_DELTA:
            if self.status is not None:
                self._stream(event)
            return
        if kind == EventKind.AGENT_TOOL_MISSING:
            data = event["data"]
            note(
                f"warning: agent node {data['node']!r}: {', '.join(data['tools'])} granted, "
                "but no tool of that name is listed (an MCP server without that tool?): "
                "left out of the model's tools"
            )
        elif kind == EventKind.OP_FINISHED:
            self.ops += 1
        elif kind == EventKind.LLM_RESPONSE:
            self.calls += 1
        elif kind == EventKind.LLM_REQUEST:
            self.streamed = ""  # a new attempt: its answer starts over
        elif kind == EventKind.FORK_STARTED:
            self.branches += len(event["data"].get("branches", ()))
        elif kind == EventKind.FOR_EACH_STARTED:
            self.branches += int(event["data"].get("items", 0))
        elif kind in (EventKind.FORK_JOINED, EventKind.FOR_EACH_FINISHED):
            self.branches -= int(event["data"].get("branches", 0))
        if self.status is not None and kind == EventKind.OP_STARTED:
            elapsed = time.perf_counter() - self.started
            branch = f" in branch {event['branch']}" if event.get("branch") else ""
            running = f" · {self.branches} branches" if self.branches else ""
            self.line = (
                f"[bold]{escape(str(event.get('node_id')))}[/bold] ({event['data'].get('kind')})"
                f"{branch} · {self.ops} ops · {self.calls} model calls{running} · {elapsed:.1f}s"
            )
            self.streamed = ""
            self.status.update(self.line)

    def _stream(self, event: dict[str, Any]) -> None:
        node = event.get("node_id")
        if node != self.streaming_node:
            self.streaming_node, self.streamed = node, ""
        text = " ".join((self.streamed + event["data"].get("text", "")).split())
        if event["data"].get("text", "")[-1:].isspace():
            text += " "
        self.streamed = text[-self.TAIL :]
        self.status.update(
            f"{self.line}\n  [dim]{escape(str(node))} ▸ "
            f"{escape(terminal_text(self.streamed, indent=''))}[/dim]"
        )

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()

    def pause(self) -> None:
        """Take the live line off the terminal (while a question waits for an answer)."""
        self.stop()

    def resume(self) -> None:
        if self.status is not None:
            self.status.start()


def report(result: RunResult, progress: Progress, as_json: bool, settings: RuntimeSettings) -> int:
    """Print a run's summary and failure on stderr, its output (or whole result) on
    stdout, masked with the run's own settings; return the exit code of its status."""
    progress.stop()
    elapsed = time.perf_counter() - progress.started
    where = f", run folder {result.run_dir}" if result.run_dir else ""
    print(
        f"lattice: {status_words(result.status, result.dead_end)} in {elapsed:.2f}s: "
        f"{progress.ops} ops, "
        f"{count_calls(result.usage.calls, result.usage.requests)}, "
        f"{result.usage.total_tokens} tokens{where}",
        file=sys.stderr,
    )
    if result.without_tools:
        print(f"lattice: {without_tools_line(result.without_tools)}", file=sys.stderr)
    redact = make_redactor(settings.secret_names())
    if result.failure is not None:
        failure = result.failure
        said = f"lattice: [{failure.category}] at {failure.node_id}: {failure.summary}"
        print(terminal_text(redact(said)), file=sys.stderr)
        cause = _contract_cause(failure.attempts)
        if cause:
            print(redact(f"lattice: {cause}"), file=sys.stderr)
        if failure.recovery_action:
            print(f"lattice: next: {failure.recovery_action}", file=sys.stderr)
    payload = result.to_json() if as_json else result.output
    if as_json or result.status == "completed":
        text = json.dumps(payload, indent=2, ensure_ascii=False, default=str)
        sys.stdout.write(redact(text) + "\n")
    return EXIT_BY_STATUS[result.status]


def status_words(status: str, dead_end: str | None) -> str:
    """A run's status as its summary line says it: a completed run that stopped at a node
    with no way on says so."""
    if status == "completed" and dead_end:
        return f"completed at a dead end (node {dead_end!r} has no way on; no end node reached)"
    return status


def without_tools_line(nodes: list[dict[str, Any]]) -> str:
    """How many nodes ran without the tools Claude Code would give them, and which."""
    listed = ", ".join(f"{n.get('node')} ({n.get('kind')})" for n in nodes[:10])
    more = f" and {len(nodes) - 10} more" if len(nodes) > 10 else ""
    return (
        f"{len(nodes)} node(s) ran without the tools Claude Code would give them, each as "
        f"one model call: {listed}{more}"
    )


def _contract_cause(attempts: list[dict[str, Any]]) -> str | None:
    """What the last answer that broke the contract got wrong, when the op went on
    asking (a repair or an escalation) and then failed for another reason."""
    if len(attempts) < 2:
        return None
    for attempt in reversed(attempts[:-1]):
        violations = attempt.get("violations") or []
        if violations:
            listed = "; ".join(f"{v.get('pointer')}: {v.get('message')}" for v in violations[:3])
            more = f" (and {len(violations) - 3} more)" if len(violations) > 3 else ""
            return terminal_text(  # a pointer names the model's own keys
                f"attempt {attempt.get('number')} broke the contract "
                f"[{attempt.get('error_type')}]: {listed}{more}"
            )
    return None


def provider_choice(args: argparse.Namespace) -> ProviderChoice:
    """The provider options given on the command line."""
    return ProviderChoice(
        name=args.provider,
        mock=args.mock,
        fixtures=getattr(args, "fixtures", None),
        record=getattr(args, "record", False),
    )


def approvals_given(args: argparse.Namespace) -> dict[str, Any]:
    """``--approve``, ``--approve-run``, ``--deny`` (with ``--reason``) and
    ``--approve-all`` as the answers' approvals, each saying it came by ``lattice resume``."""
    door = "lattice resume"
    given: dict[str, Any] = {}
    for choice, ids in (
        ("allow", args.approve),
        ("allow_run", args.approve_run),
        ("deny", args.deny),
    ):
        for request_id in ids:
            given[request_id] = {"decision": choice, "door": door, "reason": args.reason or ""}
    if args.approve_all:
        given["*"] = {"decision": "allow", "door": door}
    elif args.deny_all:
        given["*"] = {"decision": "deny", "door": door, "reason": args.reason or ""}
    if args.reason and not (args.deny or args.deny_all):
        raise InputError("--reason goes with --deny ID or --deny-all: it tells the model why")
    return given
