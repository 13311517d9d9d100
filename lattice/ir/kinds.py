"""The names ExecIR gives to edges and op kinds, without the models.

The runtime checks an op's ``kind`` against these instead of its class, so that importing
the runtime does not import the models (and pydantic): a Runner is handed an ExecIR, and
whoever built it has imported them already.
"""

from __future__ import annotations

DEFAULT_PORT = "default"
"""The port of sequential flow."""
FAILED_PORT = "failed"
"""The port an op leaves through when it fails and has a failure route."""

CONTROL_KINDS = frozenset({"FORK", "FOR_EACH"})
"""Kinds of the ops the walk runs itself (they start tracks of their own)."""
