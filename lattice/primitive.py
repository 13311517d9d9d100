"""LLMPrimitive: one contract-checked model call from Python, without a workflow document.

::

    class Ticket(BaseModel):
        category: Literal["billing", "bug", "other"]
        urgent: bool

    triage = LLMPrimitive(name="triage", system_prompt="You triage tickets.", output_model=Ticket)
    response = triage.run("My invoice is wrong and I need it today")
    if response.ok:
        print(response.data.category)           # a Ticket instance
    else:
        print(response.error_type, response.failure.summary)

A block is configured once (keyword-only, immutable) and is stateless: every call gets
fresh usage, events and attempts, so one block serves many calls, concurrently too.
It runs the same ``ContractEngine`` as a workflow's LLM_WRITE op (validation, fix-only
repair packets, escalation, recovery policies) and builds its prompt with the same
``compose_messages``: one implementation, two entry points. A call whose model output
never satisfies the contract returns a failed ``Response`` (with the FailureReport);
only a user's mistake (bad construction arguments, a payload that is not JSON) raises.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, Literal, NoReturn, TypeVar, cast

from pydantic import BaseModel, PydanticUserError, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python
from typing_extensions import TypeVar as DefaultTypeVar

from lattice.config import LatticeConfig, load_config
from lattice.contracts.calls import TRANSIENT_EVENTS, Emit, Sampling, wants_content, wants_deltas
from lattice.contracts.engine import Contract, ContractEngine
from lattice.contracts.invariants import (
    BoundInvariant,
    InvariantDef,
    Violation,
    bind_invariants,
    invariant_names,
)
from lattice.contracts.packets import REPAIR_CONTEXT_CHARS
from lattice.contracts.policies import (
    ACTIONS,
    MODEL_LADDER,
    OUTPUT_ERRORS,
    ladder_from,
    policy_stack,
)
from lattice.contracts.report import FailureReport, failure_report
from lattice.contracts.usage import Usage
from lattice.errors import LatticeRunError, LatticeUserError, did_you_mean
from lattice.ir.templates import to_text
from lattice.llm.base import LLMProvider, Message, ScriptedProvider, close_loop_clients
from lattice.prompts.builtin import TEMPLATES
from lattice.prompts.registry import PromptTemplate
from lattice.runtime.context import EventListener
from lattice.runtime.events import utc_now
from lattice.runtime.llm_op import compose_messages
from lattice.runtime.results import RunStatus
from lattice.runtime.settings import RuntimeSettings, settings_from_config
from lattice.runtime.sync import run_sync
from lattice.schemas import schema_problems
from lattice.service.providers import make_provider

__all__ = ["MODEL_CLASSES", "POLICY_WORDS", "LLMPrimitive", "ModelClass", "Response"]

OutputT = DefaultTypeVar("OutputT", default=Any)
"""The type of ``Response.data``: the ``output_model`` class, else ``Any`` (JSON value or text)."""

_T = TypeVar("_T")

ModelClass = Literal["small", "medium", "large", "default"]
MODEL_CLASSES: tuple[str, ...] = (*MODEL_LADDER, "default")

POLICY_WORDS: Mapping[str, str] = MappingProxyType(
    {
        "retry with repair feedback": "repair",
        "delayed retry": "retry",
        "escalate": "escalate",
        "bubble": "fail",
        "halt": "halt",
    }
)
"""Everyday words for recovery steps → the action names of ``lattice.contracts.policies``.
``bubble`` (hand the error to the caller) is ``fail``: the call returns a failed Response."""

_RECOVERY: Mapping[str, str] = MappingProxyType(
    {
        "missing_information": "add the missing information to the payload or context and call again",
        "api_key_error": "set the provider's API key (OPENAI_API_KEY or ANTHROPIC_API_KEY) and call again",
        "provider_disabled": "pass provider=... or configure one (lattice.toml, LATTICE_PROVIDER)",
        "mock_exhausted": "add responses for this block's name to the mock script",
    }
)


@dataclass(frozen=True, kw_only=True)
class Response(Generic[OutputT]):
    """What one call of an ``LLMPrimitive`` returns.

    On success ``data`` is the validated output (an ``output_model`` instance, else the
    JSON value, or the text of a free-text block) and ``value`` its JSON form. On
    failure ``data`` is None, ``error`` is the LatticeRunError (``error_type``, message)
    and ``failure`` the FailureReport listing every attempt. ``status`` is ``halted``
    when the model answered ``missing_information``.
    """

    status: RunStatus
    call_id: str
    """Identifies this call in events and the FailureReport (``run_id`` there)."""
    data: OutputT | None = None
    value: Any = None
    usage: Usage = field(default_factory=Usage)
    attempts: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """Every model call made: kind (initial/repair/retry/escalation), class, messages, completion, errors."""
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """The events of this call, shaped like a run's events (``llm_request``, ``repair_attempt``, …)."""
    error: LatticeRunError | None = None
    failure: FailureReport | None = None
    best_effort: Any = None
    """On failure, the parsed JSON value of the attempt with the fewest violations (None when
    no attempt held one); ``failure.details["best_effort"]`` has its attempt and violations.
    Not validated: use it knowingly."""

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    @property
    def error_type(self) -> str | None:
        return self.error.error_type if self.error is not None else None

    def unwrap(self) -> OutputT:
        """``data``, or raise the call's LatticeRunError."""
        if self.error is not None:
            raise self.error
        return cast(OutputT, self.data)


