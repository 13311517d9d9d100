"""The kinds of a run's events (the ``type`` of each line of ``events.jsonl``, docs/runs.md).

A member is its value (a ``str``): an event holds the plain string, so ``events.jsonl``
written by earlier versions reads as before, and JSON encodes a member as its value.
The foundation layer holds them because contracts, agents, tools and the runtime all emit
events.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """Every event kind Lattice emits; the data each carries is in docs/runs.md."""

    # the run
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    RUN_HALTED = "run_halted"
    RUN_FAILED = "run_failed"
    RUN_INTERRUPTED = "run_interrupted"
    RUN_FINISHED = "run_finished"
    # an op and the walk
    OP_STARTED = "op_started"
    OP_FINISHED = "op_finished"
    STATE_WRITE = "state_write"
    BRANCH_TAKEN = "branch_taken"
    HUMAN_ANSWER = "human_answer"
    FORK_STARTED = "fork_started"
    FORK_JOINED = "fork_joined"
    FOR_EACH_STARTED = "for_each_started"
    FOR_EACH_FINISHED = "for_each_finished"
    # a model call under contract
    LLM_REQUEST = "llm_request"
    LLM_RESPONSE = "llm_response"
    VALIDATION_FAILED = "validation_failed"
    OUTPUT_SALVAGED = "output_salvaged"
    REPAIR_ATTEMPT = "repair_attempt"
    RETRY = "retry"
    ESCALATED = "escalated"
    # tools
    TOOL_SESSION_OPENED = "tool_session_opened"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    # agents
    AGENT_TOOL_REFUSED = "agent_tool_refused"
    AGENT_TOOL_MISSING = "agent_tool_missing"
    AGENT_STARTED = "agent_started"
    AGENT_FINISHED = "agent_finished"
    AGENT_TURN = "agent_turn"
    TOOL_CALL_STARTED = "tool_call_started"
    TOOL_CALL_FINISHED = "tool_call_finished"
    APPROVAL_REQUESTED = "approval_requested"
    # to listeners only, never written (``TRANSIENT_EVENTS``)
    LLM_DELTA = "llm_delta"
    LLM_CONTENT = "llm_content"
