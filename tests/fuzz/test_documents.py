"""Fuzzing: mutated shipped and corpus documents never crash, stall or exhaust Lattice.

Each example mutates a real document (``bench/document_fuzzing.py``: keys dropped,
duplicated, renamed and retyped, odd values, deeper nesting, truncated strings, random
templates and conditions, odd node ids, self-calling sub-flows) and holds lowering to
the standard: it returns diagnostics or raises only a ``LatticeUserError``; and when
``check`` accepts the document, every emitter works, the IR passes ``check_ir`` and
reads back, and a Runner can be built for it. ``bench/fuzz_documents.py`` runs the
same mutations by the ten thousand.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.document_fuzzing import REPO, load_documents, mutate, mutate_text
from lattice.errors import DocumentError, LatticeUserError
from lattice.ir.serialize import check_ir, ir_from_json
from lattice.lower import lower_document
from lattice.lower.emit import EMITTERS
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings

DOCUMENTS = load_documents()
SETTINGS = RuntimeSettings(repo_root=REPO)
"""A repository for the invariants that read one (the planner's documents use them)."""
FUZZ = settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _hold_to_the_standard(source: Any) -> None:
    try:
        result = lower_document(source)
    except DocumentError as exc:  # only for what cannot be read at all
        assert exc.diagnostics
        assert all(d.code and d.message for d in exc.diagnostics)
        return
    except LatticeUserError:
        return
    for d in result.diagnostics:
        assert d.code and d.message, d
        assert d.pointer == "" or d.pointer.startswith("/"), d.format()
    if result.errors:
        assert result.ir is None
        return
    ir = result.ir
    assert ir is not None
    assert check_ir(ir) == []
    texts = {name: emit(ir) for name, emit in EMITTERS.items()}
    assert all(texts.values())
    assert ir_from_json(texts["execir"]) == ir
    Runner(ir, store=RunStore(None), settings=SETTINGS)


@FUZZ
@given(
    which=st.integers(min_value=0, max_value=len(DOCUMENTS) - 1),
    rnd=st.randoms(use_true_random=False),
    count=st.integers(min_value=1, max_value=6),
)
def test_mutated_documents_lower_or_report(which: int, rnd: random.Random, count: int) -> None:
    _, base = DOCUMENTS[which]
    _hold_to_the_standard(mutate(base, rnd, count))


@settings(FUZZ, max_examples=300)
@given(
    which=st.integers(min_value=0, max_value=len(DOCUMENTS) - 1),
    rnd=st.randoms(use_true_random=False),
    garble=st.booleans(),
)
def test_mutated_files_lower_or_report(which: int, rnd: random.Random, garble: bool) -> None:
    _, base = DOCUMENTS[which]
    doc = mutate(base, rnd, rnd.randint(1, 4))
    try:
        text = json.dumps(doc, ensure_ascii=False)
    except (ValueError, RecursionError):
        text = json.dumps(base, ensure_ascii=False)
    if garble:
        text = mutate_text(text, rnd)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "doc.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        _hold_to_the_standard(path)


def test_the_documents_themselves_lower() -> None:
    assert len(DOCUMENTS) >= 10
    for name, doc in DOCUMENTS:
        result = lower_document(doc)
        assert result.ir is not None, name
        _hold_to_the_standard(doc)
