"""Every ``lattice`` command's arguments, and the handler that runs it.

Only argparse is imported here: ``lattice --help`` and argument errors stay fast.
Each command names its handler as ``"module:function"``; ``lattice.cli.main``
imports that one module when the command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

CONFIG_HELP = (
    "lattice.toml (default: $LATTICE_CONFIG, ./lattice.toml); with one, mcp nodes must name "
    "servers it configures"
)
RUNS_LIST_DEFAULT = 20
"""How many runs ``lattice runs list`` prints without ``--limit`` or ``--all``."""
PASS_NAMES = ("project", "architecture", "scaffold", "test", "implementation", "refactor")
"""The planning passes in order (``lattice.planner.passes.PASSES``; repeated here so that
building the parser imports nothing)."""


def port_number(text: str) -> int:
    """A TCP port (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is between 0 and 65535, not {value}")
    return value


def temporal_address(text: str) -> str:
    """A Temporal server's HOST:PORT (its gRPC address: no scheme, a port number)."""
    host, colon, port = text.rpartition(":")
    if "://" in text or not colon or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT (a Temporal server's address, such as 127.0.0.1:7233)"
        )
    return text


def positive_int(text: str) -> int:
    """An argument that must be a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    """An argument that must be a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argument that must be a number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


class CommandParser(argparse.ArgumentParser):
    """An argparse parser for ``lattice`` and each of its commands (``add_subparsers``
    makes every command's parser of this class too).

    Options are written in full (``allow_abbrev=False``: ``--moc`` is not ``--mock``), and
    an argument a command does not know is reported by that command, with its usage and
    the nearest option it has ("did you mean --mock?"), not by ``lattice`` with the
    usage of every command. No parser here hands unknown arguments on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._nearest(extras)}")
        return parsed, extras

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A choice not offered (a command, an action) is refused with the nearest one
        ("did you mean `run`?"), as an unknown option is."""
        choices = action.choices
        if choices is None or value in choices or not isinstance(value, str):
            super()._check_value(action, value)
            return
        import difflib  # only when an argument is wrong: --help stays light

        names = [str(choice) for choice in choices]
        close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise argparse.ArgumentError(
            action, f"invalid choice: {value!r} ({hint}choose from {', '.join(names)})"
        )

    def _nearest(self, extras: list[str]) -> str:
        """`` (did you mean --x?)`` for the first unknown option close to one of ours."""
        import difflib  # only when an argument is wrong: --help stays light

        options = [o for o in self._option_string_actions if o.startswith("--")]
        for word in extras:
            if not word.startswith("--"):
                continue
            close = difflib.get_close_matches(word.partition("=")[0], options, n=1, cutoff=0.6)
            if close:
                return f" (did you mean {close[0]}?)"
        return ""


def build_parser() -> argparse.ArgumentParser:
    """The ``lattice`` argument parser."""
    parser: argparse.ArgumentParser = CommandParser(
        prog="lattice",
        description="Compile and run LLM workflows under contracts.",
    )
    parser.add_argument("--version", action="version", version="lattice 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _compile_commands(sub)
    _run_commands(sub)
    _batch_commands(sub)
    _eval_commands(sub)
    _export_commands(sub)
    _plan_commands(sub)
    _mcp_commands(sub)
    _deploy_command(sub)
    _mock_commands(sub)
    _serve_commands(sub)
    return parser


def _handler(p: argparse.ArgumentParser, target: str) -> None:
    p.set_defaults(handler=target)


def _compile_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lower", help="lower a workflow document to ExecIR (or Mermaid / DOT)")
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument("--emit", choices=["execir", "mermaid", "dot"], default="execir")
    p.add_argument("-o", "--output", help="write to FILE instead of stdout")
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    _handler(p, "lattice.cli.compile:lower")

    p = sub.add_parser(
        "check",
        help="check a workflow document and print its diagnostics",
        description="Check a workflow document: its diagnostics, and per agent node the "
        "tools it asks for and which of them the configuration and flags grant.",
    )
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    add_agent_options(p)
    _handler(p, "lattice.cli.compile:check")

    p = sub.add_parser("hash-prompt", help="print the prompt hash of a request read from stdin")
    p.add_argument(
        "--model-class", default="default", help="for plain-text input (default: default)"
    )
    _handler(p, "lattice.cli.compile:hash_prompt")

    p = sub.add_parser("config", help="show the effective configuration (secrets masked)")
    p.add_argument("action", choices=["show"])
    p.add_argument("--config", metavar="FILE")
    _handler(p, "lattice.cli.compile:show_config")

    p = sub.add_parser("schema", help="print the JSON Schema of ExecIR")
    _handler(p, "lattice.cli.compile:schema")


def add_agent_options(p: argparse.ArgumentParser) -> None:
    """What agent nodes may do (docs/agents.md); added to ``[agents]`` of lattice.toml."""
    group = p.add_argument_group("agent grants (nothing is granted by default)")
    group.add_argument(
        "--workspace", metavar="DIR", help="the folder agents' file tools and shell work in"
    )
    group.add_argument(
        "--allow",
        action="append",
        metavar="GRANTS",
        help="what agents may do: read,write,shell,web (comma-separated, repeatable)",
    )
    group.add_argument(
        "--allow-mcp",
        action="append",
        metavar="SERVER",
        help="a configured MCP server whose tools agents may call (repeatable)",
    )
    group.add_argument(
        "--patch-only",
        action="store_true",
        help="record agents' changes as patches in the run folder; leave the files as they are",
    )
    rules = p.add_argument_group(
        "permission rules, as Claude Code writes them (inside the grants; docs/agents.md)"
    )
    for behavior, what in (
        ("allow", "runs without asking"),
        ("ask", "waits for a person's approval"),
        ("deny", "is refused"),
    ):
        rules.add_argument(
            f"--{behavior}-rule",
            action="append",
            default=[],
            metavar="RULE",
            help=f"a tool call this rule matches {what}: Bash(npm run test *), Edit(src/**), "
            "WebFetch(domain:example.com), mcp__github (repeatable)",
        )
    rules.add_argument(
        "--permission-mode",
        metavar="MODE",
        help="default, acceptEdits (edits run, commands ask), plan (read-only), dontAsk, "
        "bypassPermissions (with --bypass-permissions)",
    )
    rules.add_argument(
        "--no-claude-settings",
        action="store_true",
        help="do not read ~/.claude/settings.json and the workspace's .claude/settings*.json",
    )
    rules.add_argument(
        "--bypass-permissions",
        action="store_true",
        help="let the bypassPermissions mode stand: no call asks (deny rules still refuse)",
    )
    rules.add_argument(
        "--no-wait",
        action="store_true",
        help="a call that needs approval when no one can answer is refused (the model is "
        "told) instead of halting the run",
    )


def add_provider_options(p: argparse.ArgumentParser) -> None:
    """--provider, --mock, --fixtures, --record, --config and the model-call budgets
    (lattice run, lattice plan)."""
    p.add_argument(
        "--provider",
        help="openai, anthropic, litellm, mock, fixture or disabled (default: config, else disabled)",
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
        "--max-calls",
        type=positive_int,
        metavar="N",
        help="model requests per run, repairs and retries included (default: config, else 200)",
    )
    p.add_argument(
        "--max-tokens-total",
        type=positive_int,
        metavar="N",
        help="tokens per run, repairs included",
    )


def add_temporal_options(
    p: argparse.ArgumentParser, *, required: bool = False, engine: bool = True
) -> None:
    """--temporal HOST:PORT and --task-queue Q (lattice run --engine temporal, lattice worker)."""
    p.add_argument(
        "--temporal",
        metavar="HOST:PORT",
        type=temporal_address,
        required=required,
        help="the Temporal server's address" + (" (with --engine temporal)" if engine else ""),
    )
    p.add_argument(
        "--task-queue",
        default="lattice",
        metavar="Q",
        help="the task queue runs are started on and workers poll (default: lattice)",
    )


def _run_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lattice run``, ``resume``, ``runs`` and the Temporal commands ``worker``, ``codec-server``."""
    _run_command(sub)
    _resume_command(sub)
    _runs_command(sub)
    _worker_command(sub)
    _codec_server_command(sub)


def _run_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lattice run WORKFLOW``."""
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
    add_agent_options(p)
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
        "--max-steps",
        type=positive_int,
        metavar="N",
        help="ops per run (default: config, else 10000)",
    )
    p.add_argument(
        "--max-visits",
        type=positive_int,
        default=None,
        metavar="N",
        help="executions of one op, loops included (default 1000)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the whole result, not just the output"
    )
    p.add_argument(
        "--engine",
        choices=["local", "temporal"],
        default="local",
        help="where the run goes: this process (local, the default) or Temporal's workers "
        "(temporal, with --temporal HOST:PORT; docs/temporal.md)",
    )
    add_temporal_options(p)
    _handler(p, "lattice.cli.run:run")


def _resume_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lattice resume RUN``."""
    p = sub.add_parser("resume", help="continue a halted, failed or interrupted run")
    p.add_argument("run_dir", metavar="RUN", help="the run folder (runs/<run_id>) or its run id")
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="where to find a run id (default: runs)"
    )
    p.add_argument(
        "--accept-changed",
        action="store_true",
        help="continue although workflow.json or execir.json changed since the run started "
        "(the document is lowered again; completed ops must keep their ids)",
    )
    p.add_argument(
        "--answer",
        action="append",
        default=[],
        metavar="NODE=VALUE",
        help="answer to a question (option label or index), repeatable",
    )
    _add_approval_options(p)
    p.add_argument("--provider", help="LLM provider (default: the one the run used)")
    p.add_argument("--mock", metavar="FILE", help="mock script (default: the one the run used)")
    p.add_argument("--fixtures", metavar="FILE", help="fixtures (default: the ones the run used)")
    p.add_argument("--config", metavar="FILE", help="lattice.toml (default: the run's)")
    p.add_argument("--repo", metavar="DIR", help="repository root (default: the run's)")
    p.add_argument("--json", action="store_true", help="print the whole result")
    p.add_argument(
        "--temporal",
        metavar="HOST:PORT",
        type=temporal_address,
        help="the run is on Temporal: RUN is its id; answers are sent to it as updates",
    )
    _handler(p, "lattice.cli.run:resume")


def _add_approval_options(p: argparse.ArgumentParser) -> None:
    """--approve, --approve-run, --deny, --reason, --approve-all, --deny-all, --no-wait."""
    approvals = p.add_argument_group("approvals of agents' tool calls (docs/agents.md)")
    approvals.add_argument(
        "--approve", action="append", default=[], metavar="ID", help="allow this call once"
    )
    approvals.add_argument(
        "--approve-run",
        action="append",
        default=[],
        metavar="ID",
        help="allow this call, and its tool for the rest of the agent's run",
    )
    approvals.add_argument(
        "--deny", action="append", default=[], metavar="ID", help="refuse this call"
    )
    approvals.add_argument("--reason", metavar="TEXT", help="why, told to the model (--deny)")
    approvals.add_argument(
        "--approve-all", action="store_true", help="allow every call waiting for approval"
    )
    approvals.add_argument(
        "--deny-all", action="store_true", help="refuse every call waiting for approval"
    )
    approvals.add_argument(
        "--no-wait",
        action="store_true",
        help="a call that needs approval and has none is refused instead of halting the run",
    )


def _runs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lattice runs [list|show|diff|open|export]``."""
    p = sub.add_parser(
        "runs",
        help="list runs, show one, compare two, or open one in the execution panel",
        description="lattice runs [list]; lattice runs show RUN; lattice runs diff RUN_A RUN_B "
        "(status, output, the path taken, each node's outputs and model calls); lattice runs "
        "open RUN: the run in the execution panel of lattice serve (docs/panel.md), in a "
        "browser (a server on --port that sees the run is used, else one is started here "
        "until Ctrl-C); lattice runs export RUN --temporal HOST:PORT -o DIR: a run on "
        "Temporal as a run folder (docs/temporal.md); lattice runs stop RUN --temporal "
        "HOST:PORT: stop a run on Temporal at its next op boundary (lattice resume goes "
        "on). A RUN is a run folder or a run id under "
        "--runs-dir (with --temporal: a run id on Temporal).",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["list", "show", "diff", "open", "export", "stop"],
        default="list",
    )
    p.add_argument(
        "run_dir",
        nargs="?",
        metavar="RUN",
        help="run folder or run id for 'show', 'open' and 'export'; the first for 'diff'",
    )
    p.add_argument("other", nargs="?", metavar="RUN_B", help="the second run for 'diff'")
    p.add_argument("--runs-dir", default="runs", metavar="DIR")
    p.add_argument("--json", action="store_true", help="diff: print the differences as JSON")
    p.add_argument(
        "--waiting",
        action="store_true",
        help="list: only runs halted until a person answers, with what each waits for",
    )
    p.add_argument(
        "--workflow",
        metavar="NAME[@VERSION]",
        help="list: only runs of this workflow (its name, id or file), or of one deployed "
        "version of it (NAME@VERSION, docs/services.md)",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=8600,
        help="open: the port of the panel's server (default: 8600; 0: start one on any free port)",
    )
    p.add_argument(
        "--workflows",
        metavar="DIR",
        help="open: when a server is started, the workflows its new-run form offers",
    )
    p.add_argument(
        "--no-browser", action="store_true", help="open: print the URL without opening a browser"
    )
    p.add_argument(
        "--temporal",
        metavar="HOST:PORT",
        type=temporal_address,
        help="list, show, open, export, stop, diff: the runs are on Temporal at this address "
        "(RUN is a run id)",
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"list: the N newest runs (default: {RUNS_LIST_DEFAULT})",
    )
    p.add_argument("--all", action="store_true", help="list: every run (no --limit)")
    p.add_argument("-o", "--output", metavar="DIR", help="export: the run folder to write")
    _handler(p, "lattice.cli.run:runs")


def _worker_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lattice worker`` (Temporal)."""
    p = sub.add_parser(
        "worker",
        help="run a worker of runs on Temporal (docs/temporal.md)",
        description="Poll Temporal at --temporal HOST:PORT for Lattice runs and their ops "
        "(start any number, on any machines). Providers, model classes, policies and "
        "allowed secrets come from this worker's lattice.toml and environment.",
    )
    add_temporal_options(p, required=True, engine=False)
    p.add_argument(
        "--config", metavar="FILE", help="lattice.toml (default: $LATTICE_CONFIG, ./lattice.toml)"
    )
    _handler(p, "lattice.cli.temporal:worker")


def _codec_server_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lattice codec-server`` (Temporal)."""
    p = sub.add_parser(
        "codec-server",
        help="decrypt runs on Temporal for Temporal's web UI and CLI (docs/temporal.md)",
        description="Serve Temporal's codec server protocol (POST /decode, POST /encode) with "
        "the payload codec's keys (LATTICE_TEMPORAL_KEY, or [temporal] codec_key_env), so "
        "that Temporal's web UI (--ui-codec-endpoint) and `temporal --codec-endpoint` show "
        "runs' payloads decrypted. Whoever reaches it reads every run in the clear.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; another needs a token)",
    )
    p.add_argument("--port", type=port_number, default=8081, help="port (default: 8081)")
    p.add_argument(
        "--token",
        help="require Authorization: Bearer TOKEN (default: $LATTICE_CODEC_TOKEN; needed "
        "with a --host other than 127.0.0.1)",
    )
    p.add_argument(
        "--ui-origin",
        action="append",
        default=[],
        metavar="URL",
        help="a web UI allowed to call it from the browser (repeatable; default: "
        "http://127.0.0.1:8233 and http://localhost:8233, the dev server's UI)",
    )
    p.add_argument(
        "--config", metavar="FILE", help="lattice.toml (default: $LATTICE_CONFIG, ./lattice.toml)"
    )
    _handler(p, "lattice.cli.temporal:codec_server")


BATCH_DESCRIPTION = """\
Run WORKFLOW once per line of --inputs (JSON lines: an inputs object, or
{"id", "inputs", "answers"}) and append one line per row to -o FILE:
{"id", "status", "result", "error_type", "error", "node_id", "usage", "run_dir", ...}.
Running the same command again skips the rows already there (a killed batch loses no
finished row); --retry-failed runs failed rows again and --answers answers halted ones.
Lines that are not JSON or do not fit the workflow are reported by line number and
skipped. A mock script serves every row from its start (docs/batch.md).
Compare two results files with: lattice batch diff OLD.jsonl NEW.jsonl
Exit codes: 0 every row completed, 1 a row failed, a line was invalid or a budget
stopped the batch, 3 rows wait for answers, 130 interrupted."""


def _batch_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "batch",
        help="run a workflow over a dataset (JSON lines), resumable; "
        "lattice batch diff OLD NEW compares two results",
        usage="lattice batch WORKFLOW --inputs FILE -o FILE [options]\n"
        "       lattice batch diff OLD.jsonl NEW.jsonl [--json] [--all]",
        description=BATCH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument("--inputs", required=True, metavar="FILE", help="the rows (JSON lines)")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the results (JSON lines, appended)"
    )
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=16,
        metavar="N",
        help="rows in flight at once (with --engine ray: per Ray actor; default 16)",
    )
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="where run folders go (default: runs)"
    )
    p.add_argument(
        "--no-record",
        action="store_true",
        help="keep runs in memory: no run folders (failed and halted rows then run again from "
        "their start)",
    )
    p.add_argument(
        "--durability",
        choices=["fsync", "os"],
        help="how hard run folders and the results file are forced to disk (default: [runs] "
        "durability, else fsync; os: a killed batch still loses nothing, a power cut may)",
    )
    p.add_argument(
        "--answers",
        metavar="FILE",
        help='answers for halted rows: {"<nodeId>": "<option>"} for every row, or a .jsonl '
        'file of {"id", "answers"} lines',
    )
    p.add_argument(
        "--retry-failed", action="store_true", help="run the rows that failed again (resumed)"
    )
    add_provider_options(p)
    p.add_argument(
        "--mock-latency-ms",
        type=non_negative_float,
        default=0.0,
        metavar="MS",
        help="with --mock: each mock call waits this long (demos, benchmarks)",
    )
    p.add_argument("--repo", metavar="DIR", help="repository root (as lattice run --repo)")
    add_agent_options(p)
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="ops per run")
    p.add_argument("--max-visits", type=positive_int, metavar="N", help="executions of one op")
    _add_batch_limits(p)
    _add_batch_engine(p)
    p.add_argument("--summary-json", metavar="FILE", help="also write the summary as JSON")
    p.add_argument(
        "--progress",
        choices=["auto", "rich", "plain", "none"],
        default="auto",
        help="auto: a live line on a terminal, else a line every --progress-interval seconds",
    )
    p.add_argument(
        "--progress-interval",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="seconds between plain progress lines (default 10)",
    )
    _handler(p, "lattice.cli.batch:batch")


