"""The prompt template registry, templates in documents, and classifier ops."""

from __future__ import annotations

from typing import Any

import pytest

from lattice.errors import LatticeUserError
from lattice.ir.models import LLMWriteOp, SwitchOp
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.prompts import builtin as builtin_module
from lattice.prompts.builtin import ARTIFACT_BUILDER, CLASSIFIER, REPAIR, TEMPLATES
from lattice.prompts.registry import BUILTINS, PromptTemplate, PromptTemplateRegistry
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, conn, node, only, workflow


async def no_sleep(_: float) -> None:
    return None


def run(
    doc: dict[str, Any], provider: MockProvider, inputs: dict[str, Any] | None = None
) -> RunResult:
    runner = Runner(
        lower(doc),
        provider=provider,
        store=RunStore(None),
        settings=RuntimeSettings(sleep=no_sleep),
    )
    return runner.run(inputs or {})


def events(result: RunResult, type_: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == type_]


# -- the registry ------------------------------------------------------------------------------


def test_builtin_templates() -> None:
    assert {"artifact-builder@1", "classifier@1", "repair@1"} <= set(TEMPLATES.keys())
    assert {"artifact-builder", "classifier", "repair"} <= set(TEMPLATES.ids())
    for template in (ARTIFACT_BUILDER, CLASSIFIER, REPAIR):
        assert "{{ schema }}" in template.system  # the schema-injection point
        assert "{{ rules }}" in template.system
    assert REPAIR.variables == ("output", "violations")


def test_get_without_version_returns_the_newest() -> None:
    assert TEMPLATES.get("artifact-builder") is ARTIFACT_BUILDER
    assert TEMPLATES.get("artifact-builder@1") is ARTIFACT_BUILDER
    registry = PromptTemplateRegistry()
    v1 = registry.register(PromptTemplate(id="t", version=1, system="one {{ schema }}"))
    v3 = registry.register(PromptTemplate(id="t", version=3, system="three {{ rules }}"))
    v2 = registry.register(PromptTemplate(id="t", version=2, system="two"))
    assert registry.get("t") is v3
    assert registry.get("t@1") is v1
    assert registry.get("t@2") is v2
    assert registry.keys() == ["t@1", "t@2", "t@3"]
    assert v3.key == "t@3"


def test_unknown_version_lists_the_known_ones() -> None:
    assert TEMPLATES.find("artifact-builder@9") is None
    with pytest.raises(LatticeUserError) as info:
        TEMPLATES.get("artifact-builder@9")
    message = info.value.message
    assert "'artifact-builder@9'" in message
    assert "versions of 'artifact-builder': 1" in message


@pytest.mark.parametrize(
    ("ref", "suggestion"),
    [
        ("artifact-bilder", "artifact-builder"),
        ("artifact-bilder@1", "artifact-builder"),
        ("clasifier", "classifier"),
        ("repiar@1", "repair"),
    ],
)
def test_unknown_id_has_did_you_mean(ref: str, suggestion: str) -> None:
    assert TEMPLATES.find(ref) is None
    with pytest.raises(LatticeUserError) as info:
        TEMPLATES.get(ref)
    assert f"did you mean {suggestion!r}" in info.value.message


def test_unknown_id_far_from_any_lists_the_known_ids() -> None:
    with pytest.raises(LatticeUserError) as info:
        TEMPLATES.get("zzzzzz")
    assert "known: " in info.value.message
    assert "artifact-builder" in info.value.message


@pytest.mark.parametrize("ref", ["artifact-builder@one", "artifact-builder@-1", "@1", ""])
def test_malformed_refs_are_unknown(ref: str) -> None:
    assert TEMPLATES.find(ref) is None


def test_registering_undeclared_placeholders_raises() -> None:
    registry = PromptTemplateRegistry()
    with pytest.raises(ValueError, match=r"undeclared variables \['audience'\]"):
        registry.register(
            PromptTemplate(id="brief", version=1, system="Write for {{ audience }}. {{ schema }}")
        )
    with pytest.raises(ValueError, match="tone"):
        registry.register(
            PromptTemplate(id="brief", version=1, system="ok", user="{{prompt}} in a {{tone}} tone")
        )
    assert registry.find("brief") is None
    declared = PromptTemplate(
        id="brief", version=1, system="Write for {{ audience }}.", variables=("audience",)
    )
    assert registry.register(declared) is declared
    assert declared.placeholders() == {"audience", "prompt", "input"}


def test_builtins_need_no_declaration() -> None:
    registry = PromptTemplateRegistry()
    text = " ".join(f"{{{{ {name} }}}}" for name in sorted(BUILTINS))
    registry.register(PromptTemplate(id="all", version=1, system=text, user=text))


