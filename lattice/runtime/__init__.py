"""The runtime: Runner, StateStore, run folders and events."""

from lattice.runtime.results import FailureReport, RunResult, Usage
from lattice.runtime.runner import RunLimits, Runner
from lattice.runtime.state import MissingValueError, StateStore
from lattice.runtime.store import RunStore

__all__ = [
    "FailureReport",
    "MissingValueError",
    "RunLimits",
    "RunResult",
    "RunStore",
    "Runner",
    "StateStore",
    "Usage",
]
