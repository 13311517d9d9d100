"""Masking secrets: which values, in which forms, and in texts that arrive in pieces
(streamed model answers)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import idna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.masking import MIN_MASKED_LENGTH, SecretFinder, maskable, scrub, secrets_pattern
from lattice.runs.redaction import PieceMasker, make_redactor, redact_result
from lattice.runs.store import SecretInDocument
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, lower_ok, node

SECRET = "s3cret-value-for-tests"


@pytest.fixture
def masker(monkeypatch: pytest.MonkeyPatch) -> PieceMasker:
    monkeypatch.setenv("LATTICE_PIECE_SECRET", SECRET)
    return PieceMasker(("LATTICE_PIECE_SECRET",))


@pytest.mark.parametrize("cut", [1, 5, len(SECRET) - 1])
def test_a_secret_cut_between_pieces_goes_out_masked(masker: PieceMasker, cut: int) -> None:
    text = f"the key is {SECRET} and more text follows here" + ", and on" * 20
    split = text.index(SECRET) + cut
    pieces = [text[:split], text[split:]]
    out = "".join(masker.mask(None, "call", piece) for piece in pieces)
    masked = text.replace(SECRET, "***")
    assert SECRET not in out
    assert masked.startswith(out) and out.startswith("the key is *** and")
    # at most the longest form of the secret less one is held back, to be told by the
    # next piece (every character of it percent-escaped: three times as long)
    longest = SecretFinder([SECRET]).longest
    assert longest == 3 * len(SECRET)
    assert len(masked) - len(out) <= longest - 1


@pytest.mark.parametrize("cut", [1, 3, 10, 40])
def test_a_percent_escaped_secret_cut_between_pieces_goes_out_masked(
    masker: PieceMasker, cut: int
) -> None:
    escaped = "".join(f"%{ord(c):02x}" for c in SECRET)  # every character an escape
    text = f"the key is {escaped} and more text follows here" + ", and on" * 20
    split = text.index(escaped) + cut
    out = "".join(masker.mask(None, "call", piece) for piece in (text[:split], text[split:]))
    assert out.startswith("the key is *** and"), out


def test_a_new_stream_drops_what_the_last_one_held(masker: PieceMasker) -> None:
    held = SecretFinder([SECRET]).longest - 1
    assert masker.mask("b", "call 1", "x" * 40) == "x" * (40 - held)
    assert masker.mask("b", "call 2", "y" * 40) == "y" * (40 - held)


def test_without_secrets_pieces_pass_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    masker = PieceMasker(())
    assert [masker.mask(None, 1, p) for p in ("ab", "cd")] == ["ab", "cd"]


@pytest.mark.parametrize("key", ["test", "EMPTY", "ollama", "not-needed", "sk-no-key-required"])
def test_a_key_that_is_also_a_word_is_never_masked(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """Masking it would rewrite every such word, the SWITCH case keys of an ExecIR
    included (``{"port": "Billing", "test": {...}}``); it is kept out at the source."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    text = f'{{"port": "Billing", "test": {{"op": "eq"}}, "note": "a {key} and {key.upper()}"}}'
    assert make_redactor()(text) == text
    assert PieceMasker().mask(None, 1, text) == text


@pytest.mark.parametrize(
    ("value", "maskable_"),
    [
        ("test", False),
        ("password", False),
        ("not-needed", False),
        ("sk-test-1234", False),
        ("12345678", False),
        ("Hello World", False),
        ("sk-proj-4fG7hQ2", True),
        ("password1", True),
        ("sk-live-0123456789", True),
        ("hunter2-not-for-anyone", True),
        ("CamelCaseWord", True),
    ],
)
def test_which_values_are_masked(value: str, maskable_: bool) -> None:
    assert maskable(value) is maskable_


def test_every_form_of_a_secret_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "Sé+cret/=42 x"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    redact = make_redactor()
    basic = base64.b64encode(f"user:{secret}".encode()).decode()
    for form in (
        secret,
        secret.lower(),
        secret.upper(),
        quote(secret, safe=""),
        quote(secret, safe="").lower(),
        quote(secret, safe="/"),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    ):
        assert redact(f"<{form}>") == "<***>", form
    masked = redact(f"Basic {basic}")
    assert masked.startswith("Basic dXNlcjp") and "***" in masked and len(masked) < 20
    url_secret = "https://Bücher-Hook-9f3a.example/x"
    monkeypatch.setenv("OPENAI_API_KEY", url_secret)
    host = httpx.URL(url_secret).raw_host.decode()
    assert host.startswith("xn--")
    assert make_redactor()(f"connecting to {host}") == "connecting to ***.example"