EVAL_DESCRIPTION = """\
Run a workflow over a dataset (lattice batch's JSON lines, with an "expected" value or
"expect" assertions per row, and scorers and thresholds on a first line {"$eval": {...}}),
score every row, and print per scorer the mean and its 95% confidence interval. With two
variants (--variant DOC2, --mock M1 --mock-b M2, or --results A.jsonl B.jsonl) it also
lists the rows whose scores changed, with their differences. Each variant's batch is
resumable (its results file under --out). docs/evals.md.

Exit codes: 0 the thresholds hold and no row regressed; 1 a threshold is missed or more
rows regressed than --max-regressions allows (a CI gate); 2 a mistake in the options,
the document or the dataset."""


def _add_batch_limits(p: argparse.ArgumentParser) -> None:
    """--max-calls-total, --max-cost, --rpm, --tpm: what the whole batch may spend."""
    limits = p.add_argument_group("limits of the whole batch (every run in flight shares them)")
    limits.add_argument(
        "--max-calls-total",
        type=positive_int,
        metavar="N",
        help="model requests of the whole batch; then it stops",
    )
    limits.add_argument(
        "--max-cost",
        type=positive_float,
        metavar="USD",
        help="estimated cost of the whole batch ([prices] in lattice.toml); then it stops",
    )
    limits.add_argument(
        "--rpm", type=positive_int, metavar="N", help="model requests per minute, at most"
    )
    limits.add_argument("--tpm", type=positive_int, metavar="N", help="tokens per minute, at most")


