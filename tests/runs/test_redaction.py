"""Masking secrets in texts that arrive in pieces (streamed model answers)."""

from __future__ import annotations

import pytest

from lattice.masking import secrets_pattern
from lattice.runs.redaction import PieceMasker

SECRET = "s3cret-value-for-tests"


@pytest.fixture
def masker(monkeypatch: pytest.MonkeyPatch) -> PieceMasker:
    monkeypatch.setenv("LATTICE_PIECE_SECRET", SECRET)
    return PieceMasker(("LATTICE_PIECE_SECRET",))


@pytest.mark.parametrize("cut", [1, 5, len(SECRET) - 1])
def test_a_secret_cut_between_pieces_goes_out_masked(masker: PieceMasker, cut: int) -> None:
    text = f"the key is {SECRET} and more text follows here, and on and on"
    split = text.index(SECRET) + cut
    pieces = [text[:split], text[split:]]
    out = "".join(masker.mask(None, "call", piece) for piece in pieces)
    masked = text.replace(SECRET, "***")
    assert SECRET not in out
    assert masked.startswith(out) and out.startswith("the key is *** and")
    # at most the longest form of the secret less one is held back, to be told by the
    # next piece (its base64 form is longer than the secret)
    longest = secrets_pattern([SECRET])[1]
    assert len(SECRET) <= longest <= len(SECRET) * 4 // 3 + 1
    assert len(masked) - len(out) <= longest - 1


def test_a_new_stream_drops_what_the_last_one_held(masker: PieceMasker) -> None:
    held = secrets_pattern([SECRET])[1] - 1
    assert masker.mask("b", "call 1", "x" * 40) == "x" * (40 - held)
    assert masker.mask("b", "call 2", "y" * 40) == "y" * (40 - held)


def test_without_secrets_pieces_pass_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    masker = PieceMasker(())
    assert [masker.mask(None, 1, p) for p in ("ab", "cd")] == ["ab", "cd"]
