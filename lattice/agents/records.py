"""What an agent loop records: its turns, each turn's tool calls and their results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lattice.llm.base import ToolCall
from lattice.tools.toolset import FileChange, ToolResult


@dataclass(slots=True)
class ToolCallRecord:
    """One tool call of a turn and what it gave back."""

    call: ToolCall
    result: ToolResult
    duration_ms: float = 0.0
    replayed: bool = False
    """The result came from the run's journal (a resumed run), the tool did not run again."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.call.to_json(),
            "result": self.result.text,
            "is_error": self.result.is_error,
            "duration_ms": round(self.duration_ms, 3),
        }
        if self.result.changes:
            out["changes"] = [change.to_json() for change in self.result.changes]
        if self.replayed:
            out["replayed"] = True
        return out


@dataclass(slots=True)
class TurnRecord:
    """One model turn: what the model wrote, the tools it called, the tokens it took."""

    number: int
    attempt: int
    """The contract attempt the turn belongs to (a repair of the final answer is another)."""
    prompt_hash: str
    text: str = ""
    model: str = "unknown"
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None
    tools_offered: bool = True
    calls: list[ToolCallRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.number,
            "attempt": self.attempt,
            "prompt_hash": self.prompt_hash,
            "text": self.text,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "finish_reason": self.finish_reason,
            "tools_offered": self.tools_offered,
            "tool_calls": [call.to_json() for call in self.calls],
        }


@dataclass(slots=True)
class AgentTranscript:
    """Every turn of one visit of an agent op, in order."""

    tools: tuple[str, ...] = ()
    """The tools the model was offered."""
    turns: list[TurnRecord] = field(default_factory=list)

    @property
    def tool_calls(self) -> int:
        return sum(len(turn.calls) for turn in self.turns)

    @property
    def tokens(self) -> int:
        return sum(turn.input_tokens + turn.output_tokens for turn in self.turns)

    def changes(self) -> list[FileChange]:
        """Every file change of the visit, in the order the tools made them."""
        return [
            change for turn in self.turns for call in turn.calls for change in call.result.changes
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": list(self.tools),
            "turns": [turn.to_json() for turn in self.turns],
            "tool_calls": self.tool_calls,
        }