def _add_batch_engine(p: argparse.ArgumentParser) -> None:
    """--engine local|ray, --ray-address, --ray-actors."""
    engine = p.add_argument_group("engine")
    engine.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: this process; ray: Ray actors (needs the ray extra)",
    )
    engine.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="a Ray cluster (ray://host:10001, or auto); default: a local Ray on 127.0.0.1",
    )
    engine.add_argument(
        "--ray-actors",
        type=positive_int,
        metavar="N",
        help="Ray actors running rows (default: the cluster's CPUs)",
    )


# long: one flat, declarative list of the command's flags
def _eval_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "eval",
        help="score a workflow (or two variants of it) over a dataset with expectations",
        usage="lattice eval WORKFLOW DATASET [--variant DOC2 | --mock M1 --mock-b M2 | "
        "--results A.jsonl B.jsonl] [options]",
        description=EVAL_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument("dataset", help="the rows and their expectations (JSON lines)")
    variants = p.add_argument_group("a second variant (B), compared with the first (A)")
    variants.add_argument("--variant", metavar="DOC2", help="B runs this document")
    variants.add_argument("--mock-b", metavar="FILE", help="B runs with this mock script")
    variants.add_argument(
        "--results",
        nargs="+",
        metavar="FILE",
        help="score results files of lattice batch (one, or A and B) instead of running",
    )
    p.add_argument(
        "--scorer",
        action="append",
        default=[],
        metavar="SPEC",
        help='another scorer: a JSON object {"type": …} or a type name (exact, normalized, …)',
    )
    p.add_argument(
        "--scorer-fn",
        action="append",
        default=[],
        metavar="[NAME=]MODULE:FUNCTION",
        help="a Python function as a scorer: f(output, expected, inputs) -> bool | 0..1",
    )
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="SCORER=MIN",
        help="the lowest mean score that passes (over the dataset's)",
    )
    p.add_argument(
        "--max-regressions",
        type=int,
        default=0,
        metavar="N",
        help="rows B may score lower than A before the eval fails (default 0)",
    )
    p.add_argument(
        "--out",
        default="eval-out",
        metavar="DIR",
        help="results files and run folders (default: eval-out)",
    )
    p.add_argument(
        "--cache",
        metavar="FILE",
        help="reuse the live provider's answers recorded in FILE (keyed by prompt hash, "
        "model and inputs) and record new ones",
    )
    p.add_argument("--judge-mock", metavar="FILE", help="a mock script for judge scorers")
    p.add_argument("--judge-provider", help="the provider of judge scorers (default: --provider)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument(
        "--panel-url",
        default="http://127.0.0.1:8600",
        metavar="URL",
        help="where the HTML report links each row's run (lattice serve --runs-dir OUT/runs)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--all", action="store_true", help="list every changed row (default: 50)")
    p.add_argument(
        "--concurrency", type=positive_int, default=16, metavar="N", help="rows in flight at once"
    )
    p.add_argument(
        "--no-record",
        action="store_true",
        help="keep runs in memory (no run folders: no node scorers, no links to the panel)",
    )
    p.add_argument(
        "--durability",
        choices=["fsync", "os"],
        default="os",
        help="how hard run folders and results files are forced to disk (default: os)",
    )
    add_provider_options(p)
    p.add_argument(
        "--max-calls-total", type=positive_int, metavar="N", help="model requests of each variant"
    )
    p.add_argument(
        "--max-cost", type=positive_float, metavar="USD", help="estimated cost of each variant"
    )
    p.add_argument("--engine", choices=["local", "ray"], default="local")
    p.add_argument("--ray-address", metavar="ADDR", help="a Ray cluster (with --engine ray)")
    p.add_argument(
        "--progress", choices=["auto", "rich", "plain", "none"], default="auto", help="progress"
    )
    _handler(p, "lattice.cli.eval:evaluate")


