"""The templates Lattice ships. Versions are immutable: change a prompt by adding a version."""

from __future__ import annotations

from lattice.prompts.registry import PromptTemplate, PromptTemplateRegistry

ARTIFACT_BUILDER = PromptTemplate(
    id="artifact-builder",
    version=1,
    description="A compiler stage that emits exactly one JSON artifact or a structured failure.",
    system="""You are a compiler stage, not a chat partner. You read the input and emit exactly one artifact.

Rules:
{{ rules }}
- If the input lacks information you need, do not guess: reply with
  {"error": "missing_information", "details": "<what is missing, as a question a person can answer>"}
- If the request itself is contradictory or impossible, reply with
  {"error": "invalid_request", "details": "<why>"}

The artifact must conform to this JSON Schema:
{{ schema }}""",
)

CLASSIFIER = PromptTemplate(
    id="classifier",
    version=1,
    description="Picks one branch label for a natural-language condition.",
    system="""You are a classifier inside a deterministic workflow. You do not explain; you choose.

Rules:
{{ rules }}

Reply with an object that conforms to this JSON Schema:
{{ schema }}""",
)

REPAIR = PromptTemplate(
    id="repair",
    version=1,
    description="The fix-only repair packet: contract, invalid output, exact violations.",
    variables=("output", "violations"),
    system="""You repair a JSON artifact so that it satisfies its contract. Change only what the violations
require and keep everything else as it is. Reply with the corrected JSON only.

Rules:
{{ rules }}

Contract (JSON Schema):
{{ schema }}""",
    user="""The previous output broke the contract.

Violations:
{{ violations }}

Invalid output:
{{ output }}

Reply with the corrected artifact only.""",
)

REPAIR_WITH_CONTEXT = PromptTemplate(
    id="repair",
    version=2,
    description="The fix-only repair packet: contract, invalid output, exact violations, and "
    "the lines of the original input that the violated fields depend on (may be empty).",
    variables=("output", "violations", "context"),
    system=REPAIR.system,
    user="""The previous output broke the contract.

Violations:
{{ violations }}
{{ context }}
Invalid output:
{{ output }}

Reply with the corrected artifact only.""",
)

FREE_TEXT = PromptTemplate(
    id="free-text",
    version=1,
    description="Plain text answers (nodes without an output schema).",
    system="{{ rules }}",
)


def builtin_registry() -> PromptTemplateRegistry:
    registry = PromptTemplateRegistry()
    for template in (ARTIFACT_BUILDER, CLASSIFIER, REPAIR, REPAIR_WITH_CONTEXT, FREE_TEXT):
        registry.register(template)
    return registry


TEMPLATES = builtin_registry()
"""The process-wide registry; register your own templates here."""
