"""Finding a secret's value in text, in every form it takes on its way out.

A value inserted into a URL comes back lower-cased (a host), percent-encoded (any part
of a URL), IDNA-encoded (a host with non-ASCII letters) or inside a base64 blob (the
password of a URL, sent as HTTP basic auth); written into JSON it is escaped. The
pattern :func:`secrets_pattern` makes finds each of those forms, and :func:`find` reads
a text with each percent-escape of an unreserved character (``%2D`` or ``%2d`` for
``-``, ``%41`` for ``A``) as that character first, since such an escape may stand for
any character of a value. :class:`SecretFinder` puts both together, with a quick test
first that lets most texts through untouched.

Only a value that cannot be ordinary text is looked for (:func:`maskable`): masking
``test``, ``EMPTY`` or ``ollama`` would rewrite every such word of a run folder, SWITCH
case keys of its ExecIR included. Such a value must be kept out of run data where it
could enter instead (:func:`scrub` for an error message that may quote it).
"""

from __future__ import annotations

import base64
import bisect
import json
import os
import re
from collections.abc import Iterable

MIN_MASKED_LENGTH = 8
"""The shortest value masked in run data."""

PROVIDER_KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    # the keys of backends commonly reached through LiteLLM
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "COHERE_API_KEY",
    "OPENROUTER_API_KEY",
    "DEEPSEEK_API_KEY",
    "TOGETHERAI_API_KEY",
    "XAI_API_KEY",
)
"""Environment variables holding provider API keys."""

LATTICE_KEY_VARIABLES = ("LATTICE_SERVER_TOKEN", "LATTICE_TEMPORAL_KEY")
"""Lattice's own keys: the gateway's bearer token and the Temporal payload codec's keys
(a comma-separated list, each of whose keys is masked on its own)."""

_SEPARATORS = re.compile(r"[-_. ]+")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

_UNRESERVED_ESCAPE = re.compile(
    r"%(?:2[DdEe]|3[0-9]|[46][1-9A-Fa-f]|5[0-9Aa]|7[0-9Aa]|5[Ff]|7[Ee])"
)
"""A percent-escape of an unreserved character (RFC 3986: letters, digits, ``-._~``),
in either case of hex: a URL means the same with the character itself."""


def _unescaped(found: re.Match[str]) -> str:
    return chr(int(found[0][1:], 16))


def _read(value: str) -> list[str]:
    """``value``, and ``value`` as :func:`find` reads a text (when it holds a
    percent-escape of an unreserved character itself: ``pa%41ss``, read ``paAss``)."""
    read = _UNRESERVED_ESCAPE.sub(_unescaped, value)
    return [value] if read == value else [value, read]


def maskable(value: str) -> bool:
    """Whether ``value`` can be masked wherever it occurs without garbling ordinary text:
    at least :data:`MIN_MASKED_LENGTH` characters, and neither a number (``12345678``)
    nor plain words: words all lower-case, all upper-case or all capitalised, perhaps
    with numbers of at most four digits, joined by ``-``, ``_``, ``.`` or spaces
    (``not-needed``, ``sk-no-key-required``, ``sk-test-1234``)."""
    return len(value) >= MIN_MASKED_LENGTH and not _plain(value)


def _plain(value: str) -> bool:
    words = [word for word in _SEPARATORS.split(value) if word]
    letters = [word for word in words if not word.isdigit()]
    if not letters:
        return True  # a number
    if any(len(word) > 4 for word in words if word.isdigit()):
        return False  # a long number among words: an identifier, not prose
    if not all(word.isalpha() for word in letters):
        return False
    return any(all(style(word) for word in letters) for style in _STYLES)


_STYLES = (str.islower, str.isupper, str.istitle)


def provider_keys() -> list[str]:
    """The provider API keys set in the environment now (maskable or not)."""
    return [v for name in PROVIDER_KEY_VARIABLES if (v := os.environ.get(name))]


def _char_written(char: str) -> list[str]:
    """Each way one character may be written: itself, percent-encoded (its UTF-8 bytes),
    escaped in JSON (as Python writes it, as ``\\uXXXX`` as Go writes ``&<>``, ``\\/``
    as PHP writes ``/``), ``+`` for a space in a form-encoded query, and each JSON
    escape escaped once more (JSON text inside a JSON string: a recorded response body)."""
    if char in _UNRESERVED:
        return [char]
    forms = {char, "".join(f"%{b:02x}" for b in char.encode())}
    for ascii_only in (False, True):
        forms.add(json.dumps(char, ensure_ascii=ascii_only)[1:-1])
    units = char.encode("utf-16-be")
    forms.add("".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)))
    if char == "/":
        forms.add("\\/")
    if char == " ":
        forms.add("+")
    forms.update([json.dumps(f)[1:-1] for f in forms if "\\" in f])
    return sorted(forms, key=len, reverse=True)