def build_batch_diff_parser() -> argparse.ArgumentParser:
    """``lattice batch diff OLD NEW`` (``lattice.cli.main`` sends ``batch diff …`` here)."""
    p = CommandParser(
        prog="lattice batch diff",
        description="The rows whose status, error type or result changed between two results "
        "files of lattice batch (by row id), with a JSON difference per row and counts. "
        "Exit code 0 when nothing changed, 1 when something did.",
    )
    p.add_argument("old", metavar="OLD.jsonl")
    p.add_argument("new", metavar="NEW.jsonl")
    p.add_argument("--json", action="store_true", help="print the differences as JSON")
    p.add_argument("--all", action="store_true", help="list every changed row (default: 50)")
    _handler(p, "lattice.cli.batch:diff")
    return p


def _export_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="export training data from run folders")
    export_sub = p.add_subparsers(dest="export_kind", metavar="KIND", required=True)
    p = export_sub.add_parser(
        "sft",
        help="one chat example per accepted LLM op (JSONL)",
        description="One example per accepted LLM op of the given runs: the op's original "
        "prompt and its final valid output. RUN_DIR is a run folder or a folder of runs.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folder(s) or runs/")
    p.add_argument("-o", "--output", metavar="FILE", help="write JSONL here (default: stdout)")
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NODE",
        help="only ops of this node (repeatable)",
    )
    p.add_argument(
        "--include-repaired",
        action="store_true",
        help="also ops that needed a repair or an escalation (default: valid at the first answer)",
    )
    p.add_argument(
        "--only-completed", action="store_true", help="only runs whose status is completed"
    )
    p.add_argument(
        "--format",
        choices=["chat", "validator"],
        default="chat",
        help="chat: {messages, meta}; validator: labelled ValidatorDecision examples",
    )
    _handler(p, "lattice.cli.export:export_sft")


