"""The contract engine: one LLM artifact, validated, repaired, escalated, under recovery policies.

Used by LLM_WRITE ops in workflows and by ``LLMPrimitive`` alike (one implementation,
two entry points). Each attempt sends a request, records what came back and checks
it (``lattice.contracts.validation``); after a failure, the first strategy of the
error type's policy stack that can still apply (``lattice.contracts.recovery``)
prepares the next attempt or ends the call.

Unless the contract is strict (``strict_output``), a reply that holds exactly one JSON value
with prose or fence markers around it is accepted without a round trip: the value is
checked as if it had been sent alone and an ``output_salvaged`` event says what was taken
away. The request carries the schema twice over only on paper: ``response_schema`` for
providers that send it natively, and in the prompt (``LLMRequest.prompt_schema`` names its
text there, which such a provider takes out of the messages it sends).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lattice.contracts.calls import DEFAULT_SAMPLING, CallEnv, Sampling
from lattice.contracts.errors import OutputInvalid
from lattice.contracts.invariants import BoundInvariant
from lattice.contracts.packets import REPAIR_CONTEXT_CHARS
from lattice.contracts.policies import policy_stack
from lattice.contracts.recovery import RECOVERIES, CallState, Recovery
from lattice.contracts.validation import OutputValidator
from lattice.errors import LatticeRunError
from lattice.llm.base import LLMRequest, LLMResponse, Message, canonical_json
from lattice.schema_formats import without_opt_out


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
    strict_output: bool = False
    """True: prose around the JSON is an ``explanatory_text`` violation (repaired like any
    other); False: a reply holding exactly one valid JSON value is salvaged."""
    max_attempts_total: int | None = None
    """Requests of one call in all (None: ``max_attempts`` per class × the ladder)."""
    repair_context_chars: int = REPAIR_CONTEXT_CHARS
    """The cap on the input lines a repair packet quotes (0: none)."""
    formats: bool = True
    """Assert the schema's formats (``lattice.schema_formats``) unless it opts out."""

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
        if self.schema is None:
            return "(none)"
        return json.dumps(without_opt_out(self.schema), ensure_ascii=False)


