"""DisabledProvider: the provider when none is configured; every call fails with what to do."""

from __future__ import annotations

from lattice.errors import ErrorType, LatticeRunError
from lattice.llm.base import LLMRequest, LLMResponse

HOW_TO_CONFIGURE = (
    "no LLM provider is configured. Run offline with --provider mock --mock FILE "
    "(or --fixtures FILE), or choose a real provider with --provider openai|anthropic|litellm "
    "(keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY)"
)


class DisabledProvider:
    """Fails every call clearly (error_type ``provider_disabled``)."""

    name = "disabled"

    def __init__(self, how_to: str = HOW_TO_CONFIGURE) -> None:
        self.how_to = how_to
        """What the error says to do: the CLI's flags unless a front door (the HTTP API)
        names its own options."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise LatticeRunError(
            f"node {request.node_id!r} needs a model, but {self.how_to}",
            error_type=ErrorType.PROVIDER_DISABLED,
            node_id=request.node_id,
        )