def _char_forms(char: str) -> str:
    """A pattern for one character in each of the ways it may be written."""
    written = _char_written(char)
    if len(written) == 1:
        return re.escape(written[0])
    return "(?:" + "|".join(re.escape(form) for form in written) + ")"


def _idna_forms(value: str) -> list[str]:
    """The ASCII forms (IDNA) that the non-ASCII host names in ``value`` take: ``value``
    itself as a host name, and each maskable run of letters, digits and ``-`` in it (a
    label: a secret may be a URL, ``https://bücher.example/hook``)."""
    if value.isascii():
        return []
    lower = value.lower()
    texts = [lower, *(run for run in _NOT_IN_LABELS.split(lower) if not run.isascii())]
    forms: list[str] = []
    for index, text in enumerate(texts):
        if index and not maskable(text):
            continue
        for encode in (_idna2008, _idna2003):
            encoded = encode(text)
            if encoded and encoded != text:
                forms.append(encoded)
    return list(dict.fromkeys(forms))


_NOT_IN_LABELS = re.compile(r"[^\w-]|_")


def _idna2008(text: str) -> str | None:
    try:
        import idna  # httpx's own dependency: how it writes a host
    except ImportError:  # pragma: no cover - installed with httpx
        return None
    try:
        return idna.encode(text, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        return None


def _idna2003(text: str) -> str | None:
    try:
        return text.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def _base64_forms(value: str) -> list[str]:
    """The part of ``value``'s base64 encoding that does not depend on what surrounds it,
    for each of the three alignments it can have in a longer encoded text (``user:pass``
    in HTTP basic auth), in the standard and the URL-safe alphabet."""
    raw = value.encode()
    forms: list[str] = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        core = encoded[(8 * offset + 5) // 6 : (8 * (offset + len(raw))) // 6]
        if len(core) >= MIN_MASKED_LENGTH:
            forms += [core, core.translate(str.maketrans("+/", "-_"))]
    return list(dict.fromkeys(forms))


def forms_pattern(value: str) -> tuple[str, int]:
    """A regular expression (source) matching ``value`` in each of its forms, and the
    length of its longest match."""
    longest = sum(len(_char_written(c)[0]) for c in value)
    alternatives = ["(?i:" + "".join(_char_forms(c) for c in text) + ")" for text in _read(value)]
    for form in _idna_forms(value):
        alternatives.append("(?i:" + re.escape(form) + ")")
        longest = max(longest, len(form))
    for form in _base64_forms(value):
        alternatives.append(re.escape(form))
        longest = max(longest, len(form))
    return "|".join(alternatives), longest


def secrets_pattern(values: Iterable[str]) -> tuple[re.Pattern[str] | None, int]:
    """One pattern finding each maskable value of ``values`` in each of its forms (the
    longest value first), and the length of its longest match; None when none is
    maskable."""
    kept = sorted({v for v in values if maskable(v)}, key=len, reverse=True)
    if not kept:
        return None, 0
    parts = [forms_pattern(v) for v in kept]
    return re.compile("|".join(p for p, _ in parts)), max(n for _, n in parts)


def anchors(values: Iterable[str]) -> list[str] | None:
    """For a quick test before the pattern of :func:`secrets_pattern` runs: strings one of
    which the lower-cased text holds whenever the pattern would find something there
    (each maskable value's longest run of characters that no encoding changes, its IDNA
    and its base64 forms), or None when some value has no such run (the pattern must run)."""
    found: list[str] = []
    for value in {v for v in values if maskable(v)}:
        for text in _read(value):
            longest = max(_ENCODED.split(text), key=len)  # ASCII: lower-cased alike anywhere
            if len(longest) < 3:
                return None
            found.append(longest.lower())
        found += [form.lower() for form in (*_idna_forms(value), *_base64_forms(value))]
    return list(dict.fromkeys(found))


_ENCODED = re.compile(r"[^A-Za-z0-9-]+")
"""Where percent-encoding, JSON or IDNA may rewrite or cut a value: anything but ASCII
letters, digits and ``-`` (IDNA encodes each label of a host name on its own, and a
label ends at a character that cannot be in one)."""


def scrub(text: str, values: Iterable[str], replacement: str = "***") -> str:
    """``text`` with each of ``values`` replaced: a maskable value in each of its forms,
    any other only as a whole token (not inside a longer word), as it is or
    percent-encoded. For texts that may quote a key and are not run data themselves (an
    error message of a provider)."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        if maskable(value):
            source = forms_pattern(value)[0]
        else:
            written = ("".join(_char_forms(c) for c in text) for text in _read(value))
            source = r"(?<![A-Za-z0-9])(?:" + "|".join(written) + r")(?![A-Za-z0-9])"
        text = replace(text, find(re.compile(source), text), replacement)
    return text


def _longest_escaped(value: str) -> int:
    """The length of ``value`` written at its longest with each unreserved character as a
    percent-escape."""
    return sum(3 if c in _UNRESERVED else len(_char_written(c)[0]) for c in value)


def find(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    """Where ``pattern`` (of :func:`forms_pattern` or :func:`secrets_pattern`) finds a
    value in ``text``: spans of ``text``, read with each percent-escape of an unreserved
    character as that character (``sk%2Dproj`` is ``sk-proj``)."""
    normal, escapes = _normalised(text)
    if not escapes:
        return [m.span() for m in pattern.finditer(text)]
    return _spans_in(pattern, normal, escapes)


def _normalised(text: str) -> tuple[str, list[int]]:
    """``text`` with each percent-escape of an unreserved character decoded, and where
    those escapes start in ``text``."""
    if "%" not in text:
        return text, []
    escapes = [m.start() for m in _UNRESERVED_ESCAPE.finditer(text)]
    if not escapes:
        return text, []
    return _UNRESERVED_ESCAPE.sub(_unescaped, text), escapes


def _spans_in(pattern: re.Pattern[str], normal: str, escapes: list[int]) -> list[tuple[int, int]]:
    """The spans ``pattern`` finds in ``normal`` (a text with the escapes starting at
    ``escapes`` decoded), as spans of the text before decoding."""
    # the k-th escape (3 characters) is one character of ``normal``, at its start less 2k
    at = [start - 2 * k for k, start in enumerate(escapes)]
    return [
        (s + 2 * bisect.bisect_left(at, s), e + 2 * bisect.bisect_left(at, e))
        for s, e in (m.span() for m in pattern.finditer(normal))
    ]


def replace(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    """``text`` with each of ``spans`` (in order, not overlapping) replaced by
    ``replacement``."""
    if not spans:
        return text
    pieces: list[str] = []
    last = 0
    for start, end in spans:
        pieces += (text[last:start], replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


class SecretFinder:
    """Finds the maskable values of ``values`` in a text, in each form they take
    (:func:`secrets_pattern`, percent-escapes read as :func:`find` reads them).

    Most texts hold no secret: a quick test (:func:`anchors`, on the text lower-cased)
    answers for them, about 20 times faster than the pattern. False when no value is
    maskable."""

    def __init__(self, values: Iterable[str]) -> None:
        kept = sorted({v for v in values if maskable(v)}, key=len, reverse=True)
        self.pattern, longest = secrets_pattern(kept)
        self._anchors = anchors(kept)
        self.longest = max([longest, *(_longest_escaped(v) for v in kept)])
        """The length of the longest text a value may be found as."""

    def __bool__(self) -> bool:
        return self.pattern is not None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where a value is found in ``text`` (spans of ``text``, in order)."""
        pattern = self.pattern
        if pattern is None:
            return []
        normal, escapes = _normalised(text)
        if self._missed(normal):
            return []
        if not escapes:
            return [m.span() for m in pattern.finditer(text)]
        return _spans_in(pattern, normal, escapes)

    def sub(self, text: str, replacement: str = "***") -> str:
        """``text`` with each value found in it replaced by ``replacement``."""
        pattern = self.pattern
        if pattern is None:
            return text
        quick = self._anchors
        if quick is not None:
            lowered = text.lower()
            if not any(anchor in lowered for anchor in quick) and (
                "%" not in text or _UNRESERVED_ESCAPE.search(text) is None
            ):
                return text  # the usual case
        if "%" not in text:
            return pattern.sub(lambda _: replacement, text)
        return replace(text, self.spans(text), replacement)

    def _missed(self, text: str) -> bool:
        """Whether the quick test says that ``text`` holds no value."""
        quick = self._anchors
        if quick is None:
            return False
        lowered = text.lower()
        return not any(anchor in lowered for anchor in quick)