@pytest.mark.parametrize(
    "written",
    [
        "sk-proj%2DQ7mZ4kV9xR2pL8wN3bT6",  # an unreserved "-" written as an escape
        "sk-proj%2dQ7mZ4kV9xR2pL8wN3bT6",  # ... in lower-case hex
        "%73%6B%2D%70%72%6F%6A-Q7mZ4kV9xR2pL8wN3bT6",  # letters too
        "".join(f"%{ord(c):02x}" for c in "sk-proj-Q7mZ4kV9xR2pL8wN3bT6"),  # every character
        "SK%2DPROJ%2DQ7MZ4KV9XR2PL8WN3BT6",  # and upper-cased
    ],
)
def test_a_secret_with_non_canonical_percent_escapes_is_masked(
    written: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An escape of an unreserved character means the character itself in a URL: a
    server may echo ``sk-proj%2D…`` for ``sk-proj-…``. The text around it is kept as it
    was, escapes included."""
    secret = "sk-proj-Q7mZ4kV9xR2pL8wN3bT6"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    text = f"GET /a%20b?k={written}&next=%2Fc%7E%41 done"
    expected = "GET /a%20b?k=***&next=%2Fc%7E%41 done"
    assert make_redactor()(text) == expected
    assert scrub(text, [secret]) == expected
    masker = PieceMasker()
    out = "".join(masker.mask(None, 1, p) for p in (text[:20], text[20:], "x" * 200))
    held = SecretFinder([secret]).longest - 1
    assert out == (expected + "x" * 200)[: len(expected) + 200 - held]


def test_a_secret_that_holds_an_escape_itself_is_masked_however_the_text_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "pa%41ss-9f3Kq-w0rd"  # "%41" is part of the value
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    redact = make_redactor()
    for text in (secret, "paAss-9f3Kq-w0rd", "pa%2541ss%2D9f3Kq-w0rd"):
        assert redact(f"<{text}>") == "<***>", text
        assert redact(f"<{text}> %2D") == "<***> %2D", text  # with an escape to normalise


@settings(max_examples=300, deadline=None)
@given(
    value=st.text(alphabet=st.sampled_from("aZ09-_.~+/=%é"), min_size=MIN_MASKED_LENGTH).filter(
        maskable
    ),
    escapes=st.lists(st.sampled_from(["", "%{:02x}", "%{:02X}"]), min_size=40, max_size=40),
)
def test_any_percent_escape_of_an_unreserved_character_is_masked(
    value: str, escapes: list[str]
) -> None:
    """Each unreserved character of a value (as it is, or percent-encoded as a URL writes
    it) written as an escape, in either case of hex, or not."""
    os.environ["LATTICE_PROPERTY_SECRET"] = value
    try:
        redact = make_redactor(("LATTICE_PROPERTY_SECRET",))
        for encoded in (value, quote(value, safe="")):
            written = "".join(
                (escapes[i % 40].format(ord(c)) or c)
                if (c.isascii() and c.isalnum()) or c in "-._~"
                else c
                for i, c in enumerate(encoded)
            )
            assert redact(f"<{written}>") == "<***>", written
    finally:
        del os.environ["LATTICE_PROPERTY_SECRET"]


def test_a_tool_result_is_masked_where_it_enters_the_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    redact = make_redactor()
    clean = {"a": [1, "x", {"b": None}], "n": 1.5, "t": True}
    assert redact_result(clean, redact) is clean  # nothing to mask: the value itself
    echoed = {"k": [f"x {SECRET.upper()}"], quote(SECRET): {"d": SECRET.replace("-", "%2d")}}
    assert redact_result(echoed, redact) == {"k": ["x ***"], "***": {"d": "***"}}
    assert redact_result(f"<{SECRET}>", redact) == "<***>"


def test_a_document_that_holds_a_secret_is_refused_not_masked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A resume runs the document and ExecIR as written: masking them would change what
    runs, so a document holding a secret's value as text is refused."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    doc = chain(node("p", "prompt", prompt=f"the key is {SECRET}"))
    runner = Runner(
        lower_ok(doc), settings=RuntimeSettings(gc_pacing=False), store=RunStore(tmp_path)
    )
    with pytest.raises(SecretInDocument, match="refer to it as"):
        runner.run({})
    assert list(tmp_path.iterdir()) == []  # refused before its folder was made


@settings(max_examples=300, deadline=None)
@given(
    value=st.text(
        alphabet=st.sampled_from("aZ09-_.~+/= !%éüßİK\u212a日"), min_size=MIN_MASKED_LENGTH
    ).filter(maskable),
    prefix=st.sampled_from(["", "u:", "user:", "x"]),
)
def test_the_quick_test_never_lets_a_form_through(value: str, prefix: str) -> None:
    """The redactor skips the pattern when the text lacks every anchor: never when the
    pattern would have found a form of the secret."""
    os.environ["LATTICE_PROPERTY_SECRET"] = value
    try:
        redact = make_redactor(("LATTICE_PROPERTY_SECRET",))
        pattern, _ = secrets_pattern([value])
        assert pattern is not None
        texts = [
            value,
            value.lower(),
            value.upper(),
            quote(value, safe=""),
            quote(value, safe="").lower(),
            quote_plus(value),
            json.dumps(value),
            json.dumps(value, ensure_ascii=False),
            base64.b64encode(f"{prefix}{value}".encode()).decode(),
        ]
        for label in re.split(r"[^\w-]|_", value.lower()):
            with contextlib.suppress(idna.IDNAError, UnicodeError):
                texts.append(idna.encode(label, uts46=True).decode())
        for text in texts:
            if pattern.search(text):
                assert redact(text) == pattern.sub("***", text), text
    finally:
        del os.environ["LATTICE_PROPERTY_SECRET"]


def _go_json(text: str) -> str:
    """JSON as Go's encoding/json writes it: ``&``, ``<`` and ``>`` as ``\\u0026``…"""
    out = json.dumps(text, ensure_ascii=False)
    return out.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


@pytest.mark.parametrize(
    "written",
    [
        pytest.param(lambda s: json.dumps(s).replace("/", "\\/"), id="php-escaped-slash"),
        pytest.param(_go_json, id="go-escaped-html-chars"),
        pytest.param(lambda s: json.dumps(json.dumps({"k": s})), id="json-in-a-json-string"),
        pytest.param(
            lambda s: json.dumps(json.dumps({"k": s}, ensure_ascii=False)), id="json-in-json-utf8"
        ),
        pytest.param(
            lambda s: json.dumps(json.dumps({"k": s}).replace("/", "\\/")), id="php-in-json"
        ),
    ],
)
def test_a_secret_escaped_as_other_json_writers_do_is_masked(
    written: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A response body echoing a secret, as a PHP or Go server writes JSON, recorded as a
    string inside an event line (JSON text inside a JSON string)."""
    secret = 'Zq81/x+y&z<w>"é\\-key'
    monkeypatch.setenv("LATTICE_TEST_SECRET", secret)
    redact = make_redactor(("LATTICE_TEST_SECRET",))
    text = f"body: {written(secret)} end"
    masked = redact(text)
    assert "***" in masked, masked
    assert "Zq81" not in masked and "key" not in masked, masked


def test_lattice_own_keys_are_masked_whole_and_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = (base64.b64encode(bytes([n]) * 32).decode() for n in (7, 9))
    monkeypatch.setenv("LATTICE_TEMPORAL_KEY", f"{first}, {second}")
    monkeypatch.setenv("LATTICE_SERVER_TOKEN", "gT7x9Qz2kLwR4vN8")
    redact = make_redactor()
    text = f"old key {second}; new key {first}; token gT7x9Qz2kLwR4vN8"
    assert redact(text) == "old key ***; new key ***; token ***"


def test_a_codec_key_variable_named_in_the_configuration_is_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lattice.config import LatticeConfig
    from lattice.runtime.settings import settings_from_config

    key = base64.b64encode(b"k" * 32).decode()
    monkeypatch.setenv("TEAM_TEMPORAL_KEY", key)
    config = LatticeConfig.model_validate({"temporal": {"codec_key_env": "TEAM_TEMPORAL_KEY"}})
    settings = settings_from_config(config)
    assert "TEAM_TEMPORAL_KEY" in settings.secret_names()
    assert "TEAM_TEMPORAL_KEY" not in settings.secrets_allow  # masked, never readable
    assert make_redactor(settings.secret_names())(f"key={key}") == "key=***"
