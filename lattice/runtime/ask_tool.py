"""``AskUserQuestion``: the main agent's way to ask the person, as an ``askUserQuestion``
node asks.

A prompt step run as a turn of the main agent (``lattice.lower.main_agent``) is offered
Claude Code's ``AskUserQuestion`` tool. A call takes the answer given for the step's
node (``lattice resume RUN --answer NODE=…``, the gateway's answers, the panel), else asks
a live person (the terminal), else stops the loop with ``QuestionPending``: the AGENT op
then halts the run the way an ASK op does, keeping the turns and tool results it has
journaled, so that the resumed op replays them and gives the model the answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from lattice.agents.loop import QuestionPending
from lattice.errors import LatticeRunError
from lattice.events import EventKind
from lattice.ir.models import AgentOp, AskOp, AskOption
from lattice.llm.base import ToolDef
from lattice.runtime.answers import normalize_answer
from lattice.runtime.context import AskHuman
from lattice.tools.toolset import ToolResult
from lattice.workspace.grants import ASK_TOOL

ASK_TOOL_DEF = ToolDef(
    ASK_TOOL,
    "Ask the person a question and wait for the answer: to clarify the task, to choose "
    "between approaches, to approve a plan before acting on it. Give 2-4 options when the "
    "answer is a choice (the person may still answer in their own words), none for a free "
    "answer. One question per call.",
    {
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "question": {"type": "string"},
                        "header": {"type": "string"},
                        "options": {
                            "type": "array",
                            "maxItems": 4,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "label": {"type": "string"},
                                    "description": {"type": "string"},
                                },
                                "required": ["label"],
                            },
                        },
                        "multiSelect": {"type": "boolean"},
                    },
                    "required": ["question"],
                },
            }
        },
        "required": ["questions"],
    },
)
"""Claude Code's ``AskUserQuestion`` input, one question per call (Claude Code takes up
to four: a model that asks several is told to ask them one by one)."""


class AskToolset:
    """The ``AskUserQuestion`` tool of one visit of a main-agent AGENT op.

    ``answers`` are the answers given for the op's node, used in order; ``ask_human``
    asks a live person when they run out (None: the loop stops with QuestionPending).
    """

    name = "ask"

    def __init__(
        self,
        op: AgentOp,
        answers: list[Any],
        ask_human: AskHuman | None,
        emit: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.op = op
        self.answers = answers
        self.ask_human = ask_human
        self.emit = emit

    async def list_tools(self) -> list[ToolDef]:
        return [ASK_TOOL_DEF]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        ask = self._question(arguments)
        if isinstance(ask, ToolResult):
            return ask
        answer = self.answers.pop(0) if self.answers else None
        if answer is None and self.ask_human is not None:
            answer = self.ask_human(ask)
            if inspect.isawaitable(answer):
                answer = await answer
        if answer is None:
            raise QuestionPending(ask.question, [o.label for o in ask.options], ask.multi_select)
        try:
            value = normalize_answer(ask, answer)
        except LatticeRunError:  # Claude Code's "Other": the person's own words
            value = {"text": answer if isinstance(answer, str) else str(answer)}
        self.emit(EventKind.HUMAN_ANSWER, {"answer": value, "tool": ASK_TOOL})
        said = value.get("label") or ", ".join(value.get("labels") or ()) or value.get("text")
        return ToolResult(
            f'User has answered your questions: "{ask.question}"="{said}". You can now '
            "continue with the user's answers in mind."
        )

    def _question(self, arguments: dict[str, Any]) -> AskOp | ToolResult:
        """The call's question as an ASK op of the step's node, or the error to answer."""
        questions = arguments.get("questions")
        if not isinstance(questions, list) or not questions:
            return ToolResult("'questions' must be a list of one question", True)
        if len(questions) > 1:
            return ToolResult("Ask one question per call; ask the others after its answer.", True)
        first = questions[0]
        question = first.get("question") if isinstance(first, dict) else None
        if not isinstance(question, str) or not question.strip():
            return ToolResult("each question needs a non-empty 'question'", True)
        raw = first.get("options") or []
        options = [
            AskOption(label=o["label"], description=o.get("description"))
            for o in (raw if isinstance(raw, list) else [])
            if isinstance(o, dict) and isinstance(o.get("label"), str) and o["label"].strip()
        ]
        return AskOp(
            id=self.op.id,
            source_node=self.op.source_node,
            name=self.op.name,
            question=question,
            options=options,
            multi_select=first.get("multiSelect") is True,
            writes=self.op.writes,
        )

    async def aclose(self) -> None:
        return None


def take_step_answers(answers: dict[str, Any], node_id: str) -> list[Any]:
    """The answers given for a prompt step's questions (removed from ``answers``: they are
    the tool's, not information added to the step's prompt)."""
    given = answers.pop(node_id, None)
    if given is None:
        return []
    return list(given) if isinstance(given, list) else [given]