def _plan_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="run a planning pass over a project directory and save its artifact",
        description="Passes, in order: "
        + ", ".join(PASS_NAMES)
        + ". Each reads the approved artifacts of the passes before it (docs/planner.md).",
    )
    p.add_argument("pass_name", metavar="PASS", choices=PASS_NAMES, help=" | ".join(PASS_NAMES))
    p.add_argument(
        "subject",
        nargs="?",
        metavar="TARGET_FILE|GOAL",
        help="implementation: the file to plan; refactor: the goal",
    )
    p.add_argument(
        "--project", default=".", metavar="DIR", help="the project directory (default: .)"
    )
    p.add_argument(
        "--from-run",
        metavar="RUN_DIR",
        help="save the artifact of a run of this pass that completed after lattice resume",
    )
    add_provider_options(p)
    p.add_argument(
        "--answers",
        metavar="FILE",
        help='information the model asked for, in advance: {"plan": "<text>"}',
    )
    p.add_argument(
        "--runs-dir", metavar="DIR", help="where run folders go (default: DIR/.lattice/runs)"
    )
    p.add_argument(
        "--json", action="store_true", help="print the whole run result, not just the artifact"
    )
    _handler(p, "lattice.cli.plan:plan")

    p = sub.add_parser("artifacts", help="list, show, approve or lock a project's artifacts")
    p.add_argument("action", choices=["list", "show", "approve", "lock"])
    p.add_argument("artifact_id", nargs="?", metavar="ID", help="for show, approve and lock")
    p.add_argument(
        "--project", default=".", metavar="DIR", help="the project directory (default: .)"
    )
    p.add_argument("--content", action="store_true", help="show: the artifact's content only")
    p.add_argument("--json", action="store_true", help="list: JSON (without contents)")
    _handler(p, "lattice.cli.plan:artifacts")