def test_render_fills_every_placeholder_once() -> None:
    template = PromptTemplate(
        id="t", version=1, system="  S {{ schema }} / {{rules}}  ", user="{{ prompt }}{{ input }}"
    )
    system, user = template.render(
        {"schema": '{"a": 1}', "rules": r"- \d+ {{ prompt }}", "prompt": "P", "input": "\n\nI"}
    )
    assert system == r'S {"a": 1} / - \d+ {{ prompt }}'  # values are not expanded again
    assert user == "P\n\nI"
    with pytest.raises(KeyError):
        template.render({"schema": "", "rules": ""})


# -- templates in documents ---------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"fixed": {"type": "string"}}, "required": ["fixed"]}


def templated(template: str, **data: Any) -> dict[str, Any]:
    return chain(
        node("gen", "prompt", prompt="Fix it", outputSchema=SCHEMA, template=template, **data)
    )


def test_repair_template_without_its_variables_is_a_lowering_error() -> None:
    result = lower_document(templated("repair@1"))
    assert result.ir is None
    diag = only(result, "template-variable-missing")
    assert diag.node_id == "gen"
    assert diag.pointer == "/nodes/1/data/variables"
    assert "output" in diag.message
    assert "violations" in diag.message


def test_repair_template_with_one_variable_names_the_other() -> None:
    diag = only(
        lower_document(templated("repair@1", variables={"output": "{{ $in.draft }}"})),
        "template-variable-missing",
    )
    assert "violations" in diag.message
    assert "needs data.variables violations" in diag.message


def test_repair_template_with_its_variables_runs() -> None:
    doc = templated(
        "repair@1", variables={"output": "{{ $in.draft }}", "violations": "- /fixed: required"}
    )
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"draft": {"type": "string"}},
    }
    provider = MockProvider({"gen": [{"fixed": "yes"}]})
    result = run(doc, provider, {"draft": '{"broken": true}'})
    assert result.status == "completed", result.failure
    (call,) = provider.calls
    assert "You repair a JSON artifact" in (call.system or "")
    assert '{"broken": true}' in call.messages[-1].content
    assert "- /fixed: required" in call.messages[-1].content


@pytest.mark.parametrize(
    ("ref", "hint"),
    [("artifact-bilder@1", "did you mean 'artifact-builder'"), ("classifier@7", "versions of")],
)
def test_unknown_template_in_a_document(ref: str, hint: str) -> None:
    result = lower_document(templated(ref))
    assert result.ir is None
    diag = only(result, "template-unknown")
    assert diag.pointer == "/nodes/1/data/template"
    assert hint in diag.message


def test_unversioned_template_ref_pins_the_newest_version() -> None:
    op = lower(templated("artifact-builder")).ops["gen"]
    assert isinstance(op, LLMWriteOp)
    assert op.template == "artifact-builder@1"


def test_schema_ops_default_to_artifact_builder() -> None:
    doc = chain(node("gen", "prompt", prompt="Make it", outputSchema=SCHEMA))
    provider = MockProvider({"gen": [{"fixed": "x"}]})
    assert run(doc, provider).status == "completed"
    system = provider.calls[0].system or ""
    assert system.startswith("You are a compiler stage")
    assert '"required": ["fixed"]' in system


def test_custom_template_with_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        TEMPLATES, "_templates", {k: dict(v) for k, v in TEMPLATES._templates.items()}
    )
    assert builtin_module.TEMPLATES is TEMPLATES
    TEMPLATES.register(
        PromptTemplate(
            id="brief",
            version=1,
            system="Write for {{ audience }}.\n{{ rules }}\n{{ schema }}",
            variables=("audience",),
        )
    )
    doc = templated("brief@1", variables={"audience": "{{ $in.who }}"})
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"who": {"type": "string"}},
    }
    provider = MockProvider({"gen": [{"fixed": "x"}]})
    result = run(doc, provider, {"who": "new engineers"})
    assert result.status == "completed", result.failure
    assert (provider.calls[0].system or "").startswith("Write for new engineers.")
    missing = lower_document(templated("brief"))
    assert only(missing, "template-variable-missing").message.endswith("audience")


# -- classifier ops ------------------------------------------------------------------------

