"""The lowering compiler: workflow documents to ExecIR, with static checks and emitters.

Importing this package does not import the compiler (every lowerer, the document models,
the static checks): ``lower`` and ``lower_document`` import it on their first call, the
other names on first use (PEP 562), so that ``from lattice import Runner, lower`` stays
light for programs that only run ExecIR. Both call ``lattice.lower.compiler``'s.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattice.errors import Severity

if TYPE_CHECKING:
    from lattice.document.models import Workflow
    from lattice.ir.models import ExecIR
    from lattice.lower.compiler import (
        DEFAULT_REGISTRY,
        LoweringResult,
        default_registry,
        lower_workflow,
    )
    from lattice.lower.registry import Lowerer, LowererRegistry, LoweringContext, NodeLowering

__all__ = [
    "DEFAULT_REGISTRY",
    "Lowerer",
    "LowererRegistry",
    "LoweringContext",
    "LoweringResult",
    "NodeLowering",
    "default_registry",
    "lower",
    "lower_document",
    "lower_workflow",
]

_LAZY = {
    "DEFAULT_REGISTRY": "lattice.lower.compiler",
    "LoweringResult": "lattice.lower.compiler",
    "default_registry": "lattice.lower.compiler",
    "lower_workflow": "lattice.lower.compiler",
    "Lowerer": "lattice.lower.registry",
    "LowererRegistry": "lattice.lower.registry",
    "LoweringContext": "lattice.lower.registry",
    "NodeLowering": "lattice.lower.registry",
}


def lower(
    source: str | Path | Mapping[str, Any] | Workflow,
    *,
    registry: LowererRegistry | None = None,
    base_dir: Path | None = None,
) -> ExecIR:
    """Lower a document to ExecIR; raise DocumentError listing every error."""
    from lattice.lower import compiler

    return compiler.lower(source, registry=registry, base_dir=base_dir)


def lower_document(
    source: str | Path | Mapping[str, Any] | Workflow,
    *,
    registry: LowererRegistry | None = None,
    base_dir: Path | None = None,
    mcp_servers: Collection[str] | None = None,
    unknown_mcp: Severity = Severity.ERROR,
) -> LoweringResult:
    """Load and lower a document, returning the IR (or None) and all diagnostics.

    ``mcp_servers``: the server ids the user's config declares; given, an mcp node naming
    another server is reported as ``unknown_mcp`` says (an error unless told otherwise).
    Unreadable files and malformed JSON still raise DocumentError (nothing to lower).
    """
    from lattice.lower import compiler

    return compiler.lower_document(
        source,
        registry=registry,
        base_dir=base_dir,
        mcp_servers=mcp_servers,
        unknown_mcp=unknown_mcp,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
