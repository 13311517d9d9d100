"""The contract engine: one LLM artifact, validated, repaired, escalated, under recovery policies.

Used by LLM_WRITE ops in workflows and by ``LLMPrimitive`` alike (one implementation,
two entry points). Pipeline for each completion, each failure with its own error type:

1. JSON extraction (``json_error``, ``explanatory_text``, ``multiple_artifacts``)
2. failure parser (``{"error": "missing_information"|"invalid_request", "details": ...}``)
3. JSON Schema, Draft 2020-12, every violation with its JSON pointer (``schema_error``)
4. named invariants (``code_in_output``, ``invalid_diff``, ``invariant_error``)

Free-text contracts (no schema) skip 1-3. What happens after a failure is decided
by the policy stack of its error type (``lattice.runtime.policies``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from lattice.errors import LatticeRunError
from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, Message, canonical_json
from lattice.prompts.builtin import REPAIR
from lattice.runtime.extract import ExtractionError, extract_json
from lattice.runtime.invariants import BoundInvariant
from lattice.runtime.policies import DEFAULT_POLICIES, RetrySettings, policy_stack
from lattice.runtime.results import Usage

Emit = Callable[[str, dict[str, Any]], Any]
Sleep = Callable[[float], Awaitable[None]]


class OutputInvalid(LatticeRunError):
    """A completion that breaks the contract; ``violations`` are ``{pointer, message}``."""

    def __init__(self, message: str, *, error_type: str, violations: list[dict[str, str]]) -> None:
        super().__init__(message, error_type=error_type, details={"violations": violations})
        self.violations = violations


class NeedsHuman(LatticeRunError):
    """The model answered ``missing_information``: a person must supply it."""

    error_type = "missing_information"


@dataclass(frozen=True)
class Contract:
    """What an artifact must satisfy and how hard to try."""

    schema: dict[str, Any] | None = None
    invariants: tuple[BoundInvariant, ...] = ()
    max_attempts: int = 3
    """Attempts per model class (the first call plus repairs)."""
    ladder: tuple[str, ...] = ("default",)
    """Model classes to try, in order (escalation moves one step)."""
    policies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per-error-type overrides of the default policy stacks."""

    def rules(self) -> str:
        lines = []
        if self.schema is not None:
            lines += [
                "- Reply with JSON only: no prose before or after it, no markdown fences.",
                "- Exactly one artifact (one JSON value).",
                "- It must validate against the JSON Schema below.",
            ]
        # an invariant without a rule text (LLMPrimitive's pydantic check) adds no line
        lines += [f"- {inv.definition.rule}" for inv in self.invariants if inv.definition.rule]
        return "\n".join(lines) if lines else "- Answer the request directly."

    def schema_text(self) -> str:
        return json.dumps(self.schema, ensure_ascii=False) if self.schema is not None else "(none)"


@dataclass
class Budget:
    """Per-run caps on model calls and tokens (repairs included)."""

    max_calls: int | None = None
    max_tokens: int | None = None

    def check(self, usage: Usage) -> None:
        if self.max_calls is not None and usage.calls >= self.max_calls:
            raise LatticeRunError(
                f"the run's call budget of {self.max_calls} model calls is spent",
                error_type="budget_exceeded",
                details={"calls": usage.calls, "max_calls": self.max_calls},
            )
        if self.max_tokens is not None and usage.total_tokens >= self.max_tokens:
            raise LatticeRunError(
                f"the run's token budget of {self.max_tokens} tokens is spent ({usage.total_tokens} used)",
                error_type="budget_exceeded",
                details={"tokens": usage.total_tokens, "max_tokens": self.max_tokens},
            )


def _discard(type_: str, data: dict[str, Any]) -> None:
    return None


@dataclass
class CallEnv:
    """Everything a contract call needs from its surroundings."""

    provider: LLMProvider
    usage: Usage = field(default_factory=lambda: Usage())
    emit: Emit = _discard
    """Receives each event (type, data); a run context points it at its event log."""
    budget: Budget = field(default_factory=Budget)
    retry: RetrySettings = field(default_factory=RetrySettings)
    sleep: Sleep = asyncio.sleep
    models: Mapping[str, str | None] = field(default_factory=dict)
    """Model class → concrete model (None: the provider's default)."""
    base_policies: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_POLICIES)


@dataclass(frozen=True)
class Sampling:
    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None


