"""What ``POST /v1/runs`` asks to run, read the same way for every backend: the workflow
(a file under ``--workflows``, a deployed version by name, or an inline document)
lowered, and the run's options. Each backend then prepares and starts the run its own
way (``folder_backend.py``, ``remote.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lattice.config import LatticeConfig
from lattice.ir.models import ExecIR
from lattice.lower.compiler import LoweringResult
from lattice.runs.redaction import Redactor
from lattice.server.bodies import StartRun
from lattice.server.errors import document_error
from lattice.server.services import Services
from lattice.server.workflows import WorkflowLibrary
from lattice.service.runs import ProviderSpec, RunOptions
from lattice.services.runs import version_meta


@dataclass(frozen=True)
class Gateway:
    """What a backend of the gateway reads requests with."""

    library: WorkflowLibrary
    services: Services
    """The deployed versions a request may name (none on an engine's backend)."""
    config: LatticeConfig
    config_path: str | None
    redact: Redactor


@dataclass(frozen=True)
class Requested:
    """A run's workflow as a request names it, lowered."""

    lowered: LoweringResult
    """Its lowering (the 202 says its warnings)."""
    ir: ExecIR
    """The IR the run runs (a deployed version's own, when the request names one)."""
    document: dict[str, Any]
    meta: dict[str, Any]
    """What the run's metadata says of it (``workflow_name``, its version, ``started_by``)."""


def requested_workflow(body: StartRun, gateway: Gateway) -> Requested:
    """The workflow ``body`` names, lowered: 404 when there is none, 422 when it cannot be
    lowered (CPU work that grows with the document: call it off the event loop)."""
    library, services = gateway.library, gateway.services
    meta: dict[str, Any] = {"started_by": {"via": "api"}}
    ir: ExecIR | None = None
    if body.workflow is not None and services.names_version(body.workflow):
        workflow = services.resolve(body.workflow)
        lowered = LoweringResult(workflow.ir, [])
        document, ir = workflow.document, workflow.ir
        meta.update({"workflow_name": workflow.name, **version_meta(workflow)})
        where = f"workflow {body.workflow!r}"
    elif body.workflow is not None:
        loaded = library.load(body.workflow)
        lowered, document = loaded.lowered, loaded.document
        meta["workflow_name"] = body.workflow
        where = f"workflow {body.workflow!r}"
        if lowered.ir is not None and (versioned := services.file(body.workflow)):
            # the deployed version's IR, so that the run records the IR it runs
            meta.update({"workflow_name": versioned.name, **version_meta(versioned)})
            document, ir = versioned.document, versioned.ir
    else:
        assert body.document is not None
        lowered, document = library.lower_inline(body.document), body.document
        where = "the document"
    if lowered.ir is None:
        raise document_error(lowered.diagnostics, where=where)
    return Requested(lowered, ir or lowered.ir, document, meta)


def run_options(
    body: StartRun, spec: ProviderSpec, gateway: Gateway, *, meta: dict[str, Any]
) -> RunOptions:
    """The options of the run ``body`` asks for, with the provider ``spec``."""
    return RunOptions(
        provider=spec,
        config_path=gateway.config_path,
        max_calls=body.max_calls,
        max_tokens_total=body.max_tokens_total,
        max_steps=body.max_steps,
        max_visits=body.max_visits,
        meta=meta,
    )
