"""Violation wording: the rule, the actual size, at most a short excerpt of the value.

A violation is ``{"pointer": <JSON pointer>, "message": <text>}``; the same text goes into
repair packets, escalation notes, ``validation_failed`` events and FailureReports. Messages
are built from jsonschema's ``ValidationError`` fields (``validator``, ``validator_value``,
``instance``) rather than its ``message``, which quotes the whole offending value: a list
that is too long reads ``has 6 items, at most 4 allowed``, a long string
``is 400 characters, at most 300 allowed ('The outage began at 09:12 when the…')``. Rules
whose jsonschema wording already quotes nothing large keep it (``'x' is a required
property``, ``'urgent' is not one of ['low', 'high']``).

Each violation may also name *terms*: the words a repair needs to find in the original
input (the missing property, the field whose value is wrong, an enum's options). They
stay beside the violations (``SchemaProblems.terms``), never inside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lattice.schema_formats import FORMS

if TYPE_CHECKING:  # jsonschema is imported by whoever made the errors (lazily)
    from jsonschema.exceptions import ValidationError

Violation = dict[str, str]

SHORT = 60
"""Characters of a value a message quotes at most."""

_NO_INPUT_NEEDED = frozenset(
    {
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "multipleOf",
        "additionalProperties",
        "unevaluatedProperties",
        "uniqueItems",
        "propertyNames",
    }
)
"""Rules a model fixes from its own output (shorten, drop, round): no input excerpt helps."""


def short(value: Any, limit: int = SHORT) -> str:
    """``repr(value)`` when it is short; otherwise an excerpt (strings) or a description."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        return repr(value[: limit - 8]).rstrip("'\"") + "…'"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:4])
        more = ", …" if len(value) > 4 else ""
        return f"an object with keys {keys}{more}"
    return text[: limit - 1] + "…"


def _plural(count: int, noun: str) -> str:
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def _options(values: Any) -> str:
    if isinstance(values, list) and len(values) > 20:
        return repr(values[:20])[:-1] + ", …]"
    return repr(values)


_AT_MOST, _AT_LEAST = "at most {} allowed", "at least {} required"
_SIZED: dict[str, tuple[type[Sized], str, str, str]] = {
    "maxItems": (list, "has", "item", _AT_MOST),
    "minItems": (list, "has", "item", _AT_LEAST),
    "maxLength": (str, "is", "character", _AT_MOST),
    "minLength": (str, "is", "character", _AT_LEAST),
    "maxProperties": (dict, "has", "property", _AT_MOST),
    "minProperties": (dict, "has", "property", _AT_LEAST),
}
"""Rules on a size: (the type they apply to, verb, what is counted, the bound's text)."""
_BOUNDS = {
    "maximum": _AT_MOST,
    "minimum": _AT_LEAST,
    "exclusiveMaximum": "must be less than {}",
    "exclusiveMinimum": "must be greater than {}",
    "multipleOf": "must be a multiple of {}",
}
"""Rules on a number: the bound's text."""


def message_of(error: ValidationError) -> str:
    """The message of one jsonschema error, stating the rule and the actual size."""
    rule, limit, value = error.validator, error.validator_value, error.instance
    sized = _SIZED.get(str(rule))
    if sized is not None and isinstance(value, sized[0]):
        kind, verb, noun, at = sized
        said = f"{verb} {_plural(len(value), noun)}, {at.format(limit)}"
        return f"{said} ({short(value)})" if kind is str else said
    bound = _BOUNDS.get(str(rule))
    if bound is not None:
        return f"is {short(value)}, {bound.format(limit)}"
    if rule == "enum":
        return f"{short(value)} is not one of {_options(limit)}"
    if rule == "const":
        return f"must be {short(limit)}, not {short(value)}"
    if rule == "type":
        types = limit if isinstance(limit, list) else [limit]
        return f"{short(value)} is not of type {', '.join(repr(t) for t in types)}"
    if rule == "pattern":
        return f"{short(value)} does not match the pattern {limit!r}"
    if rule == "format":
        form = FORMS.get(limit) if isinstance(limit, str) else None
        return f"{short(value)} is not a valid {limit}" + (f" ({form})" if form else "")
    if rule == "uniqueItems" and isinstance(value, list):
        return f"has duplicate items ({_plural(len(value), 'item')}); every item must be unique"
    if rule in ("anyOf", "oneOf") and error.context:
        # the alternative of the value's own type says more than "is not of type 'null'"
        typed = [e for e in error.context if e.validator != "type"]
        from jsonschema.exceptions import best_match

        closest = best_match(typed or error.context)
        where = "/".join(str(p) for p in closest.relative_path)
        prefix = f"at {where}: " if where else ""
        return (
            f"{short(value)} matches none of the allowed alternatives "
            f"(closest: {prefix}{message_of(closest)})"
        )
    if rule in ("not", "oneOf", "anyOf"):
        return f"{short(value)} is not allowed here (the schema's {rule} rule)"
    if rule is None:  # a ``false`` schema
        return f"{short(value)} is not allowed here"
    return _shortened(error.message, value)