class ContractEngine:
    """Compiled once per op (validator, invariants); ``run`` executes one artifact request."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.validator = (
            jsonschema.Draft202012Validator(contract.schema)
            if contract.schema is not None
            else None
        )
        self._rules = contract.rules()
        self._schema_text = contract.schema_text()
        self._schema_json = "null" if contract.schema is None else canonical_json(contract.schema)

    # -- validation ---------------------------------------------------------------------

    def validate(self, text: str) -> Any:
        """The artifact in ``text``, or OutputInvalid / NeedsHuman / LatticeRunError(invalid_request)."""
        if self.validator is None:
            value: Any = text
        else:
            try:
                value = extract_json(text)
            except ExtractionError as exc:
                violations = [{"pointer": "/", "message": exc.message}]
                if "extracted" in exc.details:  # tell the model everything wrong in one packet
                    violations += self._schema_violations(exc.details["extracted"])
                raise OutputInvalid(
                    exc.message, error_type=exc.error_type, violations=violations
                ) from None
            self._failure_parser(value)
            violations = self._schema_violations(value)
            if violations:
                raise OutputInvalid(
                    "the output does not match its schema: "
                    + "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5]),
                    error_type="schema_error",
                    violations=violations,
                )
        for invariant in self.contract.invariants:
            violations = invariant.check(value)
            if violations:
                raise OutputInvalid(
                    f"invariant {invariant.definition.name} fails: "
                    + "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5]),
                    error_type=invariant.definition.error_type,
                    violations=violations,
                )
        return value

    def _schema_violations(self, value: Any) -> list[dict[str, str]]:
        assert self.validator is not None
        errors = sorted(self.validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [
            {"pointer": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message}
            for e in errors
        ]

    def _failure_parser(self, value: Any) -> None:
        if not (isinstance(value, dict) and set(value) <= {"error", "details"}):
            return
        kind = value.get("error")
        details = value.get("details")
        text = details if isinstance(details, str) else json.dumps(details, ensure_ascii=False)
        if kind == "missing_information":
            raise NeedsHuman(
                f"the model needs more information: {text}", details={"missing": details}
            )
        if kind == "invalid_request":
            raise LatticeRunError(
                f"the model rejected the request: {text}",
                error_type="invalid_request",
                details={"reason": details},
            )

    # -- prompts ------------------------------------------------------------------------

    def builtins(self) -> dict[str, str]:
        return {"rules": self._rules, "schema": self._schema_text}

    def repair_messages(self, output: str, violations: list[dict[str, str]]) -> tuple[Message, ...]:
        """The fix-only packet: contract, the invalid output, the exact violations. No original context."""
        listed = "\n".join(f"- {v['pointer']}: {v['message']}" for v in violations) or "- (unknown)"
        system, user = REPAIR.render({**self.builtins(), "output": output, "violations": listed})
        return (Message("system", system), Message("user", user))

    @staticmethod
    def escalation_messages(
        base: tuple[Message, ...], best: tuple[str, list[dict[str, str]]] | None
    ) -> tuple[Message, ...]:
        """The original prompt, plus what the best failed attempt got wrong."""
        if best is None:
            return base
        _, violations = best
        note = (
            "\n\nA previous attempt at this artifact failed validation:\n"
            + "\n".join(f"- {v['pointer']}: {v['message']}" for v in violations[:20])
            + "\nAvoid these mistakes."
        )
        *head, last = base
        return (*head, Message(last.role, last.content + note))

    # -- the loop -----------------------------------------------------------------------

    async def run(
        self,
        messages: tuple[Message, ...],
        env: CallEnv,
        *,
        sampling: Sampling = Sampling(),
        model: str | None = None,
        node_id: str | None = None,
        op_id: str | None = None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Return (artifact, attempts) or raise with ``details["attempts"]`` filled in."""
        contract = self.contract
        attempts: list[dict[str, Any]] = []
        ladder = contract.ladder
        class_index = 0
        in_class = 0
        retries: dict[str, int] = {}
        kind = "initial"
        request_messages = messages
        best: tuple[str, list[dict[str, str]]] | None = None
        while True:
            model_class = ladder[class_index]
            concrete = (
                model if model is not None and class_index == 0 else env.models.get(model_class)
            )
            request = LLMRequest(
                messages=request_messages,
                model_class=model_class,
                model=concrete,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                response_schema=contract.schema,
                node_id=node_id,
                op_id=op_id,
            )
            attempt: dict[str, Any] = {
                "number": len(attempts) + 1,
                "kind": kind,
                "model_class": model_class,
                "request_chars": request.size_chars(),
                "messages": [{"role": m.role, "content": m.content} for m in request_messages],
            }
            attempts.append(attempt)
            try:
                env.budget.check(env.usage)
                self._requesting(request, env, attempt)
                started = time.perf_counter()
                try:
                    response = await env.provider.complete(request)
                except LatticeRunError:
                    attempt["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
                    raise
                self._answered(request, response, env, attempt)
                in_class += 1
                value = self.validate(response.text)
                attempt["ok"] = True
                return value, attempts
            except LatticeRunError as exc:
                attempt["error_type"] = exc.error_type
                attempt["message"] = exc.message
                violations = exc.details.get("violations", [])
                if violations:
                    attempt["violations"] = violations
                if isinstance(exc, OutputInvalid):
                    env.emit(
                        "validation_failed",
                        {
                            "attempt": attempt["number"],
                            "error_type": exc.error_type,
                            "model_class": model_class,
                            "violations": violations,
                        },
                    )
                    text = attempt.get("completion", "")
                    if best is None or len(violations) <= len(best[1]):
                        best = (text, violations)
                action = self._choose(exc, env, retries, in_class, class_index)
                if action == "retry":
                    retries[exc.error_type] = retries.get(exc.error_type, 0) + 1
                    delay = env.retry.delay(retries[exc.error_type] - 1, _retry_after(exc))
                    env.emit(
                        "retry",
                        {
                            "error_type": exc.error_type,
                            "delay_s": round(delay, 3),
                            "retry": retries[exc.error_type],
                        },
                    )
                    await env.sleep(delay)
                    kind = "retry"
                elif action == "repair":
                    assert isinstance(exc, OutputInvalid)
                    request_messages = self.repair_messages(
                        attempt.get("completion", ""), violations
                    )
                    kind = "repair"
                    env.emit(
                        "repair_attempt",
                        {
                            "attempt": attempt["number"] + 1,
                            "model_class": model_class,
                            "error_type": exc.error_type,
                            "violations": violations,
                            "request_chars": sum(len(m.content) for m in request_messages),
                        },
                    )
                elif action == "escalate":
                    class_index += 1
                    in_class = 0
                    kind = "escalation"
                    request_messages = self.escalation_messages(messages, best)
                    env.emit(
                        "escalated",
                        {
                            "from": model_class,
                            "to": ladder[class_index],
                            "error_type": exc.error_type,
                        },
                    )
                else:
                    exc.details["attempts"] = attempts
                    exc.details["action"] = action
                    raise

    def _choose(
        self,
        exc: LatticeRunError,
        env: CallEnv,
        retries: dict[str, int],
        in_class: int,
        class_index: int,
    ) -> str:
        """The first action of the error's policy stack that can still apply."""
        contract = self.contract
        for action in policy_stack(exc.error_type, contract.policies, env.base_policies):
            if action == "retry" and retries.get(exc.error_type, 0) < env.retry.max_retries:
                return action
            if (
                action == "repair"
                and isinstance(exc, OutputInvalid)
                and in_class < contract.max_attempts
            ):
                return action
            if action == "escalate" and class_index + 1 < len(contract.ladder):
                return action
            if action in ("halt", "fail"):
                return action
        return "fail"

    def _requesting(self, request: LLMRequest, env: CallEnv, attempt: dict[str, Any]) -> None:
        prompt_hash = request.prompt_hash(schema_json=self._schema_json)
        attempt["prompt_hash"] = prompt_hash
        env.emit(
            "llm_request",
            {
                "model": request.model,
                "model_class": request.model_class,
                "prompt_hash": prompt_hash,
                "attempt": attempt["number"],
                "kind": attempt["kind"],
                "request_chars": attempt["request_chars"],
                "prompt_preview": request.preview(),
            },
        )

    @staticmethod
    def _answered(
        request: LLMRequest, response: LLMResponse, env: CallEnv, attempt: dict[str, Any]
    ) -> None:
        usage = response.usage
        env.usage.add(response.model, request.model_class, usage)
        latency_ms = round(response.latency_ms, 3)
        attempt["model"] = response.model
        attempt["completion"] = response.text
        attempt["input_tokens"] = usage.input_tokens
        attempt["output_tokens"] = usage.output_tokens
        attempt["latency_ms"] = latency_ms
        attempt["finish_reason"] = response.finish_reason
        env.emit(
            "llm_response",
            {
                "model": response.model,
                "model_class": request.model_class,
                "prompt_hash": attempt["prompt_hash"],
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "latency_ms": latency_ms,
                "finish_reason": response.finish_reason,
            },
        )


def _retry_after(exc: LatticeRunError) -> float | None:
    value = exc.details.get("retry_after")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
