"""``lattice run``, ``lattice resume`` and ``lattice runs``: running workflows from the shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattice.errors import InputError, LatticeUserError

if TYPE_CHECKING:
    from lattice.config import LatticeConfig
    from lattice.ir.models import AskOp, ExecIR
    from lattice.llm.base import LLMProvider
    from lattice.runtime.results import RunResult
    from lattice.runtime.settings import RuntimeSettings


def _read_json_object(path: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{what} {path} must hold a JSON object")
    return data


def _coerce(raw: str, schema: Any) -> Any:
    """A ``--input`` value: kept as text for string properties, else read as JSON when it parses."""
    if isinstance(schema, dict) and schema.get("type") == "string":
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def parse_pairs(pairs: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{what} {pair!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


def collect_inputs(args: argparse.Namespace, ir: ExecIR) -> dict[str, Any]:
    inputs: dict[str, Any] = _read_json_object(args.inputs, "inputs file") if args.inputs else {}
    properties = (ir.inputs_schema or {}).get("properties") or {}
    for key, raw in parse_pairs(args.input, "--input").items():
        inputs[key] = _coerce(raw, properties.get(key))
    return inputs


def _check_mock_covers(ir: ExecIR, provider: LLMProvider) -> None:
    covers = getattr(provider, "covers", None)
    if not callable(covers):
        return
    from lattice.ir.models import LLMWriteOp

    missing = sorted(
        {
            op.source_node
            for op in ir.ops.values()
            if isinstance(op, LLMWriteOp) and not covers(op.source_node)
        }
    )
    if missing:
        raise InputError(
            "the mock script has no responses (and no default) for LLM node(s): "
            + ", ".join(missing)
        )


def _terminal_asker(ask: AskOp) -> Any:
    from rich.console import Console
    from rich.prompt import Prompt

    console = Console(stderr=True)
    console.print(f"\n[bold]{ask.question}[/bold]")
    for i, option in enumerate(ask.options):
        extra = f" — {option.description}" if option.description else ""
        console.print(f"  [cyan]{i}[/cyan]. {option.label}{extra}")
    hint = "number or label" if ask.options else "your answer"
    answer = Prompt.ask(
        f"Answer ({hint}, empty to stop)", console=console, default="", show_default=False
    )
    return answer or None


class _Progress:
    """Live progress on stderr (a rich status line) while a run goes on a terminal."""

    def __init__(self, live: bool) -> None:
        self.started = time.perf_counter()
        self.ops = 0
        self.calls = 0
        self.status: Any = None
        if live:
            from rich.console import Console

            self.status = Console(stderr=True).status("starting…")
            self.status.start()

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "op_finished":
            self.ops += 1
        elif kind == "llm_response":
            self.calls += 1
        if self.status is not None and kind == "op_started":
            elapsed = time.perf_counter() - self.started
            self.status.update(
                f"[bold]{event.get('node_id')}[/bold] ({event['data'].get('kind')}) · "
                f"{self.ops} ops · {self.calls} model calls · {elapsed:.1f}s"
            )

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


def secret_redactor() -> Any:
    """Masks provider API keys, allowed secrets and the variables MCP servers' ``env`` passes
    on, per the default config (for ``lattice export``, which runs nothing); a command that
    runs masks with its own settings."""
    from lattice.config import load_config
    from lattice.runtime.runner import make_redactor
    from lattice.runtime.settings import settings_from_config

    try:
        names = settings_from_config(load_config()).secret_names()
    except LatticeUserError:
        names = ()
    return make_redactor(names)


def _report(
    result: RunResult, progress: _Progress, as_json: bool, settings: RuntimeSettings
) -> int:
    progress.stop()
    elapsed = time.perf_counter() - progress.started
    where = f", run folder {result.run_dir}" if result.run_dir else ""
    print(
        f"lattice: {result.status} in {elapsed:.2f}s: {progress.ops} ops, "
        f"{result.usage.calls} model calls, {result.usage.total_tokens} tokens{where}",
        file=sys.stderr,
    )
    from lattice.runtime.runner import make_redactor

    redact = make_redactor(settings.secret_names())
    if result.failure is not None:
        failure = result.failure
        print(
            redact(f"lattice: [{failure.category}] at {failure.node_id}: {failure.summary}"),
            file=sys.stderr,
        )
        if failure.recovery_action:
            print(f"lattice: next: {failure.recovery_action}", file=sys.stderr)
    payload = result.to_json() if as_json else result.output
    if as_json:
        payload = json.loads(redact(json.dumps(payload, ensure_ascii=False, default=str)))
    if as_json or result.status == "completed":
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    from lattice.cli import EXIT_BY_STATUS

    return EXIT_BY_STATUS[result.status]


def _provider(
    args: argparse.Namespace, config: LatticeConfig, meta: Mapping[str, Any] | None = None
) -> tuple[LLMProvider, dict[str, Any]]:
    """The run's provider; on resume, the original run's choice unless the command names one."""
    from lattice.llm.factory import make_provider

    name, mock = args.provider, args.mock
    fixtures, record = getattr(args, "fixtures", None), getattr(args, "record", False)
    if name is None and mock is None and fixtures is None and meta:
        name, mock, fixtures = meta.get("provider_arg"), meta.get("mock"), meta.get("fixtures")
        record = bool(meta.get("record"))
    provider = make_provider(name, mock=mock, fixtures=fixtures, record=record, config=config)
    saved = {
        "provider_arg": name,
        "mock": str(Path(mock).resolve()) if mock else None,
        "fixtures": str(Path(fixtures).resolve()) if fixtures else None,
        "record": record,
    }
    return provider, saved


def repo_root(path: str | None) -> Path | None:
    """The ``--repo`` directory, resolved; a missing or non-directory path is a user error."""
    if not path:
        return None
    root = Path(path).resolve()
    if not root.is_dir():
        raise InputError(f"--repo {path}: not a directory")
    return root


def cmd_run(args: argparse.Namespace) -> int:
    from lattice.cli import _lower_for_cli
    from lattice.config import load_config
    from lattice.document.loader import read_json_file
    from lattice.runtime import RunLimits, Runner, RunStore
    from lattice.runtime.settings import settings_from_config

    config = load_config(args.config)
    result = _lower_for_cli(args.workflow, config)
    if result.ir is None:
        from lattice.cli import EXIT_USAGE

        return EXIT_USAGE
    ir = result.ir
    inputs = collect_inputs(args, ir)
    answers = _read_json_object(args.answers, "answers file") if args.answers else {}
    provider, meta = _provider(args, config)
    _check_mock_covers(ir, provider)
    settings = settings_from_config(
        config,
        max_calls=args.max_calls,
        max_tokens_total=args.max_tokens_total,
        repo_root=repo_root(args.repo),
    )
    interactive = not args.answers and sys.stdin.isatty()
    runner = Runner(
        ir,
        provider=provider,
        store=RunStore(None if args.no_record else Path(args.runs_dir)),
        limits=RunLimits(
            max_steps=args.max_steps or config.runtime.max_steps,
            max_visits=args.max_visits or config.runtime.max_visits,
        ),
        answers=answers,
        ask_human=_terminal_asker if interactive else None,
        workflow=read_json_file(Path(args.workflow)),
        meta={
            **meta,
            "config": args.config,
            "max_calls": args.max_calls,
            "max_tokens_total": args.max_tokens_total,
            "repo": str(Path(args.repo).resolve()) if args.repo else None,
        },
        settings=settings,
    )
    runner.validate_inputs(inputs)
    if args.dry_run:
        return _dry_run(runner, inputs)
    progress = _Progress(live=sys.stderr.isatty() and not args.json)
    runner.subscribe(progress)
    try:
        run = runner.run(inputs)
    finally:
        progress.stop()
    return _report(run, progress, args.json, settings)


def _dry_run(runner: Any, inputs: dict[str, Any]) -> int:
    """Run with persistence off, printing ``<hash>  <node>  <preview>`` per prompt."""
    from lattice.llm.mock import MockProvider
    from lattice.runtime import RunStore

    if not isinstance(runner.provider, MockProvider):
        raise InputError(
            "--dry-run needs --mock FILE: it shows what a run would send without calling a model"
        )
    runner.store = RunStore(None)
    lines: list[str] = []

    def collect(event: dict[str, Any]) -> None:
        if event["type"] == "llm_request":
            data = event["data"]
            lines.append(
                f"{data['prompt_hash']}  {event.get('node_id')}  [{data['model_class']}]  {data.get('prompt_preview', '')}"
            )

    runner.subscribe(collect)
    result = runner.run(inputs)
    sys.stdout.write("\n".join(lines) + ("\n" if lines else ""))
    print(f"lattice: dry run {result.status}: {len(lines)} prompt(s)", file=sys.stderr)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from lattice.runtime import Runner
    from lattice.runtime.runner import read_run_json

    folder = Path(args.run_dir)
    checkpoint = read_run_json(folder, "checkpoint.json")
    answers: dict[str, Any] = dict(parse_pairs(args.answer, "--answer"))
    from lattice.config import load_config
    from lattice.runtime.settings import settings_from_config

    meta = checkpoint.get("meta") or {}
    config = load_config(args.config or meta.get("config"))
    provider, _ = _provider(args, config, meta)
    progress = _Progress(live=sys.stderr.isatty() and not args.json)
    interactive = sys.stdin.isatty() and not args.answer
    settings = settings_from_config(
        config,
        max_calls=meta.get("max_calls"),
        max_tokens_total=meta.get("max_tokens_total"),
        repo_root=repo_root(args.repo or meta.get("repo")),
    )
    result = Runner.resume(
        folder,
        answers=answers,
        provider=provider,
        settings=settings,
        ask_human=_terminal_asker if interactive else None,
        on_event=progress,
    )
    return _report(result, progress, args.json, settings)


def cmd_runs(args: argparse.Namespace) -> int:
    from lattice.runs_view import list_runs, show_run

    if args.action == "show":
        if not args.run_dir:
            raise LatticeUserError("lattice runs show RUN_DIR")
        sys.stdout.write(show_run(Path(args.run_dir)))
    else:
        sys.stdout.write(list_runs(Path(args.runs_dir)))
    return 0


def add_provider_options(p: argparse.ArgumentParser) -> None:
    """--provider, --mock, --fixtures, --record, --config and the model-call budgets
    (lattice run, lattice plan)."""
    p.add_argument(
        "--provider",
        help="openai, anthropic, mock, fixture or disabled (default: config, else disabled)",
    )
    p.add_argument("--mock", metavar="FILE", help="mock script (implies --provider mock)")
    p.add_argument("--fixtures", metavar="FILE", help="replay recorded completions (JSONL)")
    p.add_argument(
        "--record",
        action="store_true",
        help="with --fixtures: record the completions of the live --provider (or --mock)",
    )
    p.add_argument(
        "--config", metavar="FILE", help="lattice.toml (default: $LATTICE_CONFIG, ./lattice.toml)"
    )
    p.add_argument(
        "--max-calls", type=int, metavar="N", help="model calls per run, repairs included"
    )
    p.add_argument(
        "--max-tokens-total", type=int, metavar="N", help="tokens per run, repairs included"
    )


def add_run_commands(sub: Any) -> None:
    p = sub.add_parser("run", help="lower and run a workflow")
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument(
        "--input", action="append", default=[], metavar="K=V", help="one input (repeatable)"
    )
    p.add_argument("--inputs", metavar="FILE", help="inputs as a JSON object")
    add_provider_options(p)
    p.add_argument(
        "--repo",
        metavar="DIR",
        help="repository root that retrieve_context may read and patches are checked against",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the hash and preview of each prompt the run sends (needs --mock)",
    )
    p.add_argument(
        "--answers", metavar="FILE", help='answers to questions: {"<nodeId>": "<option>"}'
    )
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="where run folders go (default: runs)"
    )
    p.add_argument(
        "--no-record", action="store_true", help="keep the run in memory (no run folder)"
    )
    p.add_argument(
        "--max-steps", type=int, metavar="N", help="ops per run (default: config, else 10000)"
    )
    p.add_argument(
        "--max-visits",
        type=int,
        default=None,
        metavar="N",
        help="executions of one op, loops included (default 1000)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the whole result, not just the output"
    )
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("resume", help="continue a halted or failed run")
    p.add_argument("run_dir", help="the run folder (runs/<run_id>)")
    p.add_argument(
        "--answer",
        action="append",
        default=[],
        metavar="NODE=VALUE",
        help="answer to a question (option label or index), repeatable",
    )
    p.add_argument("--provider", help="LLM provider (default: the one the run used)")
    p.add_argument("--mock", metavar="FILE", help="mock script (default: the one the run used)")
    p.add_argument("--fixtures", metavar="FILE", help="fixtures (default: the ones the run used)")
    p.add_argument("--config", metavar="FILE", help="lattice.toml (default: the run's)")
    p.add_argument("--repo", metavar="DIR", help="repository root (default: the run's)")
    p.add_argument("--json", action="store_true", help="print the whole result")
    p.set_defaults(handler=cmd_resume)

    p = sub.add_parser("runs", help="list runs or show one")
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("run_dir", nargs="?", help="run folder for 'show'")
    p.add_argument("--runs-dir", default="runs", metavar="DIR")
    p.set_defaults(handler=cmd_runs)