def _shortened(message: str, value: Any) -> str:
    """jsonschema's own message, with a long quoted value cut to an excerpt."""
    quoted = repr(value)
    if len(quoted) > SHORT and quoted in message:
        return message.replace(quoted, short(value))
    if len(message) > 300:
        return message[:297] + "…"
    return message


def pointer_of(path: Iterable[Any]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _resolved(schema: Any, root: Any, depth: int = 0) -> Any:
    """``schema`` with a local ``$ref`` (``#/...``) followed (None where it leads nowhere)."""
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or depth > 5:
        return schema
    if not ref.startswith("#"):
        return None
    target: Any = root
    for part in ref[2:].split("/") if len(ref) > 1 else []:
        target = (
            target.get(part.replace("~1", "/").replace("~0", "~"))
            if isinstance(target, dict)
            else None
        )
    return _resolved(target, root, depth + 1)


def _options_of(schema: Any, root: Any, depth: int = 0) -> list[str]:
    """The enum options of ``schema`` (through a local ``$ref`` and ``anyOf``/``oneOf``)."""
    if not isinstance(schema, dict) or depth > 5:
        return []
    if "$ref" in schema:
        return _options_of(_resolved(schema, root), root, depth + 1)
    if isinstance(schema.get("enum"), list):
        return [str(v) for v in schema["enum"][:20] if isinstance(v, str | int)]
    if "const" in schema and isinstance(schema["const"], str | int):
        return [str(schema["const"])]
    options: list[str] = []
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            options += _options_of(branch, root, depth + 1)
    return options


@dataclass(frozen=True)
class Discriminator:
    """How a ``oneOf``/``anyOf`` picks its alternative: the value of one property (the
    tag), as pydantic writes a tagged union."""

    name: str
    """The tag's property."""
    tags: dict[str, int]
    """Each tag and the index of the alternative it picks."""

    def pick(self, value: Any) -> int | None:
        """The alternative ``value``'s tag picks (None: it has no known tag)."""
        tag = value.get(self.name) if isinstance(value, dict) else None
        return self.tags.get(tag) if isinstance(tag, str) else None

    def message(self, value: Any) -> str:
        tags = ", ".join(repr(tag) for tag in self.tags)
        if not isinstance(value, dict) or self.name not in value:
            return f"has no {self.name!r}, the tag that picks its kind: one of {tags}"
        return f"{self.name!r} is {short(value[self.name])}, not one of the tags {tags}"


def discriminator_of(error: ValidationError, root: Any = None) -> Discriminator | None:
    """The tag of a ``oneOf``/``anyOf`` error's alternatives: the schema's
    ``discriminator.propertyName`` (its ``mapping`` or each alternative's ``const``), or
    else a property every alternative fixes to one value (``const`` or a one-item
    ``enum``). None when the alternatives have no such property."""
    alternatives = error.validator_value
    if error.validator not in ("oneOf", "anyOf") or not isinstance(alternatives, list):
        return None
    branches = [_resolved(branch, root) for branch in alternatives]
    explicit = error.schema.get("discriminator") if isinstance(error.schema, dict) else None
    named = explicit.get("propertyName") if isinstance(explicit, dict) else None
    if isinstance(named, str):
        tags = _tags(branches, named)
        mapping = explicit.get("mapping") if isinstance(explicit, dict) else None
        if isinstance(mapping, dict):
            refs = [b.get("$ref") if isinstance(b, dict) else None for b in alternatives]
            for tag, ref in mapping.items():
                if isinstance(tag, str) and ref in refs:
                    tags.setdefault(tag, refs.index(ref))
        return Discriminator(named, tags) if tags else None
    first = branches[0] if branches else None
    properties = first.get("properties") if isinstance(first, dict) else None
    for name in properties if isinstance(properties, dict) else ():
        tags = _tags(branches, name)
        if len(tags) == len(branches) > 1:
            return Discriminator(name, tags)
    return None


def _tags(branches: list[Any], name: str) -> dict[str, int]:
    """Each alternative's one value of property ``name``, where it fixes one."""
    tags: dict[str, int] = {}
    for index, branch in enumerate(branches):
        properties = branch.get("properties") if isinstance(branch, dict) else None
        prop = properties.get(name) if isinstance(properties, dict) else None
        if not isinstance(prop, dict):
            continue
        values = [prop["const"]] if "const" in prop else prop.get("enum")
        if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str):
            tags.setdefault(values[0], index)
    return tags


