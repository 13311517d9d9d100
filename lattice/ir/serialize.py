"""(De)serialisation of ExecIR and the JSON Schema of ExecIR itself."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from lattice.errors import LatticeUserError
from lattice.ir.models import ExecIR


def ir_to_dict(ir: ExecIR) -> dict[str, Any]:
    """The wire form: camelCase keys, ``id`` and ``kind`` first in each op, ``None`` fields omitted."""
    data = ir.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["ops"] = {
        op_id: {"id": op["id"], "kind": op["kind"], **op} for op_id, op in data["ops"].items()
    }
    return data


def ir_to_json(ir: ExecIR) -> str:
    """Byte-stable JSON text of ``ir`` (same IR, same bytes), ending in a newline."""
    return json.dumps(ir_to_dict(ir), indent=2, ensure_ascii=False) + "\n"


def ir_from_json(text: str | bytes | dict[str, Any]) -> ExecIR:
    """Parse ExecIR from JSON text or a dict; a malformed IR is a LatticeUserError."""
    try:
        if isinstance(text, dict):
            return ExecIR.model_validate(text)
        return ExecIR.model_validate_json(text)
    except ValidationError as exc:
        raise LatticeUserError(
            f"not a valid ExecIR document: {exc}", error_type="invalid_ir"
        ) from exc


def execir_json_schema() -> dict[str, Any]:
    """JSON Schema (Draft 2020-12) of ExecIR, as serialised by ``ir_to_json``."""
    schema = ExecIR.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://lattice.dev/schemas/execir-1.json"
    return schema