def _deploy_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "deploy",
        help="deploy each workflow of a folder as an immutable version (NAME@VERSION)",
        description="lattice deploy DIR: keep each workflow under DIR whose content is new "
        "as the next version of its name in RUNS/.versions, as lattice serve --workflows DIR "
        "--runs-dir RUNS does when it starts and whenever a file changes; print "
        "NAME@VERSION of each (docs/services.md). Exit 2 when a file does not lower (the "
        "others are deployed).",
    )
    p.add_argument("folder", metavar="DIR", help="the workflows folder")
    p.add_argument(
        "--runs-dir",
        default="runs",
        metavar="RUNS",
        help="the gateway's runs folder, which keeps the versions (default: runs)",
    )
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    _handler(p, "lattice.cli.deploy:deploy")


def _mcp_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        help="list configured MCP servers and their tools; serve a folder's workflows as tools",
        description="lattice mcp list [SERVER]: the configured MCP servers and their tools. "
        "lattice mcp serve DIR: each workflow under DIR as an MCP tool, over stdio "
        "(docs/services.md).",
    )
    p.add_argument("action", choices=["list", "serve"])
    p.add_argument("server", nargs="?", help="list: only this server; serve: the workflows folder")
    add_provider_options(p)
    p.add_argument("--json", action="store_true", help="list: print JSON")
    p.add_argument(
        "--mocks",
        action="store_true",
        help="serve: run each workflow with the NAME.mock.json beside it",
    )
    p.add_argument(
        "--mock-latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="serve: a pause before each mock answer (demos of progress and cancelling)",
    )
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="serve: where run folders go (runs)"
    )
    add_agent_options(p)  # serve: what the served workflows' agent nodes may do
    _handler(p, "lattice.cli.mcp:mcp")


