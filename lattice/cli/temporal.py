"""Runs on Temporal from the shell: ``lattice worker``, ``lattice run --engine temporal``,
``lattice resume RUN --temporal``, ``lattice runs list|show|export --temporal`` and what
``lattice runs open RUN --temporal`` needs.

Imported only by those commands: the rest of the CLI never imports ``temporalio``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lattice.cli.common import (
    Progress,
    TerminalApprover,
    approvals_given,
    note,
    parse_pairs,
    read_json_object,
    report,
    terminal_asker,
)
from lattice.config import load_config
from lattice.errors import ErrorType, InputError, LatticeUserError
from lattice.ir.models import AskOp, ExecIR, ToolCallOp
from lattice.ir.serialize import ir_from_json
from lattice.llm.fixture import read_fixtures
from lattice.permissions.approvals import ApprovalRequest
from lattice.runs.redaction import make_redactor
from lattice.runs.store import new_run_id, refuse_secret_answers
from lattice.runs.view import waits_for
from lattice.service.runs import PreparedRun, ProviderSpec

APPROVAL = "waiting_for_approval"


def _address(args: argparse.Namespace) -> str:
    if not args.temporal:
        raise InputError("the Temporal engine needs --temporal HOST:PORT (the server's address)")
    return str(args.temporal)


async def _connect(args: argparse.Namespace, address: str) -> Any:
    """A client of ``address`` with the payload codec of the configuration (``--config``,
    ``LATTICE_CONFIG`` or ./lattice.toml, and ``LATTICE_TEMPORAL_KEY``)."""
    from lattice.durable.temporal.client import connect

    return await connect(address, load_config(getattr(args, "config", None)).temporal)


def worker(args: argparse.Namespace) -> int:
    """``lattice worker --temporal HOST:PORT [--task-queue Q]``: work until Ctrl-C."""
    from lattice.durable.temporal.worker import run_worker

    config = load_config(args.config)
    address = _address(args)

    def connected() -> None:
        note(f"worker on Temporal at {address}, task queue {args.task_queue!r} (Ctrl-C stops it)")

    asyncio.run(run_worker(address, config, task_queue=args.task_queue, connected=connected))
    return 0


CODEC_TOKEN = "LATTICE_CODEC_TOKEN"
"""The codec server's token, when ``--token`` is not given."""


