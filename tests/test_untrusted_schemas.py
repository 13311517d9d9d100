"""A document's JSON Schemas reach nothing outside themselves and cannot stall a run:
``$ref`` to a URL or a file is a lowering error (and is never fetched: a counting server
on 127.0.0.1 sees no request), a ``$ref`` to nothing is a lowering error (and a clear
run error in an edited IR), and patterns run with a time limit."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.document_fuzzing import CountingServer
from lattice.cli import main
from lattice.contracts.errors import OutputInvalid
from lattice.contracts.validation import OutputValidator
from lattice.errors import InputError, LatticeRunError, LatticeUserError
from lattice.ir.serialize import ir_from_json, ir_to_json
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.runtime import Runner, RunStore
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.tools.mcp import argument_violations
from tests.builders import approval, chain, conn, node, workflow
from tests.server.helpers import TIMEOUT

CATASTROPHIC = r"^(a|aa)+$"
VICTIM = "a" * 36 + "!"


@pytest.fixture
def remote() -> Iterator[CountingServer]:
    server = CountingServer("/x.json")
    try:
        yield server
    finally:
        server.close()


def inputs_doc(schema: dict[str, Any]) -> dict[str, Any]:
    doc = chain(node("draft", "prompt", prompt="Write about {{ topic }}"))
    doc["nodes"][0]["data"]["inputs"] = schema
    return doc


def output_doc(schema: dict[str, Any]) -> dict[str, Any]:
    return chain(node("draft", "prompt", prompt="Write", outputSchema=schema))


TOPIC = {"type": "object", "properties": {"topic": {"type": "string"}}}


def with_topic(**topic: Any) -> dict[str, Any]:
    return {**TOPIC, "properties": {"topic": {"type": "string", **topic}}}


def diagnostics(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d.code, d.pointer) for d in lower_document(doc).errors]


# -- $ref outside the schema ---------------------------------------------------------------


def outside_refs(url: str) -> list[str]:
    return [url, url.replace("http:", "https:"), "file:///etc/passwd", "other.json", "urn:x:y"]


def test_a_ref_outside_the_schema_is_a_located_lowering_error(remote: CountingServer) -> None:
    for ref in outside_refs(remote.url):
        assert diagnostics(inputs_doc({"$ref": ref})) == [
            ("schema-ref-external", "/nodes/0/data/inputs/$ref")
        ]
        nested = {"type": "object", "properties": {"a": {"$ref": ref}}}
        assert diagnostics(output_doc(nested)) == [
            ("schema-ref-external", "/nodes/1/data/outputSchema/properties/a/$ref")
        ]
    assert remote.hits == []


def test_lattice_run_and_check_refuse_it_without_fetching(
    remote: CountingServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(inputs_doc({"$ref": remote.url})), encoding="utf-8")
    mock = tmp_path / "mock.json"
    mock.write_text(json.dumps({"responses": {"draft": ["x"]}}), encoding="utf-8")
    run = ["run", str(path), "--provider", "mock", "--mock", str(mock), "--no-record"]
    assert main(run) == 2
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "schema-ref-external" in err and "Traceback" not in err
    assert remote.hits == []


def test_no_validator_fetches_even_when_lowering_is_bypassed(remote: CountingServer) -> None:
    ir = lower(inputs_doc(TOPIC))
    ir.inputs_schema = {"$ref": remote.url}
    runner = Runner(ir, provider=MockProvider({"draft": ["x"]}), store=RunStore(None))
    with pytest.raises(LatticeRunError) as caught:
        runner.validate_inputs({"topic": "tea"})
    assert caught.value.error_type == "invalid_schema"
    with pytest.raises(LatticeRunError):
        OutputValidator({"$ref": remote.url}, ()).check('"x"')
    assert argument_violations({"$ref": remote.url}, {})[0]["message"].startswith(
        "the tool's inputSchema cannot be used"
    )
    assert remote.hits == []


def test_an_edited_execir_with_an_outside_ref_is_refused_when_read(remote: CountingServer) -> None:
    ir = lower(output_doc({"type": "object"}))
    ir.inputs_schema = {"$ref": remote.url}
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(ir_to_json(ir))
    assert caught.value.error_type == "invalid_ir"
    assert "inputsSchema: $ref" in str(caught.value)
    assert remote.hits == []


def test_lattice_resume_refuses_an_execir_edited_to_reach_out(
    remote: CountingServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, mock, runs = tmp_path / "flow.json", tmp_path / "mock.json", tmp_path / "runs"
    doc.write_text(json.dumps(approval()), encoding="utf-8")
    mock.write_text(json.dumps({"responses": {"draft": ["a"], "polish": ["b"]}}), "utf-8")
    provider = ["--provider", "mock", "--mock", str(mock)]
    run = ["run", str(doc), *provider, "--input", "topic=tea", "--runs-dir", str(runs)]
    assert main(run) == 3  # halted at the question
    [folder] = [p for p in runs.iterdir() if p.is_dir()]
    execir = json.loads((folder / "execir.json").read_text(encoding="utf-8"))
    execir["inputsSchema"] = {"$ref": remote.url}
    (folder / "execir.json").write_text(json.dumps(execir), encoding="utf-8")
    capsys.readouterr()
    assert main(["resume", str(folder), *provider, "--answer", "approve=Send"]) == 2
    err = capsys.readouterr().err
    assert "invalid_ir" in err and "inputsSchema: $ref" in err and "Traceback" not in err
    assert remote.hits == []


def test_inline_documents_posted_to_the_server_are_refused(
    remote: CountingServer, tmp_path: Path
) -> None:
    settings = ServerSettings(runs_dir=tmp_path / "runs", workflows_dir=tmp_path)
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        body = {"document": output_doc({"$ref": remote.url}), "mock_script": {"responses": {}}}
        response = client.post("/v1/runs", json=body)
    assert response.status_code == 422, response.text
    assert [d["code"] for d in response.json()["diagnostics"]] == ["schema-ref-external"]
    assert remote.hits == []


# -- $ref to nothing -------------------------------------------------------------------------


def test_a_ref_to_nothing_is_a_located_lowering_error() -> None:
    dangling = {"type": "object", "properties": {"a": {"$ref": "#/definitions/x"}}}
    assert diagnostics(output_doc(dangling)) == [
        ("schema-ref-dangling", "/nodes/1/data/outputSchema/properties/a/$ref")
    ]
    assert diagnostics(inputs_doc({**TOPIC, "$ref": "#/properties/nope"})) == [
        ("schema-ref-dangling", "/nodes/0/data/inputs/$ref")
    ]
    assert diagnostics(inputs_doc({**TOPIC, "$ref": "#missing-anchor"})) == [
        ("schema-ref-dangling", "/nodes/0/data/inputs/$ref")
    ]


def test_a_ref_that_loops_without_reading_into_the_value_is_a_lowering_error() -> None:
    loop = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}
    assert diagnostics(output_doc({**loop, "$ref": "#/$defs/a"})) == [
        ("schema-ref-cycle", "/nodes/1/data/outputSchema/$defs/b/allOf/0/$ref")
    ]
    tree = {"type": "object", "properties": {"children": {"items": {"$ref": "#"}}}}
    assert diagnostics(output_doc(tree)) == []
    deep: dict[str, Any] = {}
    for _ in range(300):
        deep = {"children": [deep]}
    with pytest.raises(OutputInvalid, match="nested too deeply"):
        OutputValidator(tree, ()).check(json.dumps(deep))


def test_refs_inside_the_schema_still_work() -> None:
    schema = {
        "type": "object",
        "$defs": {"level": {"enum": ["low", "high"]}, "named": {"$anchor": "n", "type": "string"}},
        "definitions": {"old": {"type": "integer"}},
        "properties": {
            "a": {"$ref": "#/$defs/level"},
            "b": {"$ref": "#n"},
            "c": {"$ref": "#/definitions/old"},
            "$ref": {"type": "string"},  # a property named $ref is a name, not a reference
        },
    }
    assert diagnostics(output_doc(schema)) == []
    checks = OutputValidator(schema, ())
    assert checks.check('{"a": "low", "b": "x", "c": 1}') == {"a": "low", "b": "x", "c": 1}
    with pytest.raises(OutputInvalid):
        checks.check('{"a": "medium"}')


def test_a_ref_to_nothing_in_an_edited_ir_is_a_clear_run_error() -> None:
    ir = lower(output_doc({"type": "object"}))
    op = ir.ops["draft"]
    op.output_schema = {"properties": {"a": {"$ref": "#/definitions/x"}}}  # type: ignore[union-attr]
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(ir_to_json(ir))
    assert "points at nothing" in str(caught.value)
    # a Runner built from it in Python (no check_ir): a run error, not a traceback
    provider = MockProvider({"draft": ['{"a": 1}']})
    result = Runner(ir, provider=provider, store=RunStore(None)).run({})
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "invalid_schema"
    assert "'#/definitions/x' cannot be resolved" in result.failure.summary


# -- patterns ------------------------------------------------------------------------------


def test_an_inputs_pattern_that_backtracks_is_an_input_error_not_a_stall() -> None:
    ir = lower(inputs_doc(with_topic(pattern=CATASTROPHIC)))
    runner = Runner(ir, provider=MockProvider({"draft": ["x"]}), store=RunStore(None))
    with pytest.raises(InputError) as caught:
        runner.validate_inputs({"topic": VICTIM})
    assert "$in/topic: the regular expression '^(a|aa)+$' did not finish" in str(caught.value)
    with pytest.raises(InputError, match="does not match"):
        runner.validate_inputs({"topic": "b"})
    runner.validate_inputs({"topic": "aaa"})


def test_an_output_pattern_that_backtracks_is_a_located_violation() -> None:
    checks = OutputValidator({"type": "array", "items": with_topic(pattern=CATASTROPHIC)}, ())
    with pytest.raises(OutputInvalid) as caught:
        checks.check(json.dumps([{"topic": "aa"}, {"topic": VICTIM}]))
    [violation] = caught.value.details["violations"]
    assert violation["pointer"] == "/1/topic" and "did not finish" in violation["message"]


def test_pattern_properties_that_backtrack_end_in_an_error() -> None:
    for closed in ("additionalProperties", "unevaluatedProperties"):
        schema = {"type": "object", "patternProperties": {CATASTROPHIC: {}}, closed: False}
        with pytest.raises(OutputInvalid, match="did not finish"):
            OutputValidator(schema, ()).check(json.dumps({VICTIM: 1}))


def test_a_pattern_too_large_to_compile_is_a_lowering_error() -> None:
    assert diagnostics(inputs_doc(with_topic(pattern="(a{1000}){1000}"))) == [
        ("schema-invalid", "/nodes/0/data/inputs/properties/topic/pattern")
    ]


def matches_doc(pattern: str) -> dict[str, Any]:
    condition = "matches " + json.dumps(pattern)
    return workflow(
        [
            node("start", "start", inputs=TOPIC),
            node(
                "check",
                "ifElse",
                evaluationTarget="$in.topic",
                branches=[{"label": "Yes", "condition": condition}, {"label": "No"}],
            ),
            node("yes", "end", output="yes"),
            node("no", "end", output="no"),
        ],
        [
            conn("start", "check"),
            conn("check", "yes", "branch-0"),
            conn("check", "no", "branch-1"),
        ],
    )


def test_a_matches_condition_that_backtracks_fails_the_op_and_runs_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lattice.runtime import conditions

    on_loop: list[bool] = []
    real_search = conditions.search

    def search(pattern: Any, text: str) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real_search(pattern, text)

    monkeypatch.setattr(conditions, "search", search)
    ir = lower(matches_doc(CATASTROPHIC))
    result = Runner(ir, provider=MockProvider(), store=RunStore(None)).run({"topic": VICTIM})
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "pattern_timeout"
    assert result.failure.node_id == "check"
    ok = Runner(ir, provider=MockProvider(), store=RunStore(None)).run({"topic": "aaaa"})
    assert ok.output == "yes"
    assert on_loop == [False, False]


def test_the_server_checks_inputs_off_its_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_loop: list[bool] = []
    real = Runner.validate_inputs

    def validate_inputs(self: Runner, inputs: Any) -> None:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        real(self, inputs)

    monkeypatch.setattr(Runner, "validate_inputs", validate_inputs)
    settings = ServerSettings(runs_dir=tmp_path / "runs", workflows_dir=tmp_path)
    body = {
        "document": inputs_doc(with_topic(pattern=CATASTROPHIC)),
        "inputs": {"topic": VICTIM},
        "mock_script": {"responses": {"draft": ["x"]}},
    }
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        response = client.post("/v1/runs", json=body)
    assert response.status_code == 422, response.text
    assert "did not finish" in response.text
    assert on_loop == [False]


def _branching_schema(levels: int) -> dict[str, Any]:
    """A 1 KB-per-20-levels schema whose check of a non-string branches 2**levels ways."""
    defs: dict[str, Any] = {"d0": {"type": "string"}}
    for level in range(1, levels):
        ref = {"$ref": f"#/$defs/d{level - 1}"}
        defs[f"d{level}"] = {"anyOf": [ref, dict(ref)]}
    return {"$defs": defs, "$ref": f"#/$defs/d{levels - 1}"}


def test_references_that_branch_exponentially_end_in_an_error_not_a_stall() -> None:
    """40 levels: 2**40 reference follows; without a cap this never finishes."""
    from lattice.schemas import schema_errors, schema_validator

    validator = schema_validator(_branching_schema(40))
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.append(schema_errors(validator, 5)))
    worker.daemon = True
    worker.start()
    worker.join(120)
    assert found, "the check did not end"
    assert [error.validator for error in found[0]] == ["complexity"]
    assert schema_errors(validator, "fine") == []


def test_many_references_over_a_large_value_are_still_checked() -> None:
    from lattice.schemas import schema_errors, schema_validator

    schema = {
        "$defs": {"item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "type": "array",
        "items": {"$ref": "#/$defs/item"},
    }
    validator = schema_validator(schema)
    assert schema_errors(validator, [{"n": i} for i in range(5000)]) == []
    errors = schema_errors(validator, [{"n": i} for i in range(4999)] + [{"n": "x"}])
    assert [list(error.absolute_path) for error in errors] == [[4999, "n"]]
