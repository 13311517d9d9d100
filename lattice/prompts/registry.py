"""PromptTemplateRegistry: versioned prompt templates addressed as ``"id@version"``.

A template has a system part and a user part. Both may use ``{{ name }}`` for its
declared variables plus the built-ins the micro-prompt compiler supplies:

``schema``  the JSON Schema of the expected output (the schema-injection point)
``rules``   the contract's rules (JSON only, one artifact, invariants)
``prompt``  the node's own rendered prompt
``input``   the rendered upstream results

A node names a template with ``data.template`` (``"artifact-builder@1"``, or
``"artifact-builder"`` for the newest version) and supplies the template's declared
variables in ``data.variables``; a missing one is a lowering error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lattice.errors import LatticeUserError, did_you_mean

BUILTINS = frozenset({"schema", "rules", "prompt", "input"})
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class PromptTemplate:
    """One version of a template."""

    id: str
    version: int
    system: str
    user: str = "{{ prompt }}{{ input }}"
    variables: tuple[str, ...] = ()
    """Variables a node must supply (beyond the built-ins)."""
    description: str = ""

    @property
    def key(self) -> str:
        return f"{self.id}@{self.version}"

    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER.findall(self.system)) | set(_PLACEHOLDER.findall(self.user))

    def render(self, values: dict[str, str]) -> tuple[str, str]:
        """(system, user) with every placeholder filled; a missing one raises KeyError."""

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

        return fill(self.system).strip(), fill(self.user).strip()


class PromptTemplateRegistry:
    """Templates by id and version."""

    def __init__(self) -> None:
        self._templates: dict[str, dict[int, PromptTemplate]] = {}

    def register(self, template: PromptTemplate) -> PromptTemplate:
        undeclared = template.placeholders() - BUILTINS - set(template.variables)
        if undeclared:
            raise ValueError(
                f"template {template.key} uses undeclared variables {sorted(undeclared)}"
            )
        self._templates.setdefault(template.id, {})[template.version] = template
        return template

    def ids(self) -> list[str]:
        return sorted(self._templates)

    def keys(self) -> list[str]:
        return sorted(t.key for versions in self._templates.values() for t in versions.values())

    def find(self, ref: str) -> PromptTemplate | None:
        """The template for ``"id@version"`` or ``"id"`` (newest version), or None."""
        name, _, version = ref.partition("@")
        versions = self._templates.get(name)
        if not versions:
            return None
        if not version:
            return versions[max(versions)]
        return versions.get(int(version)) if version.isdigit() else None

    def get(self, ref: str) -> PromptTemplate:
        """Like ``find`` but raises LatticeUserError with a "did you mean" hint."""
        template = self.find(ref)
        if template is None:
            raise LatticeUserError(f"unknown prompt template {ref!r}{self.suggest(ref)}")
        return template

    def suggest(self, ref: str) -> str:
        name = ref.partition("@")[0]
        if name in self._templates:
            return f" (versions of {name!r}: {', '.join(str(v) for v in sorted(self._templates[name]))})"
        return did_you_mean(name, self.ids()) or f" (known: {', '.join(self.ids())})"
