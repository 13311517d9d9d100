"""The runs of a server: those it is running on its event loop, and every run folder
under its runs folder (whoever started them).

A run started or resumed over HTTP is an ordinary run folder, prepared by
``lattice.service.runs`` exactly as the CLI prepares its runs, and driven by one asyncio
task on the server's loop. Its status is its folder's (``checkpoint.json``), except that
a run this process is running reads ``running``; one it has just run reads as it ended
(``Ended``) until its folder says so too, so that nobody who saw its stream's ``end``
reads an older status; and one this process owned but no longer runs (a bug stopped its
task) reads ``interrupted``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeUserError
from lattice.events import EventKind
from lattice.runs.checkpoint import load_checkpoint, status_of
from lattice.runs.redaction import PieceMasker
from lattice.runs.store import RunStore, new_run_id
from lattice.runs.view import of_workflow
from lattice.runtime.context import EventListener
from lattice.runtime.events import utc_now
from lattice.runtime.results import RunResult
from lattice.runtime.runner import Runner
from lattice.server.errors import ApiError, from_user_error, not_found
from lattice.server.events import EventChannel, event_line
from lattice.server.store import LoopStore
from lattice.service.rerun import reruns_of
from lattice.service.runs import PreparedResume, PreparedRun

log = logging.getLogger("lattice.server")

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
"""What a run id in a URL may look like (run folders are named so)."""
QUESTION_CATEGORIES = ("waiting_for_answer", ErrorType.MISSING_INFORMATION)
APPROVAL = "waiting_for_approval"
"""The failure category of a run whose agent waits for a person to approve tool calls."""
"""Failure categories of a run halted until a person answers."""


@dataclass(eq=False)
class ActiveRun:
    """A run this server is running: its task, its event channel and its Runner."""

    run_id: str
    folder: Path
    channel: EventChannel
    runner: Runner | None = None
    task: asyncio.Task[None] | None = None
    error: BaseException | None = None
    """What stopped the task other than the run's end (a refusal, or a bug)."""
    result: RunResult | None = None
    """How the run ended, once it has (for a caller that waits for it: ``/mcp``)."""
    stop_asked: bool = field(default=False)


class DeltaRelay:
    """A listener of one run's events that hands its ``llm_delta`` events, masked, to the
    run's channel while a watcher takes them. Being a listener that takes deltas, it
    makes the run stream unless ``[runtime] stream`` says never (``wants_deltas``)."""

    wants_deltas = True

    def __init__(self, channel: EventChannel, secret_names: tuple[str, ...]) -> None:
        self.channel = channel
        self.masker = PieceMasker(secret_names)

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == EventKind.LLM_REQUEST:
            self.masker.forget(event.get("branch"))  # a new answer begins in this lane
            return
        if kind != EventKind.LLM_DELTA:
            return
        data = event["data"]
        lane = event.get("branch")
        # masked whether or not a watcher takes deltas now: the masker must see every
        # piece, or one who comes mid-answer could get the tail of a secret cut in two
        text = self.masker.mask(lane, (event.get("op_id"), data.get("attempt")), data["text"])
        if text and self.channel.wants_deltas:
            masked = {**event, "data": {**data, "text": text}}
            self.channel.add_delta(event["seq"], event_line(masked))


@dataclass(frozen=True)
class Ended:
    """How a run this server ran ended: its status and what its ``result.json`` holds,
    known before its stream's ``end`` is sent, whatever its folder says yet."""

    status: str
    result: dict[str, Any]


ENDED_KEPT = 1024
"""Runs whose end the manager remembers at most (each is forgotten as soon as its
folder is seen to say the same)."""