TICKET = {"type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]}


def classify_doc(node_type: str = "ifElse", **extra: Any) -> dict[str, Any]:
    if node_type == "ifElse":
        branches = [
            {"label": "Urgent", "condition": "the customer is angry or the system is down"},
            {"label": "Normal", "condition": ""},
        ]
    else:
        branches = [
            {"label": "Billing", "condition": "the ticket is about money"},
            {"label": "Bug", "condition": "something is broken"},
            {"label": "Other", "condition": "", "isDefault": True},
        ]
    ends = [node(f"end-{i}", "end", output=f"went {b['label']}") for i, b in enumerate(branches)]
    return workflow(
        [
            node("start", "start", inputs=TICKET),
            node("route", node_type, evaluationTarget="$in.ticket", branches=branches, **extra),
            *ends,
        ],
        [conn("start", "route")]
        + [conn("route", f"end-{i}", f"branch-{i}") for i in range(len(branches))],
    )


def test_natural_language_condition_lowers_to_a_classifier() -> None:
    ir = lower(classify_doc())
    op = ir.ops["route"]
    assert isinstance(op, LLMWriteOp)
    assert op.template == "classifier@1"
    assert op.purpose == "classify"
    assert op.model_class == "small"
    assert op.output_schema is not None
    assert op.output_schema["properties"]["branch"]["enum"] == ["Urgent", "Normal"]
    assert op.output_schema["required"] == ["branch"]
    switches = [o for o in ir.ops.values() if isinstance(o, SwitchOp)]
    assert len(switches) == 1
    assert switches[0].input == "$vars.route.result.branch"


def test_deterministic_condition_makes_no_classifier() -> None:
    doc = classify_doc()
    doc["nodes"][1]["data"]["branches"][0]["condition"] = 'contains "down"'
    ir = lower(doc)
    assert not [o for o in ir.ops.values() if isinstance(o, LLMWriteOp)]
    result = run(doc, MockProvider(), {"ticket": "server down"})
    assert result.output == "went Urgent"


def test_classifier_uses_the_classifier_template_and_picks_a_branch() -> None:
    provider = MockProvider({"route": [{"branch": "Urgent"}]})
    result = run(classify_doc(), provider, {"ticket": "The server is down!!"})
    assert result.status == "completed"
    assert result.output == "went Urgent"
    (call,) = provider.calls
    assert call.node_id == "route"  # classifier calls count under the node
    assert call.model_class == "small"
    system = call.system or ""
    assert system.startswith("You are a classifier")
    assert '"enum": ["Urgent", "Normal"]' in system
    user = call.messages[-1].content
    assert '"Urgent": the customer is angry or the system is down' in user
    assert "The server is down!!" in user
    assert [e["data"]["port"] for e in events(result, "branch_taken")] == ["Urgent"]


def test_classifier_invalid_label_is_repaired() -> None:
    provider = MockProvider({"route": [{"branch": "urgent"}, "Not sure", {"branch": "Normal"}]})
    result = run(classify_doc(), provider, {"ticket": "How do I change my avatar?"})
    assert result.status == "completed", result.failure
    assert result.output == "went Normal"
    assert len(provider.calls) == 3
    failed = events(result, "validation_failed")
    assert [e["data"]["error_type"] for e in failed] == ["schema_error", "json_error"]
    assert failed[0]["data"]["violations"] == [
        {"pointer": "/branch", "message": "'urgent' is not one of ['Urgent', 'Normal']"}
    ]
    repair = provider.calls[1].messages[-1].content
    assert "'urgent' is not one of ['Urgent', 'Normal']" in repair
    assert "How do I change my avatar?" not in repair


@pytest.mark.parametrize(
    "answer",
    [{"branch": "Urgent", "why": "angry"}, {"label": "Urgent"}, {"branch": 0}, ["Urgent"]],
    ids=["extra-key", "wrong-key", "index", "array"],
)
def test_classifier_output_must_be_exactly_one_label(answer: Any) -> None:
    provider = MockProvider({"route": [answer, {"branch": "Urgent"}]})
    result = run(classify_doc(), provider, {"ticket": "down"})
    assert result.output == "went Urgent"
    assert [e["data"]["error_type"] for e in events(result, "validation_failed")] == [
        "schema_error"
    ]


def test_classifier_that_never_answers_a_label_fails() -> None:
    provider = MockProvider({"route": [{"branch": "maybe"}] * 9})
    result = run(classify_doc(), provider, {"ticket": "down"})
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.category == "schema_error"
    assert result.failure.node_id == "route"
    ladder = [a["model_class"] for a in result.failure.attempts]
    # the same wrong label after its repair: each class up the ladder is asked once more
    assert ladder == ["small", "small", "medium", "large"]


def test_switch_classifier_with_three_labels() -> None:
    provider = MockProvider({"route": [{"branch": "Bug"}]})
    result = run(classify_doc("switch"), provider, {"ticket": "the app crashes"})
    assert result.output == "went Bug"
    schema = provider.calls[0].response_schema
    assert schema is not None
    assert schema["properties"]["branch"]["enum"] == ["Billing", "Bug", "Other"]


def test_classifier_model_class_can_be_set() -> None:
    provider = MockProvider({"route": [{"branch": "Normal"}]})
    result = run(classify_doc(modelClass="medium"), provider, {"ticket": "hi"})
    assert result.output == "went Normal"
    assert provider.calls[0].model_class == "medium"