def _mock_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("mock", help="write a mock script that runs a workflow offline")
    mock_sub = p.add_subparsers(dest="mock_action", metavar="ACTION", required=True)
    p = mock_sub.add_parser(
        "init",
        help="a mock script (and answers file) for a workflow's model calls and questions",
        description="One answer per LLM node of the shape it expects: a branch label for "
        "classifiers (their first branch), an example of the output schema for structured "
        "nodes, a short text otherwise; questions get their first option. Edit the answers "
        "to steer the run.",
    )
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write the mock script here (default: stdout)"
    )
    p.add_argument(
        "--answers-output",
        metavar="FILE",
        help="write the answers file here (default with -o: beside it, <name>.answers.json)",
    )
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    add_agent_options(p)  # agent nodes call the tools these grant
    _handler(p, "lattice.cli.mock:init")


def _serve_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="an HTTP API to start, watch, answer and resume runs (needs the server extra)",
        description="Serve runs over HTTP (docs/server.md): POST /v1/runs starts one, "
        "GET /v1/runs/{id}/events streams its events, POST .../answers answers a halted "
        "question, POST .../resume and .../cancel resume and stop runs. Every run is an "
        "ordinary run folder under --runs-dir, or, with --engine temporal, a workflow on "
        "Temporal that any number of such servers serve. API docs at /docs.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; any other needs a token)",
    )
    p.add_argument(
        "--port", type=port_number, default=8600, help="port (default: 8600; 0: any free port)"
    )
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="where run folders go (default: runs)"
    )
    p.add_argument(
        "--workflows",
        metavar="DIR",
        help="the workflows clients may run by name (paths relative to DIR); mock scripts "
        "and fixtures they name are read from here too",
    )
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--mocks",
        action="store_true",
        help="runs started at /mcp, by webhooks and by schedules use the NAME.mock.json "
        "beside each workflow (docs/services.md)",
    )
    add_agent_options(p)
    p.add_argument(
        "--token",
        help="bearer token every API route requires (not /healthz, nor the panel's page and files; default: $LATTICE_SERVER_TOKEN)",
    )
    p.add_argument(
        "--max-active-runs",
        type=positive_int,
        default=64,
        metavar="N",
        help="runs at once; more are refused with 429 (default: 64)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=1024 * 1024,
        metavar="N",
        help="largest request body; larger ones get 413 (default: 1 MiB)",
    )
    p.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        default="warning",
        help="server log level (info logs every request; default: warning)",
    )
    p.add_argument(
        "--engine",
        choices=["local", "temporal"],
        default="local",
        help="where runs live: run folders under --runs-dir, run by this process (local, "
        "the default), or workflows on Temporal at --temporal HOST:PORT, run by lattice "
        "worker processes (temporal: any number of gateways serve the same runs; "
        "docs/temporal.md)",
    )
    add_temporal_options(p)
    _handler(p, "lattice.cli.serve:serve")
