"""Workflow documents: models, loading and normalisation of the cc-wf-studio format.

Importing this package imports neither the models nor pydantic: the names below come
from ``lattice.document.loader`` and ``lattice.document.models`` on first use (PEP 562),
so that a module that needs only ``lattice.document.limits`` (the runtime, checking a
run's inputs) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lattice.document.loader import load_workflow, parse_workflow
    from lattice.document.models import Connection, Node, SubAgentFlow, Workflow, normalize_port

_LOADER = ("load_workflow", "parse_workflow")

__all__ = [
    "Connection",
    "Node",
    "SubAgentFlow",
    "Workflow",
    "load_workflow",
    "normalize_port",
    "parse_workflow",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "lattice.document.loader" if name in _LOADER else "lattice.document.models"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
