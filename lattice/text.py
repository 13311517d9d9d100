"""Text from outside a run as Unicode any file can hold.

JSON may spell a lone surrogate (``"\\ud800"``), which Python reads into a ``str`` that
no UTF-8 file, log or prompt hash can encode. Inputs and mock scripts holding one are
refused (``lattice.document.limits``); text that arrives while a run goes on (a model's
answer, a tool's result) is mended where it enters, with ``unicode_text`` and
``unicode_value``.
"""

from __future__ import annotations

import json
from typing import Any


def is_unicode(text: str) -> bool:
    """False when ``text`` holds a lone surrogate (``"\\ud800"`` in JSON), which no file
    or terminal can encode."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unicode_text(text: str) -> str:
    """``text`` as Unicode any file can hold: a surrogate pair split in two (as streamed
    pieces joined give) becomes its character again, each lone surrogate U+FFFD."""
    if is_unicode(text):
        return text
    return text.encode("utf_16_le", "surrogatepass").decode("utf_16_le", "replace")


def unicode_value(value: Any) -> Any:
    """``value`` (parsed JSON from outside: a model's answer, a tool's result) with
    ``unicode_text`` applied to every string and object key; ``value`` itself when it
    holds no lone surrogate. Nesting of any depth is looked through without recursion."""
    if isinstance(value, str):
        return unicode_text(value)
    if not holds_lone_surrogate(value):
        return value
    # Rare: mend the JSON text (a lone surrogate stays one character in it) and read it back.
    return json.loads(unicode_text(json.dumps(value, ensure_ascii=False)))


def holds_lone_surrogate(value: Any) -> bool:
    """Whether a string or object key anywhere in ``value`` (parsed JSON, nested to any
    depth) holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not is_unicode(item):
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and not is_unicode(key):
                    return True
                stack.append(inner)
    return False
