"""Recovery strategies: what a contract call does after a failed attempt.

A policy stack (``lattice.contracts.policies``) names actions in order; each action
is one strategy here. After a failure the engine takes the first strategy of the
error's stack that can still apply, and that strategy prepares the next attempt or
ends the call. Adding an action is one new strategy in ``RECOVERIES`` (and its
name in ``ACTIONS``), not a new branch in the engine.

Every strategy that makes another request (retry, repair, escalate) applies only while
the call's exhaustion budget (``CallState.max_attempts_total``) has attempts left; past
it the stack falls through to ``fail``. A call that ends carries, beside its attempts, its
best effort: the parsed value of the attempt with the fewest violations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from lattice.contracts.calls import CallEnv
from lattice.contracts.errors import OutputInvalid
from lattice.contracts.packets import (
    REPAIR_CONTEXT_CHARS,
    Violation,
    escalation_messages,
    repair_context,
    repair_messages,
)
from lattice.errors import LatticeRunError
from lattice.events import EventKind
from lattice.llm.base import Message


@dataclass
class CallState:
    """Where one contract call stands: its position on the model ladder and its attempts."""

    messages: tuple[Message, ...]
    """The original prompt."""
    ladder: tuple[str, ...]
    max_attempts: int
    """Attempts per model class (the first call plus repairs)."""
    builtins: dict[str, str]
    """The contract's rules and schema text, for repair packets."""
    class_index: int = 0
    in_class: int = 0
    """Attempts answered by the current model class."""
    retries: int = 0
    """Retries so far, of every error type together."""
    kind: str = "initial"
    """What the next attempt is: initial, retry, repair or escalation."""
    request_messages: tuple[Message, ...] = ()
    attempts: list[dict[str, Any]] = field(default_factory=list)
    best: tuple[str, list[Violation]] | None = None
    """The completion with the fewest violations so far, and its violations."""
    max_attempts_total: int | None = None
    """Requests of this call in all, whatever they are (None: only the per-class limit
    and the ladder bound them)."""
    repair_context_chars: int = REPAIR_CONTEXT_CHARS
    """The cap on the input excerpts of a repair packet (0: none)."""
    best_effort: dict[str, Any] | None = None
    """The parsed value of the attempt with the fewest violations so far:
    ``{"attempt", "error_type", "violations", "value"}``."""

    def __post_init__(self) -> None:
        self.request_messages = self.request_messages or self.messages

    @property
    def model_class(self) -> str:
        return self.ladder[self.class_index]

    def attempts_left(self) -> bool:
        """Whether the exhaustion budget allows another request."""
        return self.max_attempts_total is None or len(self.attempts) < self.max_attempts_total

    def repeats_itself(self) -> bool:
        """Whether the last attempt, which was shown what the one before it got wrong (a
        repair or an escalation), broke the contract in exactly the same ways: another
        repair on this class would resend what it has just answered."""
        if len(self.attempts) < 2:
            return False
        last, before = self.attempts[-1], self.attempts[-2]
        violations = last.get("violations")
        return (
            last.get("kind") in ("repair", "escalation")
            and bool(violations)
            and violations == before.get("violations")
        )

    def remember(self, completion: str, violations: list[Violation]) -> None:
        if self.best is None or len(violations) <= len(self.best[1]):
            self.best = (completion, violations)

    def remember_value(self, exc: OutputInvalid, attempt: int) -> None:
        """Keep ``exc``'s parsed value when it has the fewest violations so far (a later
        attempt wins a tie: it answered a repair)."""
        if not exc.has_value:
            return
        best = self.best_effort
        if best is None or len(exc.violations) <= len(best["violations"]):
            self.best_effort = {
                "attempt": attempt,
                "error_type": exc.error_type,
                "violations": exc.violations,
                "value": exc.value,
            }


class Recovery(Protocol):
    """One action of a policy stack."""

    def applies(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> bool:
        """Whether the action can still be taken for this failure."""
        ...

    async def prepare(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> None:
        """Set up the next attempt, or raise to end the call."""
        ...


class Retry:
    """The same request again after a backoff that honours Retry-After."""

    def applies(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> bool:
        return state.retries < env.retry.max_retries and state.attempts_left()

    async def prepare(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> None:
        count = state.retries = state.retries + 1
        delay = env.retry.delay(count - 1, _retry_after(exc))
        env.emit(
            EventKind.RETRY,
            {"error_type": exc.error_type, "delay_s": round(delay, 3), "retry": count},
        )
        await env.sleep(delay)
        state.kind = "retry"


class Repair:
    """A fix-only repair packet to the same model class, while it has attempts left and
    its last answer changed something (a model that repeats the very violations it was
    shown is not asked again: the stack goes on to escalate, or to fail)."""

    def applies(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> bool:
        return (
            isinstance(exc, OutputInvalid)
            and state.in_class < state.max_attempts
            and state.attempts_left()
            and not state.repeats_itself()
        )

    async def prepare(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> None:
        assert isinstance(exc, OutputInvalid)
        failed = state.attempts[-1]
        output = exc.quoted if exc.quoted is not None else failed.get("completion", "")
        context = repair_context(state.messages, exc.terms, state.repair_context_chars)
        state.request_messages = repair_messages(state.builtins, output, exc.violations, context)
        state.kind = "repair"
        env.emit(
            EventKind.REPAIR_ATTEMPT,
            {
                "attempt": failed["number"] + 1,
                "model_class": state.model_class,
                "error_type": exc.error_type,
                "violations": exc.violations,
                "request_chars": sum(len(m.content) for m in state.request_messages),
                "context_chars": len(context),
            },
        )


class Escalate:
    """The original prompt, with what went wrong, to the next model class of the ladder."""

    def applies(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> bool:
        return state.class_index + 1 < len(state.ladder) and state.attempts_left()

    async def prepare(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> None:
        previous = state.model_class
        state.class_index += 1
        state.in_class = 0
        state.kind = "escalation"
        state.request_messages = escalation_messages(state.messages, state.best)
        env.emit(
            EventKind.ESCALATED,
            {"from": previous, "to": state.model_class, "error_type": exc.error_type},
        )


@dataclass(frozen=True)
class Stop:
    """End the call: ``fail`` (the op fails) or ``halt`` (a person must act)."""

    action: str

    def applies(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> bool:
        return True

    async def prepare(self, exc: LatticeRunError, state: CallState, env: CallEnv) -> None:
        exc.details["attempts"] = state.attempts
        exc.details["action"] = self.action
        if not state.attempts_left():
            exc.details["max_attempts_total"] = state.max_attempts_total
        if self.action == "fail" and state.best_effort is not None:
            exc.details["best_effort"] = state.best_effort
        raise exc


RECOVERIES: Mapping[str, Recovery] = MappingProxyType(
    {
        "retry": Retry(),
        "repair": Repair(),
        "escalate": Escalate(),
        "halt": Stop("halt"),
        "fail": Stop("fail"),
    }
)
"""Action name → strategy."""


def _retry_after(exc: LatticeRunError) -> float | None:
    value = exc.details.get("retry_after")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
