"""State paths (``$vars.a.result.items[0]``) and value templates (``"Hi {{ $in.name }}"``).

Path grammar::

    path    := root segment*
    root    := "$in" | "$vars" | "$tmp" | "$ctx" | "$secrets"
    segment := "." key | "[" integer "]" | "[" json-string "]"
    key     := [A-Za-z0-9_][A-Za-z0-9_-]*

Templates hold ``{{ ref }}`` where ``ref`` is a path or a bare name (``{{ ticket }}``:
the op's ``variables`` entry, else ``$in.ticket``). Value templates extend this to
any JSON value: a string that is exactly one ``{{ ref }}`` or exactly a path yields
the referenced value unchanged (a dict stays a dict); other strings render to text
(non-strings inserted as compact JSON); lists and dicts are rendered item by item;
everything else is a literal. Nothing here evaluates code.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

ROOTS = ("$in", "$vars", "$tmp", "$ctx", "$secrets")

_KEY = r"[A-Za-z0-9_][A-Za-z0-9_\-]*"
_SEGMENT = re.compile(rf"\.({_KEY})|\[(-?\d+)\]|\[(\"(?:[^\"\\]|\\.)*\")\]")
_ROOT = re.compile(r"\$(in|vars|tmp|ctx|secrets)\b")
_NAME = re.compile(rf"{_KEY}\Z")
SECRETS_ROOT = "$secrets"
"""The root of secret references: values from the environment, never stored in state."""


class TemplateSyntaxError(ValueError):
    """A path or template that does not parse; ``position`` is the offset in the text."""

    def __init__(self, message: str, *, text: str, position: int = 0) -> None:
        super().__init__(message)
        self.text = text
        self.position = position


@dataclass(frozen=True, slots=True)
class StatePath:
    """A parsed ``$``-path: ``root`` (``$vars``) and ``keys`` (``("a", "result", 0)``)."""

    root: str
    keys: tuple[str | int, ...]

    @property
    def text(self) -> str:
        out = self.root
        for key in self.keys:
            if isinstance(key, int):
                out += f"[{key}]"
            elif _NAME.match(key):
                out += f".{key}"
            else:
                out += f"[{json.dumps(key)}]"
        return out

    def __str__(self) -> str:
        return self.text


def path_text(root: str, *keys: str | int) -> str:
    """The text of the path ``root`` + ``keys``, quoting keys that are not plain names
    (``path_text("$vars", "a b", "result")`` is ``$vars["a b"].result``)."""
    return StatePath(root, keys).text


def is_secret(ref: Ref) -> bool:
    """True when ``ref`` reads ``$secrets``."""
    return isinstance(ref, StatePath) and ref.root == SECRETS_ROOT


@functools.lru_cache(maxsize=4096)
def parse_path(text: str) -> StatePath:
    """Parse a complete ``$``-path; raise TemplateSyntaxError saying where it breaks."""
    stripped = text.strip()
    root = _ROOT.match(stripped)
    if not root:
        raise TemplateSyntaxError(
            f"a state path starts with one of {', '.join(ROOTS)}: {text!r}", text=text
        )
    keys: list[str | int] = []
    pos = root.end()
    while pos < len(stripped):
        seg = _SEGMENT.match(stripped, pos)
        if not seg:
            raise TemplateSyntaxError(
                f'cannot read path {text!r} at offset {pos}: expected .key, [index] or ["key"]',
                text=text,
                position=pos,
            )
        if seg.group(1) is not None:
            keys.append(seg.group(1))
        elif seg.group(2) is not None:
            keys.append(int(seg.group(2)))
        else:
            try:
                keys.append(json.loads(seg.group(3)))
            except ValueError:  # an escape JSON does not know, such as \'
                raise TemplateSyntaxError(
                    f"cannot read path {text!r} at offset {pos}: the quoted key is not a JSON string",
                    text=text,
                    position=pos,
                ) from None
        pos = seg.end()
    return StatePath("$" + root.group(1), tuple(keys))


def is_path(text: str) -> bool:
    """True when ``text`` as a whole is a valid ``$``-path."""
    if not text.startswith("$"):
        return False
    try:
        parse_path(text)
    except TemplateSyntaxError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class NameRef:
    """A bare ``{{ name }}``: the op's ``variables[name]``, else ``$in.name``."""

    name: str

    @property
    def text(self) -> str:
        return self.name

    def as_input_path(self) -> StatePath:
        return StatePath("$in", (self.name,))


