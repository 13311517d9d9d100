"""Agent ops: the bounded tool-calling loop, its records and the user's grants."""

from lattice.agents.grants import AgentGrant, ToolDecision
from lattice.agents.loop import AgentBounds, AgentLoop, ToolBox, ToolJournal
from lattice.agents.records import AgentTranscript, ToolCallRecord, TurnRecord

__all__ = [
    "AgentBounds",
    "AgentGrant",
    "AgentLoop",
    "AgentTranscript",
    "ToolBox",
    "ToolCallRecord",
    "ToolDecision",
    "ToolJournal",
    "TurnRecord",
]
