"""Lattice: a compiler and runtime for LLM workflows.

Public names are imported lazily (PEP 562) so that ``import lattice`` and the
``lattice`` command start fast; ``from lattice import lower`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from lattice.lower import LowererRegistry, lower, lower_document

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Diagnostic": "lattice.errors",
    "DocumentError": "lattice.errors",
    "ExecIR": "lattice.ir",
    "InputError": "lattice.errors",
    "LatticeError": "lattice.errors",
    "LatticeRunError": "lattice.errors",
    "LatticeUserError": "lattice.errors",
    "LowererRegistry": "lattice.lower",
    "Workflow": "lattice.document",
    "execir_json_schema": "lattice.ir",
    "ir_from_json": "lattice.ir",
    "ir_to_json": "lattice.ir",
    "load_workflow": "lattice.document",
    "lower": "lattice.lower",
    "lower_document": "lattice.lower",
}

__all__ = [
    "Diagnostic",
    "DocumentError",
    "ExecIR",
    "InputError",
    "LatticeError",
    "LatticeRunError",
    "LatticeUserError",
    "LowererRegistry",
    "Workflow",
    "__version__",
    "execir_json_schema",
    "ir_from_json",
    "ir_to_json",
    "load_workflow",
    "lower",
    "lower_document",
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
