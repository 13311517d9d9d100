"""The terminal progress line shows the answer of the op in flight as it streams in."""

from __future__ import annotations

from typing import Any

from lattice.cli.common import Progress


class FakeStatus:
    def __init__(self) -> None:
        self.shown: list[str] = []

    def update(self, text: str) -> None:
        self.shown.append(text)

    def stop(self) -> None:
        pass


def _event(type_: str, node: str | None = "draft", **data: Any) -> dict[str, Any]:
    return {"seq": 1, "run_id": "r", "type": type_, "op_id": node, "node_id": node, "data": data}


def _live() -> tuple[Progress, FakeStatus]:
    progress = Progress(live=False)
    progress.status = status = FakeStatus()
    progress.wants_deltas = True
    return progress, status


def test_a_terminal_takes_deltas_and_a_pipe_does_not() -> None:
    assert Progress(live=False).wants_deltas is False


def test_the_streaming_answer_follows_the_status_line() -> None:
    progress, status = _live()
    progress(_event("op_started", kind="LLM_WRITE"))
    progress(_event("llm_request", attempt=1))
    progress(_event("llm_delta", attempt=1, text='{"summary": '))
    progress(_event("llm_delta", attempt=1, text='"All\nabout [b]tides"}'))
    first, *_, last = status.shown
    assert first.startswith("[bold]draft[/bold] (LLM_WRITE)")
    assert last.startswith(first + "\n")
    assert last.endswith('draft ▸ {"summary": "All about \\[b]tides"}[/dim]')  # one line, escaped


def test_a_new_attempt_or_op_starts_the_text_over() -> None:
    progress, status = _live()
    progress(_event("op_started", kind="LLM_WRITE"))
    progress(_event("llm_delta", text="broken hal"))
    progress(_event("llm_request", attempt=2))
    progress(_event("llm_delta", text="whole"))
    assert status.shown[-1].endswith("draft ▸ whole[/dim]")
    progress(_event("op_started", "review", kind="LLM_WRITE"))
    assert "▸" not in status.shown[-1]


def test_only_the_end_of_a_long_answer_is_shown() -> None:
    progress, status = _live()
    progress(_event("op_started", kind="LLM_WRITE"))
    for i in range(100):
        progress(_event("llm_delta", text=f"word{i} "))
    tail = status.shown[-1].split("▸ ", 1)[1].removesuffix("[/dim]")
    assert len(tail) <= Progress.TAIL
    assert tail.rstrip().endswith("word99")


def test_deltas_are_not_counted_as_progress() -> None:
    progress, _ = _live()
    progress(_event("llm_delta", text="x"))
    assert (progress.ops, progress.calls) == (0, 0)


def test_an_escape_sequence_the_model_streams_is_shown_not_obeyed() -> None:
    """A model's answer streams to the status line: an OSC sequence in it (the
    terminal's title, or its clipboard with OSC 52) is written out, not sent."""
    progress, status = _live()
    progress(_event("op_started", kind="LLM_WRITE"))
    progress(_event("llm_delta", attempt=1, text="ok\x1b]52;c;cm0gLXJmIH4K\x07 done"))
    assert "\x1b" not in status.shown[-1] and "\x07" not in status.shown[-1]
    assert status.shown[-1].endswith("draft ▸ ok\\x1b]52;c;cm0gLXJmIH4K\\x07 done[/dim]")
