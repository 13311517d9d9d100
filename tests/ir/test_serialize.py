"""Reading ExecIR back: an IR file is input too, held to what running it needs."""

from __future__ import annotations

from typing import Any

import pytest

from lattice.errors import LatticeUserError
from lattice.ir import ir_from_json, ir_to_dict
from lattice.ir.serialize import check_ir
from tests.builders import chain, lower_ok, node


def _ir() -> dict[str, Any]:
    doc = chain(
        node("p", "prompt", prompt="Hi {{ $in.name }}"),
        node(
            "b",
            "switch",
            branches=[
                {"label": "a", "condition": 'matches "^x"'},
                {"label": "b", "isDefault": True},
            ],
        ),
    )
    doc["connections"][2]["fromPort"] = "branch-0"
    doc["connections"].append({"from": "b", "to": "end", "fromPort": "branch-1"})
    return ir_to_dict(lower_ok(doc))


def test_lowered_ir_reads_back() -> None:
    data = _ir()
    assert check_ir(ir_from_json(data)) == []


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d["ops"]["p"].update(prompt="{{ $in."), "ops['p'].prompt"),
        (lambda d: d.update(entry="nowhere"), "entry: no op 'nowhere'"),
        (lambda d: d["ops"]["p"]["next"][0].update(to="ghost"), "ops['p'].next[0]: no op 'ghost'"),
        (lambda d: d["ops"]["p"].update(writes="vars.p"), "ops['p'].writes"),
        (lambda d: d["ops"]["p"]["context"].append("$in."), "ops['p'].context[0]"),
        (lambda d: d["ops"]["b"]["cases"][0]["test"].update(value="["), "ops['b'].cases[0].test"),
        (
            lambda d: d["ops"]["b"]["cases"][0].update(test={"op": "jmespath", "value": "a["}),
            "invalid JMESPath",
        ),
        (
            lambda d: d["ops"]["p"].update(outputSchema={"type": 3}),
            "ops['p'].outputSchema: invalid JSON Schema",
        ),
        (lambda d: d["ops"]["end"].update(output={"x": "{{"}), "ops['end'].output"),
    ],
    ids=["prompt", "entry", "edge", "writes", "context", "regex", "jmespath", "schema", "output"],
)
def test_an_ir_that_cannot_run_is_refused(change: Any, fragment: str) -> None:
    data = _ir()
    change(data)
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(data)
    assert caught.value.error_type == "invalid_ir"
    assert fragment in caught.value.message


def test_an_ir_nested_too_deeply_is_refused() -> None:
    text = (
        '{"irVersion": "1", "workflow": {"id": "w", "name": "w"}, "entry": "s", "ops": {"s": {"id": "s", "kind": "END", "sourceNode": "s", "output": '
        + "[" * 5000
        + "]" * 5000
        + "}}}"
    )
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(text)
    assert caught.value.error_type == "invalid_ir"
