"""Permission rules as Claude Code writes them: reading them (``settings.py``), parsing
and matching one (``rules.py``), and deciding a tool call by them (``policy.py``)."""

from lattice.permissions.policy import MODES, Mode, Permissions, Verdict
from lattice.permissions.rules import Rule, RuleError, RuleSource, parse_rule
from lattice.permissions.settings import build_permissions

__all__ = [
    "MODES",
    "Mode",
    "Permissions",
    "Rule",
    "RuleError",
    "RuleSource",
    "Verdict",
    "build_permissions",
    "parse_rule",
]