Ref = StatePath | NameRef


def _parse_ref(expr: str, *, text: str, position: int) -> Ref:
    expr = expr.strip()
    if expr.startswith("$"):
        try:
            return parse_path(expr)
        except TemplateSyntaxError as exc:
            raise TemplateSyntaxError(str(exc), text=text, position=position) from None
    if _NAME.match(expr):
        return NameRef(expr)
    raise TemplateSyntaxError(
        f"cannot read {{{{ {expr} }}}}: use a $-path ($in.x, $vars.node.result.y) or a plain name",
        text=text,
        position=position,
    )


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed text template: literal strings and refs, in order."""

    source: str
    parts: tuple[str | Ref, ...]

    @property
    def refs(self) -> tuple[Ref, ...]:
        return tuple(p for p in self.parts if not isinstance(p, str))

    @property
    def single_ref(self) -> Ref | None:
        """The ref when the template is exactly one ``{{ ref }}`` (surrounding spaces allowed)."""
        if len(self.parts) == 1 and not isinstance(self.parts[0], str):
            return self.parts[0]
        return None

    def render(self, resolve: Callable[[Ref], Any]) -> str:
        """Render to text; ``resolve`` raises for missing values (never empty strings)."""
        parts = self.parts
        if len(parts) == 1 and isinstance(parts[0], str):
            return parts[0]
        return "".join([p if isinstance(p, str) else to_text(resolve(p)) for p in parts])


def to_text(value: Any) -> str:
    """How a value appears inside rendered text: strings raw, everything else compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parse_template(text: str) -> Template:
    """Parse ``{{ }}`` tags in ``text``; an unclosed ``{{`` or a bad ref raises TemplateSyntaxError."""
    parts: list[str | Ref] = []
    pos = 0
    # Scanning with find keeps this linear: a regex search for each "{{" without a
    # closing "}}" would rescan the rest of the text every time.
    while True:
        start = text.find("{{", pos)
        if start < 0:
            break
        end = text.find("}}", start + 2)
        if end < 0:
            raise TemplateSyntaxError("unclosed '{{' in template", text=text, position=start)
        if start > pos:
            parts.append(text[pos:start])
        parts.append(_parse_ref(text[start + 2 : end], text=text, position=start))
        pos = end + 2
    rest = text[pos:]
    if rest:
        parts.append(rest)
    # A lone ref with only whitespace around it still counts as a single value.
    non_blank = [p for p in parts if not (isinstance(p, str) and not p.strip())]
    if len(non_blank) == 1 and not isinstance(non_blank[0], str):
        return Template(text, (non_blank[0],))
    return Template(text, tuple(parts))


def iter_value_refs(value: Any) -> Iterator[Ref]:
    """Every ref in a value template (strings with tags, whole-string paths, nested)."""
    if isinstance(value, str):
        if "{{" in value:
            yield from parse_template(value).refs
        elif is_path(value):
            yield parse_path(value)
    elif isinstance(value, list):
        for item in value:
            yield from iter_value_refs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_value_refs(item)


class ValueTemplate:
    """A compiled value template: compile once (per op), render many times."""

    __slots__ = ("_render",)

    def __init__(self, value: Any) -> None:
        self._render = _compile_value(value)

    def render(self, resolve: Callable[[Ref], Any]) -> Any:
        return self._render(resolve)


def _compile_value(value: Any) -> Callable[[Callable[[Ref], Any]], Any]:
    if isinstance(value, str):
        if "{{" in value:
            template = parse_template(value)
            single = template.single_ref
            if single is not None:
                return lambda resolve: resolve(single)
            return template.render
        if is_path(value):
            path = parse_path(value)
            return lambda resolve: resolve(path)
        return lambda _resolve: value
    if isinstance(value, list):
        items = [_compile_value(v) for v in value]
        return lambda resolve: [item(resolve) for item in items]
    if isinstance(value, dict):
        entries = [(k, _compile_value(v)) for k, v in value.items()]
        return lambda resolve: {k: item(resolve) for k, item in entries}
    return lambda _resolve: value