class ContractEngine:
    """Compiled once per op (validator, invariants); ``run`` executes one artifact request."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.checks = OutputValidator(
            contract.schema, contract.invariants, formats=contract.formats
        )
        self._builtins = {"rules": contract.rules(), "schema": contract.schema_text()}
        self._schema_json = "null" if contract.schema is None else canonical_json(contract.schema)

    def validate(self, text: str, *, salvage: bool = False) -> Any:
        """The artifact in ``text``, or OutputInvalid / NeedsHuman / LatticeRunError(invalid_request).

        Strict unless ``salvage``: any text around the JSON is reported (``run`` salvages
        as the contract says)."""
        return self.checks.check(text, salvage=salvage)

    def builtins(self) -> dict[str, str]:
        """The contract as prompt text: ``{"rules": ..., "schema": ...}``."""
        return dict(self._builtins)

    # long: every attempt of a model call sent and checked in this one frame, without a coroutine per attempt (per-op cost)
    async def run(
        self,
        messages: tuple[Message, ...],
        env: CallEnv,
        *,
        sampling: Sampling = DEFAULT_SAMPLING,
        model: str | None = None,
        node_id: str | None = None,
        op_id: str | None = None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Return (artifact, attempts) or raise with ``details["attempts"]`` filled in.

        Most calls end with a valid first answer: the call's ``CallState`` is made only
        when an attempt fails (a recovery reads and moves it), and each attempt is sent
        and checked here, without a coroutine of its own. Such a call returns no
        attempts when ``env.records`` is off, and with ``env.log`` set its events are
        kept compact: its prompt is then hashed only if they are read."""
        contract = self.contract
        attempts: list[dict[str, Any]] | None = None  # made by the first record
        number = 0
        state: CallState | None = None
        model_class = contract.ladder[0]
        request_messages, kind = messages, "initial"
        prompt_schema = None if contract.schema is None else self._builtins["schema"]
        schema_json = self._schema_json
        salvage = not contract.strict_output
        checks = self.checks
        usage, budget, log = env.usage, env.budget, env.log
        while True:
            concrete = (
                model
                if model is not None and (state is None or state.class_index == 0)
                else env.models.get(model_class)
            )
            number += 1
            request = LLMRequest(
                messages=request_messages,
                model_class=model_class,
                model=concrete,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                response_schema=without_opt_out(contract.schema),
                prompt_schema=prompt_schema,
                node_id=node_id,
                op_id=op_id,
                on_delta=_delta_sink(env, number, model_class) if env.stream else None,
                kind=kind,
            )
            request_chars = request.size_chars()
            # The attempt's record is made only once the answer (or the error) is in, so
            # that it is not held while the request waits, and for an answer that passes
            # at once only when the caller keeps records (``CallEnv.records``).
            attempt: dict[str, Any] | None = None
            prompt_hash: str | None = None
            response: LLMResponse | None = None
            started = 0.0
            try:
                budget.check(usage)
                usage.requests += 1
                requested = (
                    None
                    if log is None
                    else log.requested(request, number, kind, request_chars, schema_json)
                )
                if requested is None:
                    prompt_hash = self._requesting(request, env, number, kind, request_chars)
                started = time.perf_counter()
                response = await env.provider.complete(request)
                response_usage = response.usage
                usage.add(response.model, model_class, response_usage)
                if requested is None or not log.answered(  # type: ignore[union-attr]
                    requested, request, response
                ):
                    if prompt_hash is None:
                        prompt_hash = request.prompt_hash(schema_json=schema_json)
                    self._answered(request, response, env, number, prompt_hash)
                if state is not None:
                    state.in_class += 1
                if checks.takes_any_text:
                    value, salvaged = response.text, None
                else:
                    checked = (
                        await asyncio.to_thread(checks.inspect, response.text, salvage=salvage)
                        if checks.uses_patterns  # a slow pattern must not hold up other runs
                        else checks.inspect(response.text, salvage=salvage)
                    )
                    value, salvaged = checked.value, checked.salvaged
                if salvaged is not None:
                    env.emit(
                        "output_salvaged",
                        {"attempt": number, "model_class": model_class, **salvaged},
                    )
            except LatticeRunError as exc:
                attempt = self._failed_record(
                    number, kind, request, request_chars, prompt_hash, response, started
                )
                if attempts is None:
                    attempts = []
                attempts.append(attempt)
                if state is None:
                    state = self._call_state(
                        messages, attempts, in_class=1 if response is not None else 0
                    )
                self._failed(exc, attempt, state, env)
                await self._recovery(exc, state, env).prepare(exc, state, env)
                model_class, request_messages, kind = (
                    state.model_class,
                    state.request_messages,
                    state.kind,
                )
            else:
                if attempts is None and env.records:
                    attempts = []
                if attempts is not None:
                    attempt = self._record(
                        number, kind, request, request_chars, prompt_hash, response
                    )
                    if salvaged is not None:
                        attempt["salvaged"] = salvaged
                    attempt["ok"] = True
                    attempts.append(attempt)
                return value, [] if attempts is None else attempts

    def _failed_record(
        self,
        number: int,
        kind: str,
        request: LLMRequest,
        request_chars: int,
        prompt_hash: str | None,
        response: LLMResponse | None,
        started: float,
    ) -> dict[str, Any]:
        """The record of an attempt that failed: refused before it was sent (``started``
        0), sent and the provider raised, or answered and the answer did not pass."""
        waited = time.perf_counter() - started
        if prompt_hash is None and started:  # sent: its hash belongs in the record
            prompt_hash = request.prompt_hash(schema_json=self._schema_json)
        attempt = self._record(number, kind, request, request_chars, prompt_hash, response)
        if response is None and started:  # the provider raised
            attempt["latency_ms"] = round(waited * 1000, 3)
        return attempt

    def _record(
        self,
        number: int,
        kind: str,
        request: LLMRequest,
        request_chars: int,
        prompt_hash: str | None,
        response: LLMResponse | None,
    ) -> dict[str, Any]:
        """An attempt's record: its request (with the prompt hash once it was sent) and
        what came back, if anything did."""
        if prompt_hash is None and response is not None:
            prompt_hash = request.prompt_hash(schema_json=self._schema_json)
        attempt = _attempt_record(number, kind, request, request_chars, prompt_hash)
        if response is not None:
            _add_answer(attempt, response)
        return attempt

    def _call_state(
        self, messages: tuple[Message, ...], attempts: list[dict[str, Any]], *, in_class: int
    ) -> CallState:
        """The state of a call whose first attempt failed, for the recoveries to move."""
        contract = self.contract
        return CallState(
            messages=messages,
            ladder=contract.ladder,
            max_attempts=contract.max_attempts,
            builtins=self._builtins,
            max_attempts_total=contract.max_attempts_total,
            repair_context_chars=contract.repair_context_chars,
            in_class=in_class,
            attempts=attempts,
        )

    @staticmethod
    def _failed(
        exc: LatticeRunError, attempt: dict[str, Any], state: CallState, env: CallEnv
    ) -> None:
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
                    "model_class": state.model_class,
                    "violations": violations,
                },
            )
            state.remember(attempt.get("completion", ""), violations)
            state.remember_value(exc, attempt["number"])

    def _recovery(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> Recovery:
        """The first strategy of the error's policy stack that can still apply."""
        for action in policy_stack(exc.error_type, self.contract.policies, env.base_policies):
            recovery = RECOVERIES.get(action)
            if recovery is not None and recovery.applies(exc, state, env):
                return recovery
        return RECOVERIES["fail"]

    def _requesting(
        self, request: LLMRequest, env: CallEnv, number: int, kind: str, request_chars: int
    ) -> str:
        """Emit the attempt's ``llm_request`` event; return its prompt hash."""
        prompt_hash = request.prompt_hash(schema_json=self._schema_json)
        env.emit(
            "llm_request",
            {
                "model": request.model,
                "model_class": request.model_class,
                "prompt_hash": prompt_hash,
                "attempt": number,
                "kind": kind,
                "request_chars": request_chars,
                "prompt_preview": request.preview(),
            },
        )
        if env.content:
            env.emit("llm_content", {"attempt": number, "messages": _listed(request.messages)})
        return prompt_hash

    @staticmethod
    def _answered(
        request: LLMRequest, response: LLMResponse, env: CallEnv, number: int, prompt_hash: str
    ) -> None:
        """Emit the attempt's ``llm_response`` event (and its content, when asked)."""
        usage = response.usage
        env.emit(
            "llm_response",
            {
                "model": response.model,
                "model_class": request.model_class,
                "prompt_hash": prompt_hash,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "latency_ms": round(response.latency_ms, 3),
                "finish_reason": response.finish_reason,
            },
        )
        if env.content:
            env.emit(
                "llm_content",
                {
                    "attempt": number,
                    "completion": response.text,
                    "finish_reason": response.finish_reason,
                },
            )


def _listed(messages: tuple[Message, ...]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def _attempt_record(
    number: int, kind: str, request: LLMRequest, request_chars: int, prompt_hash: str | None
) -> dict[str, Any]:
    """An attempt's record as far as its request goes (what came back is added to it)."""
    attempt: dict[str, Any] = {
        "number": number,
        "kind": kind,
        "model_class": request.model_class,
        "request_chars": request_chars,
        "messages": _listed(request.messages),
    }
    if prompt_hash is not None:
        attempt["prompt_hash"] = prompt_hash
    return attempt


def _add_answer(attempt: dict[str, Any], response: LLMResponse) -> None:
    """What came back, added to an attempt's record."""
    usage = response.usage
    attempt["model"] = response.model
    attempt["completion"] = response.text
    attempt["input_tokens"] = usage.input_tokens
    attempt["output_tokens"] = usage.output_tokens
    attempt["latency_ms"] = round(response.latency_ms, 3)
    attempt["finish_reason"] = response.finish_reason


def _delta_sink(env: CallEnv, attempt: int, model_class: str) -> Callable[[str], None]:
    """``LLMRequest.on_delta`` of one attempt: an ``llm_delta`` event per piece of text
    (through ``env.emit`` as it is when the piece arrives)."""

    def on_delta(text: str) -> None:
        if text:
            env.emit("llm_delta", {"attempt": attempt, "model_class": model_class, "text": text})

    return on_delta
