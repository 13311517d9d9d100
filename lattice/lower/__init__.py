"""The lowering compiler: workflow documents to ExecIR, with static checks and emitters."""

from lattice.lower.compiler import (
    DEFAULT_REGISTRY,
    LoweringResult,
    default_registry,
    lower,
    lower_document,
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