class LLMPrimitive(Generic[OutputT]):
    """A stateless, contract-checked LLM block (see the module docstring).

    ``name`` identifies the block in events and reports (and keys a MockProvider script).
    ``system_prompt`` precedes the contract's own system text. The contract is the JSON
    Schema of ``output_model`` (a pydantic model; its validators run too, as part of the
    schema check) or ``output_schema``; with neither the block answers free text.
    ``model_class`` (small/medium/large/default) maps to a concrete model through the
    settings; ``model`` names one directly for the first class. ``invariants`` are names
    or ``{"name": ..., ...}`` objects as in workflow documents. ``repair`` is attempts per
    model class (first call included; default 3); ``escalation`` is True (up the ladder to
    large), False, or the highest class to try. ``policies`` overrides recovery stacks by
    error type (``{"schema_error": ["repair", "fail"]}``). ``max_attempts_total`` caps the
    model calls of one call in all (default: at most ``repair`` per class × the ladder, 9
    with the defaults; a class whose repair repeats the violations it was shown gets no
    further repair, so an answer that never becomes valid costs 4 from ``small``). ``strict_output=True`` makes prose around the JSON a violation
    (``explanatory_text``) instead of salvaging a reply that holds exactly one valid JSON
    value. ``repair_context_chars`` caps the input lines a repair packet quotes (0: none).

    ``provider`` defaults to the one ``lattice run`` would use (``lattice.toml`` /
    ``LATTICE_PROVIDER``, else disabled); ``settings`` (model map, retries, budgets,
    sleep) default to that configuration when ``config`` is given or no provider is, and
    to ``RuntimeSettings()`` otherwise. ``on_event`` receives every event as it happens.
    """

    __slots__ = (
        "_engine",
        "_template",
        "contract",
        "model",
        "model_class",
        "name",
        "on_event",
        "output_model",
        "output_schema",
        "provider",
        "sampling",
        "settings",
        "system_prompt",
    )

    name: str
    system_prompt: str | None
    output_model: type[OutputT] | None
    output_schema: dict[str, Any] | None
    model: str | None
    model_class: str
    sampling: Sampling
    contract: Contract
    provider: LLMProvider
    settings: RuntimeSettings
    on_event: EventListener | None
    _engine: ContractEngine
    _template: PromptTemplate | None

    # long: one public keyword argument checked and kept per statement
    def __init__(  # noqa: C901
        self,
        *,
        name: str,
        system_prompt: str | None = None,
        output_model: type[OutputT] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        model: str | None = None,
        model_class: ModelClass = "default",
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        invariants: Sequence[str | Mapping[str, Any]] = (),
        repair: int | None = None,
        escalation: bool | ModelClass = True,
        policies: Mapping[str, Sequence[str]] | None = None,
        max_attempts_total: int | None = None,
        strict_output: bool = False,
        repair_context_chars: int = REPAIR_CONTEXT_CHARS,
        provider: LLMProvider | None = None,
        settings: RuntimeSettings | None = None,
        config: LatticeConfig | str | Path | None = None,
        on_event: EventListener | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            _mistake("name must be a non-empty string")
        if system_prompt is not None and not isinstance(system_prompt, str):
            _mistake("system_prompt must be a string")
        schema = _schema_of(output_model, output_schema)
        if model_class not in MODEL_CLASSES:
            _mistake(
                f"model_class must be one of {', '.join(MODEL_CLASSES)}{did_you_mean(model_class, MODEL_CLASSES)}"
            )
        if model is not None and (not isinstance(model, str) or not model):
            _mistake("model must be a non-empty string (a concrete model name)")
        for label, number in (("temperature", temperature), ("top_p", top_p)):
            if number is not None and (
                isinstance(number, bool) or not isinstance(number, int | float) or number < 0
            ):
                _mistake(f"{label} must be a number >= 0")
        if max_tokens is not None and not _int_in(max_tokens, 1, None):
            _mistake("max_tokens must be an integer >= 1")
        if repair is not None and not _int_in(repair, 1, 10):
            _mistake("repair (attempts per model class) must be an integer from 1 to 10")
        if max_attempts_total is not None and not _int_in(max_attempts_total, 1, None):
            _mistake("max_attempts_total must be an integer >= 1 (model calls of one call in all)")
        if not isinstance(strict_output, bool):
            _mistake("strict_output must be True or False")
        if not _int_in(repair_context_chars, 0, None):
            _mistake("repair_context_chars must be an integer >= 0")
        if escalation is not True and escalation is not False and escalation not in MODEL_LADDER:
            _mistake(
                f"escalation must be True, False or the highest class to try ({', '.join(MODEL_LADDER)})"
            )
        bound = _bind(invariants)
        overrides = _policies(policies)

        cfg: LatticeConfig | None = None
        if provider is None or config is not None:
            cfg = config if isinstance(config, LatticeConfig) else load_config(config)
        if provider is None:
            assert cfg is not None
            provider = make_provider(None, config=cfg)
        elif not callable(getattr(provider, "complete", None)):
            _mistake("provider must be an LLMProvider (an object with async complete(request))")
        if settings is None:
            settings = settings_from_config(cfg) if cfg is not None else RuntimeSettings()
        if isinstance(provider, ScriptedProvider) and not provider.covers(name):
            _mistake(f"the mock script has no responses (and no default) for {name!r}")

        if output_model is not None:
            bound.append(_model_check(cast(type[BaseModel], output_model)))
        contract = Contract(
            schema=schema,
            invariants=tuple(bound),
            max_attempts=repair if repair is not None else settings.max_attempts,
            ladder=ladder_from(
                model_class,
                max_class=escalation if isinstance(escalation, str) else None,
                enabled=escalation is not False,
            ),
            policies=MappingProxyType(overrides),
            strict_output=strict_output,
            max_attempts_total=max_attempts_total,
            repair_context_chars=repair_context_chars,
            formats=settings.formats,
        )
        init = object.__setattr__
        init(self, "name", name)
        init(self, "system_prompt", system_prompt)
        init(self, "output_model", output_model)
        init(self, "output_schema", schema)
        init(self, "model", model)
        init(self, "model_class", model_class)
        init(
            self,
            "sampling",
            Sampling(
                temperature=temperature if temperature is not None else settings.temperature,
                top_p=top_p,
                max_tokens=max_tokens,
            ),
        )
        init(self, "contract", contract)
        init(self, "provider", provider)
        init(self, "settings", settings)
        init(self, "on_event", on_event)
        init(self, "_engine", ContractEngine(contract))
        init(self, "_template", TEMPLATES.get("artifact-builder@1") if schema is not None else None)

    def __setattr__(self, key: str, value: Any) -> NoReturn:
        raise AttributeError(f"LLMPrimitive is immutable; build a new block to change {key!r}")

    def __delattr__(self, key: str) -> NoReturn:
        raise AttributeError(f"LLMPrimitive is immutable; cannot delete {key!r}")

    def __repr__(self) -> str:
        output = (
            self.output_model.__name__
            if isinstance(self.output_model, type)
            else "schema"
            if self.output_schema is not None
            else "text"
        )
        return (
            f"LLMPrimitive(name={self.name!r}, output={output}, "
            f"ladder={self.contract.ladder!r}, max_attempts={self.contract.max_attempts})"
        )

    # -- inspection -------------------------------------------------------------------

    def render(
        self, payload: Any, *, context: Mapping[str, Any] | None = None
    ) -> tuple[Message, ...]:
        """The messages the first call sends: system = ``system_prompt`` + the contract
        template (rules, schema); user = the payload (text as is, other values as JSON)
        plus one ``## label`` block per ``context`` entry."""
        prompt = payload if isinstance(payload, str) else to_text(_jsonable(payload, "payload"))
        if context is not None and not isinstance(context, Mapping):
            _mistake("context must be a mapping of label → value")
        blocks: list[tuple[str, Any]] = []
        for label, value in (context or {}).items():
            if not isinstance(label, str) or not label.strip():
                _mistake(f"context labels must be non-empty strings, got {label!r}")
            blocks.append((label, _jsonable(value, f"context[{label!r}]")))
        return compose_messages(
            prompt=prompt,
            context=blocks,
            system=self.system_prompt,
            template=self._template,
            builtins=self._engine.builtins(),
        )

    def get_policy_stack(self, error_type: str) -> tuple[str, ...]:
        """The recovery actions this block takes for ``error_type``, in order.

        The stack of ``policies`` (else the settings' defaults,
        ``lattice.contracts.policies.DEFAULT_POLICIES``) without the actions that can never
        apply to this block (``escalate`` with one model class, ``repair`` with one attempt
        per class or for errors that are not about the output, ``retry`` with no retries)
        and without what follows the first ``fail``/``halt``; it always ends in one of them.
        """
        contract = self.contract
        repairable = {*OUTPUT_ERRORS, *(inv.definition.error_type for inv in contract.invariants)}
        single_call = contract.max_attempts_total == 1
        effective: list[str] = []
        for action in policy_stack(error_type, contract.policies, self.settings.policies):
            if (
                (single_call and action in ("escalate", "repair", "retry"))
                or (action == "escalate" and len(contract.ladder) < 2)
                or (
                    action == "repair"
                    and (contract.max_attempts < 2 or error_type not in repairable)
                )
                or (action == "retry" and self.settings.retry.max_retries < 1)
            ):
                continue
            effective.append(action)
            if action in ("fail", "halt"):
                return tuple(effective)
        return (*effective, "fail")

    # -- calls --------------------------------------------------------------------------

    def run(self, payload: Any, *, context: Mapping[str, Any] | None = None) -> Response[OutputT]:
        """Synchronous ``arun`` (in its own event loop, whose provider clients it closes).

        Inside a running event loop use ``await block.arun(...)`` instead."""
        return run_sync(
            lambda: self._closing(self.arun(payload, context=context)),
            what="await block.arun(...)",
        )

    async def arun(
        self, payload: Any, *, context: Mapping[str, Any] | None = None
    ) -> Response[OutputT]:
        """Call the model under the contract: validate, repair, escalate as the policies say."""
        messages = self.render(payload, context=context)
        call_id = _new_call_id()
        events: list[dict[str, Any]] = []
        usage = Usage()
        env = self.settings.call_env(
            self.provider, usage=usage, emit=self._emitter(call_id, events)
        )
        listeners = () if self.on_event is None else (self.on_event,)
        if env.stream is None:
            env.stream = wants_deltas(listeners)
        env.content = wants_content(listeners)
        try:
            value, attempts = await self._engine.run(
                messages,
                env,
                sampling=self.sampling,
                model=self.model,
                node_id=self.name,
                op_id=self.name,
            )
        except LatticeRunError as exc:
            return self._failed(exc, call_id, usage, events)
        except LatticeUserError:
            raise
        except Exception as exc:  # a provider or listener bug: reported like the Runner does
            error = LatticeRunError(
                f"internal error in {self.name!r}: {type(exc).__name__}: {exc}",
                error_type="internal_error",
                node_id=self.name,
            )
            error.__cause__ = exc
            return self._failed(error, call_id, usage, events)
        usage.estimate_cost(self.settings.prices)
        data = value if self.output_model is None else self._model().model_validate(value)
        return Response(
            status="completed",
            call_id=call_id,
            data=cast(OutputT, data),
            value=value,
            usage=usage,
            attempts=attempts,
            events=events,
        )

    # -- internals ----------------------------------------------------------------------

    def _model(self) -> type[BaseModel]:
        return cast(type[BaseModel], self.output_model)

    def _emitter(self, call_id: str, events: list[dict[str, Any]]) -> Emit:
        """``CallEnv.emit``: events shaped like a run's (``RunContext.emit``), op = the block."""
        listener = self.on_event
        name = self.name

        def emit(type_: str, data: dict[str, Any]) -> dict[str, Any]:
            transient = type_ in TRANSIENT_EVENTS  # to the listener only, not kept
            event = {
                "seq": len(events) + (0 if transient else 1),
                "ts": utc_now(),
                "run_id": call_id,
                "type": type_,
                "op_id": name,
                "node_id": name,
                "data": data,
            }
            if not transient:
                events.append(event)
            if listener is not None:
                listener(event)
            return event

        return emit

    def _failed(
        self, exc: LatticeRunError, call_id: str, usage: Usage, events: list[dict[str, Any]]
    ) -> Response[OutputT]:
        usage.estimate_cost(self.settings.prices)
        attempts: list[dict[str, Any]] = list(exc.details.get("attempts", []))
        halted = exc.details.get("action") == "halt"
        report = failure_report(
            exc,
            phase="call",
            run_id=call_id,
            op_id=self.name,
            node_id=self.name,
            recovery_action=_RECOVERY.get(
                exc.error_type, "fix the cause, then call the block again"
            ),
        )
        best = report.details.get("best_effort")
        return Response(
            status="halted" if halted else "failed",
            call_id=call_id,
            usage=usage,
            attempts=attempts,
            events=events,
            error=exc,
            failure=report,
            best_effort=best.get("value") if isinstance(best, dict) else None,
        )

    async def _closing(self, coro: Awaitable[_T]) -> _T:
        try:
            return await coro
        finally:
            await close_loop_clients(self.provider)


# -- construction helpers ---------------------------------------------------------------


def _mistake(message: str) -> NoReturn:
    raise LatticeUserError(message, error_type="primitive_error")


def _int_in(value: object, low: int, high: int | None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= low
        and (high is None or value <= high)
    )


def _schema_of(
    output_model: type[Any] | None, output_schema: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    if output_model is not None and output_schema is not None:
        _mistake("give output_model or output_schema, not both")
    if output_model is not None:
        if not (isinstance(output_model, type) and issubclass(output_model, BaseModel)):
            _mistake("output_model must be a pydantic BaseModel subclass")
        try:
            return output_model.model_json_schema()
        except PydanticUserError as exc:
            _mistake(f"output_model {output_model.__name__} has no JSON Schema: {exc}")
    if output_schema is None:
        return None
    if not isinstance(output_schema, Mapping):
        _mistake("output_schema must be a JSON Schema object (a dict)")
    schema = to_jsonable_python(dict(output_schema))
    for problem in schema_problems(schema)[:1]:
        pointer = "/" + "/".join(str(p) for p in problem.path)
        reason = problem.message.removeprefix("invalid JSON Schema: ")
        _mistake(f"output_schema is not a valid JSON Schema at {pointer}: {reason}")
    return cast(dict[str, Any], schema)


def _bind(specs: Sequence[str | Mapping[str, Any]]) -> list[BoundInvariant]:
    if isinstance(specs, str | Mapping):
        _mistake('invariants is a list of names or {"name": ..., ...} objects')
    known = invariant_names()
    plain: list[Any] = []
    for spec in specs:
        name = (
            spec
            if isinstance(spec, str)
            else spec.get("name")
            if isinstance(spec, Mapping)
            else None
        )
        if not isinstance(name, str):
            _mistake(f'an invariant is a name or {{"name": ..., ...}}, got {spec!r}')
        if name not in known:
            _mistake(
                f"unknown invariant {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}"
            )
        plain.append(spec if isinstance(spec, str) else dict(spec))
    return bind_invariants(plain)


def _policies(policies: Mapping[str, Sequence[str]] | None) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for error_type, stack in (policies or {}).items():
        if not isinstance(error_type, str) or isinstance(stack, str) or not stack:
            _mistake(
                f"policies maps an error type to a non-empty list of actions ({', '.join(ACTIONS)})"
            )
        for action in stack:
            if action not in ACTIONS:
                alias = POLICY_WORDS.get(str(action))
                hint = (
                    f" ({action!r} is called {alias!r})" if alias else did_you_mean(action, ACTIONS)
                )
                _mistake(
                    f"policies[{error_type!r}]: unknown action {action!r}{hint}; "
                    f"actions are {', '.join(ACTIONS)}"
                )
        out[error_type] = tuple(stack)
    return out


def _model_check(model: type[BaseModel]) -> BoundInvariant:
    """The model's own validation (field and model validators) as the contract's last check:
    failures are ``schema_error`` and go through the same repair packets."""

    def check(value: Any, params: dict[str, Any]) -> list[Violation]:
        try:
            model.model_validate(value)
        except ValidationError as exc:
            return [
                {"pointer": _pointer(err["loc"]), "message": err["msg"]}
                for err in exc.errors(include_url=False)
            ]
        return []

    definition = InvariantDef(
        name=f"pydantic:{model.__qualname__}", check=check, error_type="schema_error", rule=""
    )
    return BoundInvariant(definition, {})


def _pointer(loc: tuple[int | str, ...]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in loc)


def _jsonable(value: Any, what: str) -> Any:
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise LatticeUserError(
            f"{what} is not a JSON value ({type(value).__name__}): {exc}",
            error_type="input_error",
        ) from exc


def _new_call_id() -> str:
    return "call-" + secrets.token_hex(6)