def branch_errors(error: ValidationError, index: int) -> list[ValidationError]:
    """The errors of alternative ``index`` of a ``oneOf``/``anyOf`` error."""
    return [
        e
        for e in error.context or ()
        if e.relative_schema_path and e.relative_schema_path[0] == index
    ]


def terms_of(error: ValidationError, root: Any = None) -> list[str]:
    """The words whose mentions in the input a repair of this error needs: the field's name
    first, then the values it may take (an enum's options)."""
    rule = error.validator
    if rule in _NO_INPUT_NEEDED:
        return []
    names = [p for p in error.absolute_path if isinstance(p, str)]
    terms = names[-1:]
    if rule == "required" and isinstance(error.instance, dict):
        wanted = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [
            p
            for p in wanted
            if isinstance(p, str) and p not in error.instance and repr(p) in error.message
        ]
        properties = error.schema.get("properties") if isinstance(error.schema, dict) else None
        terms = list(missing)
        for name in missing:
            if isinstance(properties, dict):
                terms += _options_of(properties.get(name), root)
    elif rule == "enum" and isinstance(error.validator_value, list):
        terms += [str(v) for v in error.validator_value[:20] if isinstance(v, str | int)]
    elif rule == "const":
        terms.append(str(error.validator_value))
    return terms


@dataclass
class SchemaProblems:
    """Every way a value breaks its schema, in document order, and the terms to look up."""

    violations: list[Violation] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)

    def add(self, error: ValidationError, root: Any = None) -> None:
        tagged = discriminator_of(error, root)
        if tagged is not None:
            self._add_tagged(error, tagged, root)
            return
        pointer = pointer_of(error.absolute_path)
        self._add(pointer, message_of(error), terms_of(error, root))

    def _add_tagged(self, error: ValidationError, tagged: Discriminator, root: Any) -> None:
        """A tagged union's value: the faults of the alternative its tag picks, each at
        its own place; with no known tag, the tag's fault and the tags allowed."""
        index = tagged.pick(error.instance)
        if index is None:
            where = list(error.absolute_path)
            if isinstance(error.instance, dict) and tagged.name in error.instance:
                where.append(tagged.name)
            names = [p for p in error.absolute_path if isinstance(p, str)][-1:]
            terms = [*names, tagged.name, *tagged.tags]
            self._add(pointer_of(where), tagged.message(error.instance), terms)
            return
        for inner in sorted(branch_errors(error, index), key=lambda e: list(e.absolute_path)):
            self.add(inner, root)

    def _add(self, pointer: str, message: str, terms: Iterable[str]) -> None:
        self.violations.append({"pointer": pointer, "message": message})
        for term in terms:
            if term not in self.terms:
                self.terms.append(term)


def schema_problems(errors: Iterable[ValidationError], root: Any = None) -> SchemaProblems:
    """The violations of ``errors`` in document order (``root``: the schema, for ``$ref``s)."""
    problems = SchemaProblems()
    for error in sorted(errors, key=lambda e: list(e.absolute_path)):
        problems.add(error, root)
    return problems
