"""The request bodies of ``lattice serve``'s routes (docs/server.md), shared by the
run-folder routes (``app.py``) and those of runs on a backend (``remote.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lattice.permissions.approvals import APPROVALS, check_approvals
from lattice.server.errors import ApiError
from lattice.server.workflows import WorkflowLibrary
from lattice.service.providers import ProviderChoice
from lattice.service.runs import ProviderSpec


class ProviderOptions(BaseModel):
    """The provider of a run, as ``lattice run`` takes it (files relative to ``--workflows``)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["openai", "anthropic", "litellm", "mock", "fixture", "disabled"] | None = (
        Field(default=None, description="default: the server's config, else disabled")
    )
    mock: str | None = Field(
        default=None, description="a mock script file, relative to --workflows"
    )
    mock_script: dict[str, Any] | None = Field(
        default=None, description='a mock script given inline: {"responses": {"<node>": [...]}}'
    )
    mock_latency_ms: float | None = Field(
        default=None,
        ge=0,
        le=60_000,
        description="a pause before each mock answer (demos, benchmarks)",
    )
    mock_pieces: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="stream each mock answer in this many pieces over its pause (demos, tests)",
    )
    fixtures: str | None = Field(
        default=None, description="a fixtures file, relative to --workflows"
    )

    def spec(self, library: WorkflowLibrary) -> ProviderSpec:
        mock = str(library.resolve(self.mock, what="mock script")) if self.mock else None
        fixtures = (
            str(library.resolve(self.fixtures, what="fixtures file")) if self.fixtures else None
        )
        return ProviderSpec(
            ProviderChoice(name=self.provider, mock=mock, fixtures=fixtures),
            script=self.mock_script,
            latency=(self.mock_latency_ms or 0.0) / 1000,
            pieces=self.mock_pieces or 0,
        )


class StartRun(ProviderOptions):
    """``POST /v1/runs``: a workflow by name, or a document, with its inputs and answers."""

    workflow: str | None = Field(
        default=None,
        description="a workflow file, relative to --workflows, or a workflow's name: "
        "NAME or NAME@VERSION (a deployed version; NAME@latest is the file as it is now)",
    )
    document: dict[str, Any] | None = Field(default=None, description="an inline workflow document")
    inputs: dict[str, Any] = Field(default_factory=dict)
    answers: dict[str, Any] = Field(
        default_factory=dict, description='answers to questions: {"<nodeId>": "<option>"}'
    )
    max_calls: int | None = Field(default=None, ge=1)
    max_tokens_total: int | None = Field(default=None, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    max_visits: int | None = Field(default=None, ge=1)


class AnswerRun(BaseModel):
    """``POST /v1/runs/{id}/answers``."""

    model_config = ConfigDict(extra="forbid")

    answers: dict[str, Any] = Field(
        default_factory=dict, description='{"<nodeId>": "<option label or index, or text>"}'
    )
    approvals: dict[str, Any] = Field(
        default_factory=dict,
        description='agents\' tool calls waiting for approval: {"<approval id>" or "*": '
        '"allow" | "allow_run" | "deny" | {"decision": "deny", "reason": "..."}}',
    )

    @model_validator(mode="after")
    def _something(self) -> AnswerRun:
        if not self.answers and not self.approvals:
            raise ValueError("give answers, approvals or both")
        problems = check_approvals(self.approvals)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def all_answers(self, door: str = "gateway") -> dict[str, Any]:
        """The answers with the approvals among them, each saying the door it came by
        (``gateway``, or ``panel`` for the panel's)."""
        if not self.approvals:
            return dict(self.answers)
        given = {
            key: {"decision": value, "door": door}
            if isinstance(value, str)
            else {**value, "door": door}
            for key, value in self.approvals.items()
        }
        return {**self.answers, APPROVALS: given}


class ResumeRun(ProviderOptions):
    """``POST /v1/runs/{id}/resume``: the run's own provider unless another is given."""

    answers: dict[str, Any] = Field(default_factory=dict)
    accept_changed: bool = False

    @model_validator(mode="after")
    def _no_approvals(self) -> ResumeRun:
        # approvals come by /answers, checked and marked with the door they came by
        if APPROVALS in self.answers:
            raise ValueError(f"approvals go to POST /v1/runs/{{id}}/answers, not in {APPROVALS}")
        return self


class RerunRun(ProviderOptions):
    """``POST /v1/runs/{id}/rerun``: a new run from one step of this one, with the state
    it had there (edited where ``state`` says). The run's own provider unless another is
    given."""

    op: str = Field(description="the op to start from (an op id of the run's ExecIR)")
    visit: int | None = Field(
        default=None, ge=1, description="which visit of the op (default: the last)"
    )
    state: dict[str, Any] | None = Field(
        default=None,
        description='the state to start with, {"in": {...}, "vars": {...}} (each part given '
        "replaces the parent's; default: the parent's state before that visit)",
    )


class CheckDocument(BaseModel):
    """``POST /v1/check``."""

    model_config = ConfigDict(extra="forbid")

    document: dict[str, Any]


def check_start(body: StartRun) -> None:
    """422 unless the body names exactly one of a workflow file and an inline document."""
    if (body.workflow is None) == (body.document is None):
        raise ApiError(
            422,
            "invalid_request",
            "give either workflow (a file under the workflows folder) or document "
            "(an inline workflow document)",
            diagnostics=[
                {
                    "code": "invalid-request",
                    "severity": "error",
                    "message": "exactly one of workflow and document",
                    "pointer": "/workflow",
                }
            ],
        )
