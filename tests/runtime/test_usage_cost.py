"""Usage accounting: an optional price table gives an estimated cost."""

from __future__ import annotations

from lattice.llm import MockProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, node


def _run(prices: dict[str, tuple[float, float]]) -> dict[str, object]:
    ir = lower(chain(node("p", "prompt", prompt="hello")))
    provider = MockProvider({"p": ["x" * 400]})
    result = Runner(
        ir, provider=provider, store=RunStore(None), settings=RuntimeSettings(prices=prices)
    ).run({})
    return result.usage.to_json()


def test_cost_is_estimated_from_the_price_table() -> None:
    usage = _run({"mock-model": (1.0, 10.0)})
    expected = (usage["input_tokens"] * 1.0 + usage["output_tokens"] * 10.0) / 1_000_000  # type: ignore[operator]
    assert usage["output_tokens"] == 100
    assert usage["estimated_cost_usd"] == round(expected, 6)


def test_no_cost_without_a_price_for_every_model() -> None:
    assert _run({"another-model": (1.0, 1.0)})["estimated_cost_usd"] is None
    assert _run({})["estimated_cost_usd"] is None
