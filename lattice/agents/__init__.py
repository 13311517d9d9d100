"""Agent ops: the bounded tool-calling loop and its records (the tools and the user's
grants are ``lattice.workspace``'s)."""

from lattice.agents.loop import AgentBounds, AgentLoop, ToolBox, ToolJournal
from lattice.agents.records import AgentTranscript, ToolCallRecord, TurnRecord

__all__ = [
    "AgentBounds",
    "AgentLoop",
    "AgentTranscript",
    "ToolBox",
    "ToolCallRecord",
    "ToolJournal",
    "TurnRecord",
]
