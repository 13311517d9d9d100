"""StateStore: the run's explicit memory.

``$in``   the run's inputs, read-only.
``$vars`` op results (``$vars.<node>.result``) and named variables (``$vars.<name>``).
``$tmp``  scratch for one op, cleared after each op.
``$ctx``  run facts (run id, start time, workflow, model classes), read-only to ops.

Reads of missing paths raise ``MissingValueError`` naming the first missing key:
a template never renders a silently empty string. Everything is JSON-serialisable.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from lattice.errors import LatticeRunError
from lattice.ir.templates import NameRef, Ref, StatePath, parse_path

StateListener = Callable[[str, Any], None]
"""Called as ``listener(path_text, value)`` after every write (value None for deletes)."""


class MissingValueError(LatticeRunError):
    """A state path that has no value at run time."""

    error_type = "missing_value"


def _child_for(
    target: Any, key: str | int, next_key: str | int, path: StatePath, depth: int
) -> Any:
    """The container under ``target[key]`` that ``next_key`` can go into, made when missing.

    A string key replaces a non-object with ``{}`` (writes create objects on the way);
    an index must exist in a list.
    """
    if isinstance(target, dict):
        child = target.get(key) if isinstance(key, str) else None
        if isinstance(next_key, str) and not isinstance(child, dict):
            child = target[key] = {}
        elif isinstance(next_key, int) and not isinstance(child, list):
            raise LatticeRunError(
                f"cannot write {path.text}: {StatePath(path.root, path.keys[: depth + 1]).text} is not a list",
                error_type="state_error",
            )
        return child
    if isinstance(target, list) and isinstance(key, int) and -len(target) <= key < len(target):
        if isinstance(next_key, str) and not isinstance(target[key], dict):
            target[key] = {}
        return target[key]
    raise LatticeRunError(
        f"cannot write {path.text}: {StatePath(path.root, path.keys[:depth]).text} has no {key!r}",
        error_type="state_error",
    )


class StateStore:
    """Holds ``$in``, ``$vars``, ``$tmp`` and ``$ctx``; notifies subscribers of writes."""

    def __init__(
        self,
        inputs: dict[str, Any] | None = None,
        *,
        ctx: dict[str, Any] | None = None,
        vars: dict[str, Any] | None = None,
        secrets: Callable[[str], str] | None = None,
    ) -> None:
        self.inputs: dict[str, Any] = dict(inputs or {})
        self.vars: dict[str, Any] = dict(vars or {})
        self.tmp: dict[str, Any] = {}
        self.ctx: dict[str, Any] = dict(ctx or {})
        self._secrets = secrets
        self._listeners: list[StateListener] = []

    def subscribe(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener`` after every write; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _root(self, root: str) -> dict[str, Any]:
        if root == "$vars":
            return self.vars
        if root == "$in":
            return self.inputs
        if root == "$tmp":
            return self.tmp
        if root == "$ctx":
            return self.ctx
        raise LatticeRunError(f"unknown state root {root}", error_type="state_error")

    def read(self, path: StatePath | str) -> Any:
        """The value at ``path``; MissingValueError names the first key that is absent."""
        if isinstance(path, str):
            path = parse_path(path)
        if path.root == "$secrets":
            return self._read_secret(path)
        value: Any = self._root(path.root)
        for depth, key in enumerate(path.keys):
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                where = StatePath(path.root, path.keys[: depth + 1]).text
                raise MissingValueError(
                    f"{path.text} has no value at run time ({where} is missing)",
                    details={"path": path.text, "missing": where},
                ) from None
        return value

    def _read_secret(self, path: StatePath) -> str:
        if self._secrets is None or len(path.keys) != 1:
            raise LatticeRunError(
                f"{path.text}: secrets are not available in this run", error_type="secret_error"
            )
        return self._secrets(str(path.keys[0]))

    def resolve(self, ref: Ref, variables: dict[str, Any] | None = None) -> Any:
        """Resolve a template ref; a bare name reads ``variables`` first, then ``$in``."""
        if isinstance(ref, NameRef):
            if variables is not None and ref.name in variables:
                return variables[ref.name]
            return self.read(ref.as_input_path())
        return self.read(ref)

    def get(self, path: StatePath | str, default: Any = None) -> Any:
        """The value at ``path``, or ``default`` when it is missing (one walk, no exception raised)."""
        try:
            return self.read(path)
        except MissingValueError:
            return default

    def exists(self, path: StatePath | str) -> bool:
        marker = object()
        return self.get(path, marker) is not marker

    def write(self, path: StatePath | str, value: Any) -> None:
        """Set ``path`` (under ``$vars`` or ``$tmp``), creating objects on the way."""
        if isinstance(path, str):
            path = parse_path(path)
        keys = path.keys
        if path.root not in ("$vars", "$tmp"):
            raise LatticeRunError(f"{path.text} is read-only to ops", error_type="state_error")
        if not path.keys:
            raise LatticeRunError("cannot replace a whole state root", error_type="state_error")
        target: Any = self._root(path.root)
        for depth, key in enumerate(keys[:-1]):
            target = _child_for(target, key, keys[depth + 1], path, depth)
        last = keys[-1]
        if isinstance(target, dict):
            writable = isinstance(last, str)
        else:
            writable = (
                isinstance(target, list)
                and isinstance(last, int)
                and -len(target) <= last < len(target)
            )
        if not writable:
            raise LatticeRunError(
                f"cannot write {path.text}: index {last!r} does not exist", error_type="state_error"
            )
        target[last] = value
        for listener in self._listeners:
            listener(path.text, value)

    def delete(self, path: StatePath | str) -> None:
        """Remove ``path`` if present."""
        if isinstance(path, str):
            path = parse_path(path)
        parent = StatePath(path.root, path.keys[:-1])
        try:
            container = self.read(parent) if path.keys[:-1] else self._root(path.root)
        except MissingValueError:
            return
        key = path.keys[-1]
        if isinstance(container, dict) and isinstance(key, str):
            container.pop(key, None)
        for listener in self._listeners:
            listener(path.text, None)

    def clear_tmp(self) -> None:
        if self.tmp:
            self.tmp = {}

    def readable(self) -> dict[str, Any]:
        """The default input of TRANSFORM: ``{"in": $in, "vars": $vars, "ctx": $ctx}`` (no copies)."""
        return {"in": self.inputs, "vars": self.vars, "ctx": self.ctx}

    def as_dict(self) -> dict[str, Any]:
        """The state without copying (for a store that is no longer used)."""
        return {"in": self.inputs, "vars": self.vars, "tmp": self.tmp, "ctx": self.ctx}

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the whole state as JSON-ready data."""
        return copy.deepcopy(
            {"in": self.inputs, "vars": self.vars, "tmp": self.tmp, "ctx": self.ctx}
        )

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], **kwargs: Any) -> StateStore:
        store = cls(
            data.get("in") or {}, ctx=data.get("ctx") or {}, vars=data.get("vars") or {}, **kwargs
        )
        return store
