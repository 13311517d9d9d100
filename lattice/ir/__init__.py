"""ExecIR: typed ops, (de)serialisation and the JSON Schema of the IR.

Importing this package imports neither the models nor pydantic: the names below come
from ``lattice.ir.models`` and ``lattice.ir.serialize`` on first use (PEP 562), so that a
module that needs only ``lattice.ir.templates`` (the runtime, at import) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lattice.ir.models import (
        DEFAULT_PORT,
        FAILED_PORT,
        IR_VERSION,
        AgentLimits,
        AgentOp,
        AskOp,
        Case,
        Condition,
        ContractOpBase,
        Edge,
        EndOp,
        ExecIR,
        HttpCall,
        LLMWriteOp,
        McpCall,
        Op,
        StartOp,
        StateOp,
        SwitchOp,
        ToolCallOp,
        TransformOp,
    )
    from lattice.ir.serialize import execir_json_schema, ir_from_json, ir_to_dict, ir_to_json

_SERIALIZE = ("execir_json_schema", "ir_from_json", "ir_to_dict", "ir_to_json")

__all__ = [
    "DEFAULT_PORT",
    "FAILED_PORT",
    "IR_VERSION",
    "AgentLimits",
    "AgentOp",
    "AskOp",
    "Case",
    "Condition",
    "ContractOpBase",
    "Edge",
    "EndOp",
    "ExecIR",
    "HttpCall",
    "LLMWriteOp",
    "McpCall",
    "Op",
    "StartOp",
    "StateOp",
    "SwitchOp",
    "ToolCallOp",
    "TransformOp",
    "execir_json_schema",
    "ir_from_json",
    "ir_to_dict",
    "ir_to_json",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "lattice.ir.serialize" if name in _SERIALIZE else "lattice.ir.models"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
