"""The model-as-judge scorer: a model grades a row against a rubric, under contract.

The judge is an ``LLMPrimitive`` (``lattice.primitive``): its answer must fit a pydantic
model, ``{"score": <1…scale>, "reason": "…"}``, and an answer that does not is repaired
and escalated exactly as any LLM op's (the contract engine, the configured policies).
Its model calls and repairs are counted per row and in the report. The block is named
after the scorer: a mock script answers it under that name, each row from the start
of the script (as a batch's rows are).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, create_model

from lattice.evals.scorers import Case, Score, ScorerSpec
from lattice.llm.base import LLMProvider
from lattice.llm.mock import MockProvider
from lattice.primitive import LLMPrimitive
from lattice.runtime.settings import RuntimeSettings

JUDGE_SYSTEM = (
    "You grade the answer of an automated workflow against a rubric. Read the inputs the "
    "workflow was given, its output and, when there is one, the expected output. Give a "
    "grade from 1 (fails the rubric) to {scale} (fully meets it) and one sentence saying "
    "why.\n\nRubric:\n{rubric}"
)


def grade_model(scale: int) -> type[BaseModel]:
    """The judge's answer: ``score`` an integer from 1 to ``scale``, ``reason`` a text."""
    return create_model(
        "JudgeGrade",
        score=(int, Field(ge=1, le=scale, description=f"the grade, 1 to {scale}")),
        reason=(str, Field(min_length=1, description="why, in one sentence")),
    )


@dataclass
class JudgeModel:
    """Where judges' calls go: a provider every call shares, or a mock script each row
    runs from its start."""

    provider: LLMProvider | None = None
    script: Mapping[str, Any] | None = None
    settings: RuntimeSettings | None = None

    def provider_for_call(self) -> LLMProvider | None:
        if self.script is not None:
            return MockProvider.from_script(self.script)
        return self.provider


class JudgeScorer:
    """Grades each row with a model (see the module docstring); the score is the grade
    mapped to 0…1 (``(grade - 1) / (scale - 1)``; a scale of 1 gives 1)."""

    def __init__(self, spec: ScorerSpec, model: JudgeModel) -> None:
        self.spec = spec
        self.model = model
        self.scale = int(spec.params.get("scale", 5))
        self.output_model = grade_model(self.scale)
        self.system = JUDGE_SYSTEM.format(scale=self.scale, rubric=spec.params["rubric"])
        # built now, so that a mock script without answers for this scorer is refused
        # before anything runs
        first = self._block(model.provider_for_call())
        self._shared = None if model.script is not None else first

    def _block(self, provider: LLMProvider | None) -> LLMPrimitive[Any]:
        return LLMPrimitive(
            name=self.spec.name,
            system_prompt=self.system,
            output_model=self.output_model,
            model_class=self.spec.params.get("model_class", "default"),
            provider=provider,
            settings=self.model.settings,
        )

    async def __call__(self, case: Case) -> Score:
        block = self._shared or self._block(self.model.provider_for_call())
        payload: dict[str, Any] = {"inputs": dict(case.inputs), "output": case.actual}
        if case.has_expected:
            payload["expected"] = case.expected
        response = await block.arun(json.loads(json.dumps(payload, default=str)))
        calls = len(response.attempts)
        repairs = sum(1 for attempt in response.attempts if attempt.get("kind") == "repair")
        if not response.ok or response.value is None:
            reason = response.error.message if response.error is not None else "no grade"
            return Score(
                0.0, f"the judge gave no valid grade: {reason}", calls=calls, repairs=repairs
            )
        grade = int(response.value["score"])
        value = 1.0 if self.scale == 1 else (grade - 1) / (self.scale - 1)
        detail = "" if value == 1.0 else f"graded {grade}/{self.scale}: {response.value['reason']}"
        return Score(
            value,
            detail,
            extra={"grade": grade, "reason": response.value["reason"]},
            calls=calls,
            repairs=repairs,
        )
