"""The runtime: Runner, StateStore, run folders and events."""

from lattice.contracts.report import FailureReport
from lattice.contracts.usage import Usage
from lattice.runs.store import RunStore
from lattice.runtime.results import RunResult
from lattice.runtime.runner import RunLimits, Runner
from lattice.runtime.state import MissingValueError, StateStore

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
