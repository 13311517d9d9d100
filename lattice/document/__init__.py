"""Workflow documents: models, loading and normalisation of the cc-wf-studio format."""

from lattice.document.loader import load_workflow, parse_workflow
from lattice.document.models import Connection, Node, SubAgentFlow, Workflow, normalize_port

__all__ = [
    "Connection",
    "Node",
    "SubAgentFlow",
    "Workflow",
    "load_workflow",
    "normalize_port",
    "parse_workflow",
]