def codec_server(args: argparse.Namespace) -> int:
    """``lattice codec-server [--host H] [--port P] [--ui-origin URL]``: until Ctrl-C."""
    from lattice.durable.temporal.codec import codec_from_config
    from lattice.durable.temporal.codec_server import UI_ORIGINS, make_codec_server
    from lattice.server.main import check_token, is_loopback

    token = args.token if args.token is not None else os.environ.get(CODEC_TOKEN) or None
    if token is not None:
        check_token(token, "--token" if args.token is not None else f"${CODEC_TOKEN}")
    if not is_loopback(args.host) and not token:
        raise InputError(
            f"refusing to listen on {args.host} without a token: anyone who can reach it "
            f"could read every run decrypted; give --token TOKEN or set ${CODEC_TOKEN} "
            "(clients send Authorization: Bearer TOKEN: temporal --codec-auth 'Bearer TOKEN')"
        )
    codec = codec_from_config(load_config(args.config).temporal)
    if not codec.encrypts:
        raise InputError(
            f"the codec server needs the payload codec's key: set {codec.variable} "
            "(or name the variable in [temporal] codec_key_env)"
        )
    try:
        server = make_codec_server(
            codec,
            host=args.host,
            port=args.port,
            origins=args.ui_origin or UI_ORIGINS,
            token=token,
        )
    except OSError as exc:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    address = f"http://{args.host}:{server.server_address[1]}"
    note(
        f"codec server at {address} (temporal server start-dev --ui-codec-endpoint {address}; "
        f"temporal workflow show --codec-endpoint {address} …); Ctrl-C stops it"
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def fixture_table(args: argparse.Namespace) -> dict[str, dict[str, Any]] | None:
    """The table of ``--fixtures FILE`` (None without it): it travels with the run
    (``fixtures.py``); a file that does not exist is empty when ``--record`` makes it."""
    if not args.fixtures:
        return None
    path = Path(args.fixtures)
    if not path.exists() and not args.record:
        raise InputError(f"fixtures file {path} does not exist (record it with --record)")
    return read_fixtures(path)


def provider_meta(
    args: argparse.Namespace, fixtures: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The run's provider as the workers build it: a ``--mock`` script travels inline (a
    worker may be on another machine), fixtures by the digest of their table; a live
    provider (and the one fixtures are recorded with) is configured on the workers."""
    if fixtures is not None:
        from lattice.durable.temporal.fixtures import table_digest

        live = provider_meta(args) if args.record else {}  # what records: a script, or live
        return live | {"fixtures_digest": table_digest(fixtures), "record": bool(args.record)}
    if args.mock:
        return ProviderSpec(script=read_json_object(args.mock, "mock script")).to_meta()
    return ProviderSpec().to_meta() | {"provider_arg": args.provider}


def run_on_temporal(
    args: argparse.Namespace, prepared: PreparedRun, ir: ExecIR, answers: dict[str, Any]
) -> int:
    """Start the checked run on Temporal and follow it as ``lattice run`` follows a local one."""
    from lattice.durable.temporal.client import start_run

    address = _address(args)
    settings = prepared.settings
    progress = Progress(live=sys.stderr.isatty() and not args.json)
    run_id = new_run_id()
    if args.config and any(isinstance(op, ToolCallOp) for op in ir.ops.values()):
        note(
            f"note: on Temporal the workers call the tools, with their own configuration "
            f"(MCP servers, [http] allow_hosts, secrets), not {args.config}: start them with "
            f"lattice worker --temporal {address} --config {args.config}"
        )

    fixtures = fixture_table(args)

    async def go() -> int:
        client = await _connect(args, address)
        handle = await start_run(
            client,
            ir,
            run_id=run_id,
            inputs=prepared.inputs,
            answers=answers,
            provider=provider_meta(args, fixtures),
            fixtures=fixtures,
            budgets={"max_calls": args.max_calls, "max_tokens_total": args.max_tokens_total},
            limits={
                "max_steps": prepared.runner.limits.max_steps,
                "max_visits": prepared.runner.limits.max_visits,
            },
            task_queue=args.task_queue,
            redact=make_redactor(settings.secret_names()),
            settings=settings,
            document=prepared.runner.workflow,
        )
        note(f"run {run_id} started on Temporal at {address} (workflow id {handle.id})")
        code = await _follow(client, run_id, ir, address, progress, args, settings)
        if fixtures is not None and args.record:
            from lattice.durable.temporal.fixtures import append_recorded

            record = await handle.query("record")
            added = append_recorded(Path(args.fixtures), record["fixtures_recorded"])
            note(f"recorded {added} fixture(s) on the workers into {args.fixtures}")
        return code

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        progress.stop()
        note(
            f"stopped following; the run goes on on Temporal: "
            f"lattice resume {run_id} --temporal {address}"
        )
        raise


def asked(ir: ExecIR, question: dict[str, Any]) -> AskOp:
    """The ASK op a run on Temporal waits on, with its question as the run rendered it
    (the op's own text is a template: ``{{ $vars.draft.result }}``)."""
    op = ir.ops[question["op_id"]]
    assert isinstance(op, AskOp)
    rendered = (question.get("details") or {}).get("question")
    return op.model_copy(update={"question": rendered}) if isinstance(rendered, str) else op


def terminal_approvals(question: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """The person at the terminal's decisions on the calls ``question`` waits on, by id
    (until they stop: the calls left wait for ``lattice resume --approve``)."""
    approver = TerminalApprover()
    approver.progress = progress
    decisions: dict[str, Any] = {}
    for item in question["details"]["approvals"]:
        preview = {
            k: item[k] for k in ("diff", "command", "cwd", "server", "mcp_tool") if k in item
        }
        request = ApprovalRequest(
            item["id"], item["node"], item["tool"], item["arguments"], item["why"], preview
        )
        decision = approver(request)
        if decision is None:
            break
        decisions[item["id"]] = {
            "decision": decision.choice,
            "reason": decision.reason,
            "door": decision.door,
        }
    return decisions


async def _follow(
    client: Any,
    run_id: str,
    ir: ExecIR,
    address: str,
    progress: Progress,
    args: argparse.Namespace,
    settings: Any,
) -> int:
    """Follow the run to its end; a question is asked on the terminal when there is one
    (its answer is sent), else the run is reported ``halted`` (exit 3)."""
    from lattice.durable.temporal.client import answer, approve, follow, run_result

    handle = client.get_workflow_handle(run_id)
    interactive = sys.stdin.isatty() and not getattr(args, "answers", None)
    while True:
        outcome = await follow(handle, progress)
        question = outcome.get("question") if outcome.get("status") == "waiting" else None
        if question is not None and interactive and question["reason"] == APPROVAL:
            progress.stop()
            decisions = terminal_approvals(question, progress)
            if decisions:
                await approve(client, run_id, decisions)
                continue
        elif question is not None and interactive:
            progress.stop()
            op = asked(ir, question)
            given = terminal_asker(op)
            if given is not None:
                refuse_secret_answers(
                    {op.source_node: given}, make_redactor(settings.secret_names())
                )
                await answer(client, run_id, ir, op.source_node, given)
                continue
        hint = f"lattice resume RUN --temporal {address} --answer NODE=<answer>"
        if question is not None and question.get("reason") == "waiting_for_approval":
            first = question["details"]["approvals"][0]["id"]
            hint = (
                f"lattice resume RUN --temporal {address} --approve {first} (or --approve-all, "
                f"or --deny {first} --reason TEXT)"
            )
        resume_hint = f"lattice resume RUN --temporal {address}"
        result = run_result(outcome, answer_hint=hint, resume_hint=resume_hint)
        return report(result, progress, args.json, settings)


def resume(args: argparse.Namespace) -> int:
    """``lattice resume RUN_ID --temporal HOST:PORT [--answer NODE=VALUE] [--approve ID …]``:
    answer the run's question (the workflow's answer update), decide its tool calls waiting
    for approval (its approve update), resume it when it was stopped (its resume update),
    and follow it to its end or its next question."""
    from lattice.durable.temporal.client import answer, approve, resume_stopped
    from lattice.durable.temporal.rerun import resume_ended
    from lattice.permissions.approvals import APPROVALS
    from lattice.runtime.settings import settings_from_config

    address = _address(args)
    run_id = str(args.run_dir)
    given = [f"--{name}" for name in ("provider", "mock", "fixtures") if getattr(args, name, None)]
    if given:
        raise LatticeUserError(
            f"{', '.join(given)}: a run on Temporal keeps the provider it was started with"
        )
    answers = parse_pairs(args.answer, "--answer")
    decisions = approvals_given(args)
    progress = Progress(live=sys.stderr.isatty() and not args.json)
    settings = settings_from_config(load_config(args.config))

    async def go() -> int:
        refuse_secret_answers(
            {**answers, APPROVALS: decisions}, make_redactor(settings.secret_names())
        )
        client = await _connect(args, address)
        ir = await _run_ir(client, run_id)
        if answers or decisions:
            await _check_waiting(client, run_id, address)
        if decisions:
            await approve(client, run_id, decisions)
        for node_id, value in answers.items():
            await answer(client, run_id, ir, node_id, value)
        if not (answers or decisions):
            now = await client.get_workflow_handle(run_id).query("progress", 1 << 62)
            if now["result"] is None and now.get("stopping"):
                await resume_stopped(client, run_id)
                note(f"run {run_id} resumed where it stopped")
            elif (now["result"] or {}).get("status") in ("failed", "interrupted"):
                await resume_ended(client, run_id)
                note(f"run {run_id} resumed from the op it ended at")
        return await _follow(client, run_id, ir, address, progress, args, settings)

    return asyncio.run(go())


def stop(args: argparse.Namespace) -> int:
    """``lattice runs stop RUN_ID --temporal HOST:PORT``: stop the run at its next op
    boundary (the workflow's stop update): it shows ``interrupted`` until ``lattice resume
    RUN_ID --temporal HOST:PORT``."""
    from lattice.durable.temporal.client import check_key
    from lattice.durable.temporal.client import stop as stop_run

    address = _address(args)
    if not args.run_dir:
        raise LatticeUserError("lattice runs stop RUN --temporal HOST:PORT")
    run_id = str(args.run_dir)

    async def go() -> None:
        client = await _connect(args, address)
        await check_key(client, run_id)
        await stop_run(client, run_id, "lattice runs stop")

    asyncio.run(go())
    note(
        f"run {run_id} stops at its next op boundary (the ops in flight finish); "
        f"lattice resume {run_id} --temporal {address} goes on from there"
    )
    return 0


async def _check_waiting(client: Any, run_id: str, address: str) -> None:
    """A LatticeUserError unless run ``run_id`` waits for an answer (an answer sent to a
    finished workflow is refused by the server)."""
    progress = await client.get_workflow_handle(run_id).query("progress", 1 << 62)
    if progress["status"] == "waiting":
        return
    status = (progress.get("result") or {}).get("status") or progress["status"]
    raise LatticeUserError(
        f"run {run_id} is {status}; only a run waiting for an answer takes one "
        f"(lattice runs show {run_id} --temporal {address})"
    )


async def _run_ir(client: Any, run_id: str) -> ExecIR:
    from lattice.durable.temporal.client import check_key

    await check_key(client, run_id)
    try:
        record = await client.get_workflow_handle(run_id).query("record")
    except LatticeUserError:
        raise  # a key that does not read the run says so itself
    except Exception as exc:  # the SDK's RPC errors name the cause
        raise LatticeUserError(
            f"cannot read run {run_id!r} from Temporal: {exc}", error_type=ErrorType.TEMPORAL_ERROR
        ) from exc
    return ir_from_json(record["execir"])


@contextmanager
def exported(args: argparse.Namespace, run_ids: list[str]) -> Iterator[list[Path]]:
    """The runs ``run_ids`` on Temporal exported as run folders in a scratch folder,
    removed afterwards (``lattice runs diff RUN_A RUN_B --temporal HOST:PORT``)."""
    from lattice.durable.temporal.export import export_run

    address = _address(args)
    with tempfile.TemporaryDirectory(prefix="lattice-diff-") as scratch:
        folders = [Path(scratch) / f"{index}-{run_id}" for index, run_id in enumerate(run_ids)]

        async def go() -> None:
            client = await _connect(args, address)
            for run_id, folder in zip(run_ids, folders, strict=True):
                await export_run(client, run_id, folder)

        asyncio.run(go())
        yield folders


def export(args: argparse.Namespace) -> int:
    """``lattice runs export RUN_ID --temporal HOST:PORT -o DIR``."""
    from lattice.durable.temporal.export import export_run

    if not args.run_dir or not args.output:
        raise InputError("lattice runs export RUN_ID --temporal HOST:PORT -o DIR")
    address = _address(args)

    async def go() -> Path:
        return await export_run(await _connect(args, address), str(args.run_dir), Path(args.output))

    folder = asyncio.run(go())
    note(f"run {args.run_dir} written to {folder} (lattice runs show {folder})")
    return 0


def show(args: argparse.Namespace) -> int:
    """``lattice runs show RUN_ID --temporal HOST:PORT``: the run as ``runs show`` shows a
    folder (exported to a temporary folder first)."""
    import tempfile

    from lattice.durable.temporal.export import export_run
    from lattice.runs.view import show_run

    if not args.run_dir:
        raise InputError("lattice runs show RUN_ID --temporal HOST:PORT")
    address = _address(args)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / str(args.run_dir)

        async def go() -> None:
            await export_run(await _connect(args, address), str(args.run_dir), folder)

        asyncio.run(go())
        sys.stdout.write(show_run(folder))
    return 0


ALL_RUNS = 1_000_000
"""``--all``: as many runs as Temporal lists."""


def list_runs(args: argparse.Namespace, limit: int | None) -> int:
    """``lattice runs list --temporal HOST:PORT [--waiting]``: the runs on Temporal, newest
    first, as ``lattice runs list`` shows run folders (the ``limit`` newest; None: every
    one); with ``--waiting``, the runs waiting for a person, each with what it waits for."""
    from lattice.durable.temporal.backend import TemporalRuns

    runs = TemporalRuns(_address(args), config=load_config(getattr(args, "config", None)).temporal)

    waiting = bool(getattr(args, "waiting", False))

    async def go() -> Any:
        return await runs.list_runs(
            status="halted" if waiting else None,
            workflow=None,
            limit=limit or ALL_RUNS,
            before=None,
        )

    page = asyncio.run(go())
    rows = []
    for view in page.runs:
        failure = view.failure if view.status in ("failed", "halted") else None
        extra = f"  [{failure.get('category')}] {failure.get('node_id')}" if failure else ""
        calls = (view.usage or {}).get("calls", 0)
        rows.append(
            f"{view.run_id}  {view.status:<9}  {view.workflow or '?':<30}  {calls:>3} calls{extra}"
        )
        if waiting:
            rows.extend(f"    {line}" for line in waits_for(failure or {}))
    if page.next is not None:
        rows.append(f"(the newest {limit}; --limit N or --all shows more)")
    what = "runs waiting for a person" if waiting else "runs"
    sys.stdout.write(
        "\n".join(rows) + "\n" if rows else f"no {what} on Temporal at {runs.address}\n"
    )
    return 0


def gateway_backend(address: str, run_id: str) -> Any:
    """The backend a panel server started by ``lattice runs open RUN --temporal`` serves
    runs from, once run ``run_id`` is known to be there (else a LatticeUserError)."""
    from lattice.durable.temporal.backend import TemporalRuns

    runs = TemporalRuns(address, config=load_config().temporal)

    async def check() -> None:
        await runs.describe(run_id)

    asyncio.run(check())
    return runs
