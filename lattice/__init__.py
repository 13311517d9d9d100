"""Lattice: a compiler and runtime for LLM workflows.

Public names are imported lazily (PEP 562) so that ``import lattice`` and the
``lattice`` command start fast; ``from lattice import lower`` works as usual.

``lattice.lower`` and ``lattice.batch`` name both a function and a subpackage. Python binds
a subpackage on its parent the first time it is imported (``lattice.lower = <module>``),
which would replace the function; so both subpackages (light: their functions import the
compiler and the batch engine on their first call) are imported here, first, and the
functions bound after them. Import from a subpackage with ``from lattice.lower import ...``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lattice.batch import abatch, batch
from lattice.lower import lower, lower_document

if TYPE_CHECKING:
    from lattice.batch.summary import BatchSummary
    from lattice.config import LatticeConfig, load_config
    from lattice.contracts.report import FailureReport
    from lattice.contracts.usage import Usage
    from lattice.document import Workflow, load_workflow
    from lattice.errors import (
        Diagnostic,
        DocumentError,
        InputError,
        LatticeError,
        LatticeRunError,
        LatticeUserError,
    )
    from lattice.ir import ExecIR, execir_json_schema, ir_from_json, ir_to_json
    from lattice.llm.anthropic_provider import AnthropicProvider
    from lattice.llm.base import LLMProvider
    from lattice.llm.disabled import DisabledProvider
    from lattice.llm.fixture import FixtureProvider
    from lattice.llm.litellm_provider import LiteLLMProvider
    from lattice.llm.mock import MockProvider
    from lattice.llm.openai_provider import OpenAIProvider
    from lattice.lower import LowererRegistry
    from lattice.primitive import LLMPrimitive, Response
    from lattice.runs.store import RunStore
    from lattice.runtime.results import RunResult
    from lattice.runtime.runner import RunLimits, Runner
    from lattice.runtime.settings import RuntimeSettings
    from lattice.service.providers import make_provider

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "AnthropicProvider": "lattice.llm.anthropic_provider",
    "BatchSummary": "lattice.batch.summary",
    "Diagnostic": "lattice.errors",
    "DisabledProvider": "lattice.llm.disabled",
    "DocumentError": "lattice.errors",
    "ExecIR": "lattice.ir",
    "FailureReport": "lattice.contracts.report",
    "FixtureProvider": "lattice.llm.fixture",
    "InputError": "lattice.errors",
    "LLMPrimitive": "lattice.primitive",
    "LLMProvider": "lattice.llm.base",
    "LatticeConfig": "lattice.config",
    "LatticeError": "lattice.errors",
    "LatticeRunError": "lattice.errors",
    "LatticeUserError": "lattice.errors",
    "LiteLLMProvider": "lattice.llm.litellm_provider",
    "LowererRegistry": "lattice.lower",
    "MockProvider": "lattice.llm.mock",
    "OpenAIProvider": "lattice.llm.openai_provider",
    "Response": "lattice.primitive",
    "RunLimits": "lattice.runtime.runner",
    "RunResult": "lattice.runtime.results",
    "RunStore": "lattice.runs.store",
    "Runner": "lattice.runtime.runner",
    "RuntimeSettings": "lattice.runtime.settings",
    "Usage": "lattice.contracts.usage",
    "Workflow": "lattice.document",
    "execir_json_schema": "lattice.ir",
    "ir_from_json": "lattice.ir",
    "ir_to_json": "lattice.ir",
    "load_config": "lattice.config",
    "load_workflow": "lattice.document",
    "make_provider": "lattice.service.providers",
}
"""Public name → the module that defines it (imported on first use); ``lower``,
``lower_document``, ``batch`` and ``abatch`` are bound at import (see above)."""

__all__ = [
    "AnthropicProvider",
    "BatchSummary",
    "Diagnostic",
    "DisabledProvider",
    "DocumentError",
    "ExecIR",
    "FailureReport",
    "FixtureProvider",
    "InputError",
    "LLMPrimitive",
    "LLMProvider",
    "LatticeConfig",
    "LatticeError",
    "LatticeRunError",
    "LatticeUserError",
    "LiteLLMProvider",
    "LowererRegistry",
    "MockProvider",
    "OpenAIProvider",
    "Response",
    "RunLimits",
    "RunResult",
    "RunStore",
    "Runner",
    "RuntimeSettings",
    "Usage",
    "Workflow",
    "__version__",
    "abatch",
    "batch",
    "execir_json_schema",
    "ir_from_json",
    "ir_to_json",
    "load_config",
    "load_workflow",
    "lower",
    "lower_document",
    "make_provider",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lattice' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