def read_json(path: Path) -> Any:
    """A JSON file of a run folder, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def links(run_id: str) -> dict[str, str]:
    base = f"/v1/runs/{run_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "answers": f"{base}/answers",
        "resume": f"{base}/resume",
        "cancel": f"{base}/cancel",
    }


class RunManager:
    """Starts, resumes and stops runs on the running event loop; reads run folders.

    The reading methods (``folder``, ``status``, ``describe``, ``summary``,
    ``list_runs``) are called from worker threads, off the loop: they only look
    ``active`` up (or copy it), never change it."""

    def __init__(
        self, runs_dir: Path, *, max_active_runs: int, secret_names: tuple[str, ...] = ()
    ) -> None:
        self.runs_dir = runs_dir.resolve()
        self.max_active_runs = max_active_runs
        self.secret_names = secret_names
        """Environment variables whose values are masked in deltas (with the provider
        keys), as in every response."""
        self.active: dict[str, ActiveRun] = {}
        self.closing = False
        """Set when the server shuts down."""
        self.starting = asyncio.Semaphore(1)
        """Held while a run is prepared and started (lowering, the Runner, the folder's
        first files): a burst of starts takes turns with the runs and streams already
        going, instead of queueing all its work ahead of theirs."""
        self.ended: dict[str, Ended] = {}
        """Runs this server ran, by id, until their folders say how they ended."""
        self._summaries: dict[str, tuple[tuple[int, int], dict[str, Any], dict[str, Any]]] = {}
        """Per run folder: the mtimes of its checkpoint and result, what the list shows
        of it, and what its status is told from (``status_fields``)."""

    # -- folders and statuses ---------------------------------------------------------

    def folder(self, run_id: str) -> Path:
        """The folder of run ``run_id``; 404 when there is none."""
        if RUN_ID.match(run_id) and run_id in self.active:
            return self.active[run_id].folder
        folder = self.runs_dir / run_id
        if not RUN_ID.match(run_id) or not folder.is_dir():
            raise not_found(f"no run {run_id!r}")
        return folder

    def channel(self, run_id: str) -> EventChannel | None:
        active = self.active.get(run_id)
        return active.channel if active is not None else None

    def status(self, run_id: str, checkpoint: Any = None) -> str:
        """``running`` while this server runs it; how it ended when this server has just
        run it and its folder does not say so yet; else what its folder says."""
        if run_id in self.active:
            return "running"
        if checkpoint is None:
            checkpoint = load_checkpoint(self.runs_dir / run_id)
        checkpoint = checkpoint if isinstance(checkpoint, dict) else None
        ended = self.ended_ahead(run_id, checkpoint)
        if ended is not None:
            return ended.status
        status = status_of(checkpoint)
        if status == "running" and (checkpoint or {}).get("owner", {}).get("pid") == os.getpid():
            return "interrupted"  # this process owned it and does not run it any more
        return status

    def ended_ahead(self, run_id: str, checkpoint: Mapping[str, Any] | None) -> Ended | None:
        """How run ``run_id`` ended here, while its folder (``checkpoint``) still says it
        runs here; None once the folder has caught up (the run is then forgotten) or
        another process has taken the run since."""
        ended = self.ended.get(run_id)
        if ended is None:
            return None
        owner: Mapping[str, Any] = (checkpoint or {}).get("owner") or {}
        if checkpoint is None or (
            checkpoint.get("status") == "running" and owner.get("pid") == os.getpid()
        ):
            return ended
        self.ended.pop(run_id, None)
        return None

    def check_capacity(self) -> None:
        if len(self.active) >= self.max_active_runs:
            raise ApiError(
                429,
                "too_many_active_runs",
                f"{len(self.active)} runs are active (the limit is {self.max_active_runs}); "
                "try again later",
                headers={"Retry-After": "1"},
            )

    def check_resumable(self, run_id: str, allowed: tuple[str, ...], hint: str) -> None:
        """409 unless the run's status is one of ``allowed``."""
        status = self.status(run_id)
        if status not in allowed:
            raise ApiError(
                409,
                "conflict",
                f"run {run_id} is {status}; {hint}",
                extra={"status": status},
            )

    # -- starting, resuming, stopping ------------------------------------------------

    async def start(self, prepared: PreparedRun, *, run_id: str | None = None) -> ActiveRun:
        """Start a new run (as ``run_id`` when given: 409 when that run exists); it goes
        on in the background. Answers once it has started."""
        self.check_capacity()
        if run_id is not None:
            if run_id in self.active or (self.runs_dir / run_id).exists():
                raise ApiError(409, "conflict", f"run {run_id} exists already")
        else:
            run_id = new_run_id()
            while run_id in self.active or (self.runs_dir / run_id).exists():
                run_id = new_run_id()
        active = ActiveRun(run_id, self.runs_dir / run_id, EventChannel(run_id))
        active.runner = prepared.runner
        prepared.runner.subscribe(self._relay(active))
        self._launch(active, prepared.arun(run_id=run_id), prepared.runner.store)
        await self._started(active)
        return active

    async def resume(
        self, run_id: str, prepared: PreparedResume, *, on_event: EventListener | None = None
    ) -> ActiveRun:
        """Continue a run folder under the runs folder in the background (``on_event``
        hears its events too)."""
        self.check_capacity()
        active = ActiveRun(run_id, prepared.folder, EventChannel(run_id))

        def attach(runner: Runner) -> None:
            active.runner = runner
            if on_event is not None:
                runner.subscribe(on_event)

        self._launch(
            active,
            prepared.arun(on_event=self._relay(active), on_runner=attach),
            prepared.store,
        )
        await self._started(active)
        return active

    def _relay(self, active: ActiveRun) -> DeltaRelay:
        return DeltaRelay(active.channel, self.secret_names)

    def _launch(
        self, active: ActiveRun, run: Coroutine[Any, Any, RunResult], store: RunStore
    ) -> None:
        if not isinstance(store, LoopStore):
            run.close()
            raise TypeError("runs of the server are written through a LoopStore")
        store.on_line = active.channel.add
        self.active[active.run_id] = active
        active.task = asyncio.create_task(
            self._drive(active, run, store), name=f"run {active.run_id}"
        )
        active.task.add_done_callback(lambda _: active.channel.begun.set())

    async def _started(self, active: ActiveRun) -> None:
        """Wait until the run has emitted its first event or stopped; a run refused
        before it began (a LatticeUserError) is an API error."""
        task = active.task
        assert task is not None
        await active.channel.begun.wait()
        if not active.channel.started and task.done():
            error = active.error
            if isinstance(error, LatticeUserError):
                raise from_user_error(error)
            if error is not None:
                raise ApiError(
                    500, "internal_error", "the run could not start; see the server's log"
                )

    async def _drive(
        self, active: ActiveRun, run: Coroutine[Any, Any, RunResult], store: LoopStore
    ) -> None:
        status: str | None = None
        try:
            result = await run
            active.result = result
            status = result.status
            self._remember(
                active.run_id, Ended(status, {**result.to_json(), "finished_at": utc_now()})
            )
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except LatticeUserError as exc:
            active.error = exc
        except Exception as exc:
            active.error = exc
            log.exception("run %s stopped on an internal error", active.run_id)
        finally:
            try:
                await store.settle()  # the folder says how the run stopped, on disk
            except Exception:
                log.exception("run %s: its folder could not be forced to disk", active.run_id)
            finally:
                if self.active.get(active.run_id) is active:
                    del self.active[active.run_id]
                active.channel.close(status or self.status(active.run_id))

    def _remember(self, run_id: str, ended: Ended) -> None:
        """Keep how a run ended (before its stream's ``end`` goes out)."""
        self.ended.pop(run_id, None)
        self.ended[run_id] = ended
        while len(self.ended) > ENDED_KEPT:
            self.ended.pop(next(iter(self.ended)), None)

    def cancel(self, run_id: str) -> None:
        """Stop a run this server runs at its next op boundary (it ends interrupted)."""
        active = self.active.get(run_id)
        if active is None:
            status = self.status(run_id)
            hint = (
                "it runs in another process; stop it there"
                if status == "running"
                else "only a running run can be cancelled"
            )
            raise ApiError(
                409, "conflict", f"run {run_id} is {status}; {hint}", extra={"status": status}
            )
        if active.runner is None or not active.runner.request_stop(run_id):
            raise ApiError(
                409, "conflict", f"run {run_id} is ending already", extra={"status": "running"}
            )
        active.stop_asked = True

    async def shutdown(self) -> None:
        """Cancel every run this server runs (each ends interrupted, resumable) and wait
        for their folders to say so."""
        self.closing = True
        tasks = [a.task for a in self.active.values() if a.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- reading runs back -----------------------------------------------------------

    def describe(self, run_id: str) -> dict[str, Any]:
        """Everything the API says about one run."""
        folder = self.folder(run_id)
        checkpoint = load_checkpoint(folder)
        checkpoint = checkpoint if isinstance(checkpoint, dict) else {}
        ended = None if run_id in self.active else self.ended_ahead(run_id, checkpoint)
        status = ended.status if ended is not None else self.status(run_id, checkpoint)
        # A run killed while running left the result.json and failure report of an
        # earlier stop, if any: they are read only when the checkpoint says it stopped.
        stopped = checkpoint.get("status") != "running"
        if ended is not None:  # ended here; its folder does not say so yet
            result: Any = ended.result
        else:
            result = read_json(folder / "result.json") if stopped else None
        result = result if isinstance(result, dict) else {}
        meta = checkpoint.get("meta") or {}
        usage = result.get("usage") or checkpoint.get("usage")
        failure = None
        if (stopped or ended is not None) and status in ("failed", "halted", "interrupted"):
            if ended is None:
                failure = read_json(folder / "failure_report.json")
            failure = failure or result.get("failure")
            if isinstance(failure, dict):  # what to do next, said in this API's terms
                details = failure.get("details") or {}
                own = details.get("recovery_action")
                step = own if isinstance(own, str) else next_step(run_id, status)
                resumable = details.get("resumable") is not False
                failure = {**failure, "recovery_action": step, "resumable": resumable}
        elif status == "interrupted":
            failure = {
                "phase": "run",
                "run_id": run_id,
                "category": "interrupted",
                "summary": "the process that ran it stopped while it was running",
                "recovery_action": next_step(run_id, status),
                "resumable": True,
            }
        out: dict[str, Any] = {
            "run_id": run_id,
            "status": status,
            "workflow": meta.get("workflow") or result.get("workflow"),
            "workflow_name": meta.get("workflow_name"),
            "workflow_version": meta.get("workflow_version"),
            "started_by": meta.get("started_by"),
            "started_at": checkpoint.get("started_at"),
            "finished_at": result.get("finished_at") if status != "running" else None,
            "output": result.get("output") if status == "completed" else None,
            "usage": usage,
            "cost_usd": (usage or {}).get("estimated_cost_usd"),
            "failure": failure,
            "question": question(run_id, failure) if status == "halted" else None,
            "parent": checkpoint.get("parent"),
            "reruns": reruns_of(folder),
            "links": links(run_id),
        }
        active = self.active.get(run_id)
        if active is not None and active.stop_asked:
            out["stopping"] = True
        return out

    def summary(self, run_id: str) -> dict[str, Any]:
        """A run as ``GET /v1/runs`` lists it (cached until its folder's files change)."""
        folder = self.runs_dir / run_id
        key = (_mtime(folder / "checkpoint.json"), _mtime(folder / "result.json"))
        cached = self._summaries.get(run_id)
        if cached is None or cached[0] != key:
            checkpoint = load_checkpoint(folder)
            checkpoint = checkpoint if isinstance(checkpoint, dict) else {}
            result = read_json(folder / "result.json")
            result = result if isinstance(result, dict) else {}
            meta = checkpoint.get("meta") or {}
            usage = result.get("usage") or checkpoint.get("usage") or {}
            failure = result.get("failure") or {}
            base = {
                "run_id": run_id,
                "workflow": meta.get("workflow") or result.get("workflow"),
                "workflow_name": meta.get("workflow_name"),
                "workflow_version": meta.get("workflow_version"),
                "started_by": meta.get("started_by"),
                "started_at": checkpoint.get("started_at"),
                "finished_at": result.get("finished_at"),
                "calls": usage.get("calls", 0),
                "tokens": (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0),
                "cost_usd": usage.get("estimated_cost_usd"),
                "failure_category": failure.get("category"),
                "parent": checkpoint.get("parent"),
                "links": {"self": f"/v1/runs/{run_id}", "events": f"/v1/runs/{run_id}/events"},
            }
            cached = (key, base, status_fields(checkpoint))
            self._summaries[run_id] = cached
        _key, base, owned = cached
        ended = None if run_id in self.active else self.ended_ahead(run_id, owned)
        status = ended.status if ended is not None else self.status(run_id, owned)
        out = {**base, "status": status}
        if ended is not None:  # ended here; its folder does not say so yet
            usage = ended.result.get("usage") or {}
            out["finished_at"] = ended.result.get("finished_at")
            out["calls"] = usage.get("calls", 0)
            out["tokens"] = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
            out["cost_usd"] = usage.get("estimated_cost_usd")
            out["failure_category"] = (ended.result.get("failure") or {}).get("category")
        elif owned.get("status") == "running":  # result.json is a former stop's
            out["finished_at"] = None
            out["failure_category"] = "interrupted" if status == "interrupted" else None
        return out

    def list_runs(
        self,
        *,
        status: str | None,
        workflow: str | None,
        limit: int,
        before: str | None,
        search: str | None = None,
    ) -> dict[str, Any]:
        """Runs newest first (run ids sort by start time), ``limit`` at a time; ``before``
        is the ``next`` of the previous page. ``search``: words that must each be found
        (any case) in the run's id, workflow, workflow name, status or start time."""
        words = (search or "").lower().split()
        try:
            names = [
                entry.name
                for entry in os.scandir(self.runs_dir)
                if entry.is_dir() and RUN_ID.match(entry.name)
            ]
        except FileNotFoundError:
            names = []
        names.extend(run_id for run_id in list(self.active) if run_id not in names)
        names.sort(reverse=True)
        items: list[dict[str, Any]] = []
        next_page = None
        for name in names:
            if before is not None and name >= before:
                continue
            item = self.summary(name)
            if status is not None and item["status"] != status:
                continue
            if workflow is not None and not of_workflow(
                workflow,
                names=(item["workflow"], item["workflow_name"]),
                version=item["workflow_version"],
            ):
                continue
            if words and not matches(item, words):
                continue
            if len(items) == limit:
                next_page = items[-1]["run_id"]
                break
            items.append(item)
        return {"runs": items, "next": next_page}


SEARCHED = ("run_id", "workflow", "workflow_name", "status", "started_at")
"""The fields of a listed run that ``GET /v1/runs?q=`` searches."""


def matches(item: dict[str, Any], words: list[str]) -> bool:
    """Whether every word is in one of the run's searched fields (any case)."""
    text = " ".join(str(item.get(key) or "") for key in SEARCHED).lower()
    return all(word in text for word in words)


def next_step(run_id: str, status: str) -> str:
    """What a client does about a run that stopped with ``status``."""
    if status == "halted":
        return f'POST /v1/runs/{run_id}/answers {{"answers": {{"<nodeId>": "<answer>"}}}}'
    if status == "failed":
        return (
            f"fix the cause, then POST /v1/runs/{run_id}/resume (the failed op runs again; "
            "completed ops do not)"
        )
    return f"POST /v1/runs/{run_id}/resume (completed ops do not run again)"


def question(run_id: str, failure: Any) -> dict[str, Any] | None:
    """The question a halted run waits on, and how to answer it (``session``: a branch
    session waits for the person's next message, ``/done`` ends it)."""
    if isinstance(failure, dict) and failure.get("category") == APPROVAL:
        return approval_question(run_id, failure)
    if not isinstance(failure, dict) or failure.get("category") not in QUESTION_CATEGORIES:
        return None
    details = failure.get("details") or {}
    node = failure.get("node_id")
    options = details.get("options") or []
    return {
        "node_id": node,
        "kind": failure.get("category"),
        "question": details.get("question") or failure.get("summary"),
        "options": options,
        "multi_select": bool(details.get("multiSelect")),
        "session": bool(details.get("session")),
        "answer": {
            "method": "POST",
            "href": f"/v1/runs/{run_id}/answers",
            "body": {"answers": {node: options[0] if options else "<your answer>"}},
        },
    }


def approval_question(run_id: str, failure: dict[str, Any]) -> dict[str, Any]:
    """The agent's tool calls a halted run waits to have approved, and how to answer."""
    approvals = (failure.get("details") or {}).get("approvals") or []
    return {
        "node_id": failure.get("node_id"),
        "kind": APPROVAL,
        "question": failure.get("summary"),
        "approvals": approvals,
        "answer": {
            "method": "POST",
            "href": f"/v1/runs/{run_id}/answers",
            "body": {"approvals": {item["id"]: "allow" for item in approvals}},
        },
    }


def status_fields(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's status is told from in its checkpoint (its status and owner), the
    rest (state, answers, digests, meta…) left out: the run list caches this much per
    run folder."""
    return {name: checkpoint[name] for name in ("status", "owner") if name in checkpoint}


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0
