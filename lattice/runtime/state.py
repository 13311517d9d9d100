"""StateStore: the run's explicit memory.

``$in``   the run's inputs, read-only.
``$vars`` op results (``$vars.<node>.result``) and named variables (``$vars.<name>``).
``$tmp``  scratch for one op, cleared after each op.
``$ctx``  run facts (run id, start time, workflow, model classes), read-only to ops.

Reads of missing paths raise ``MissingValueError`` naming the first missing key:
a template never renders a silently empty string. Everything is JSON-serialisable.

Two things a run may switch on: ``changes`` collects every change of ``$vars`` (the
run folder's journal commits them op by op, and a resume replays them with
``apply``), and ``limits`` bounds the size of one value and of the whole state
(``state_limit``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lattice.errors import LatticeRunError
from lattice.ir.templates import NameRef, Ref, StatePath, parse_path

StateListener = Callable[[str, Any], None]
"""Called as ``listener(path_text, value)`` after every write (value None for deletes)."""

_ABSENT = object()
"""What a write found where it wrote when nothing was there."""


class MissingValueError(LatticeRunError):
    """A state path that has no value at run time."""

    error_type = "missing_value"


@dataclass(frozen=True)
class StateLimits:
    """Bounds on what a run may hold, in bytes of its JSON text (estimated)."""

    max_state_bytes: int = 10_000_000
    """The whole of ``$in`` and ``$vars``."""
    max_value_bytes: int = 10_000_000
    """One value written to state."""


def approx_size(value: Any) -> int:
    """About the length of ``value``'s JSON text, without building it."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(str(k)) + 4 + approx_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 2 + sum(approx_size(v) + 1 for v in value)
    return 8


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


def _value_at(target: Any, key: Any) -> Any:
    """``target[key]``, or ``_ABSENT`` when there is none."""
    if isinstance(target, dict):
        return target.get(key, _ABSENT)
    if isinstance(target, list) and isinstance(key, int) and -len(target) <= key < len(target):
        return target[key]
    return _ABSENT


# long: the one owner of a run's state: reads, writes, paths, snapshots and listeners, on the hot path of every op
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
        self.changes: list[list[Any]] | None = None
        """When a list, every change of ``$vars`` is appended to it: ``["set", path, value]``,
        ``["add", path, item]`` (an append) or ``["del", path]``."""
        self._inherited: set[str] = set()
        """``$vars`` entries still shared with the store this one was forked from."""
        self._limits: StateLimits | None = None
        self._sizes: dict[str, int] = {}
        self._total_size = 0
        self._bounded: set[str] = set()
        """``$vars`` entries whose ``_sizes`` is an upper bound (written inside, not measured)."""

    def fork(self) -> StateStore:
        """A store for one branch: it sees this store's state as it is now, and its own
        writes, which this store does not see (``changes`` lists them, to merge later).
        ``$vars`` entries are copied when the branch first changes inside one."""
        branch = StateStore(secrets=self._secrets)
        branch.inputs = self.inputs
        branch.ctx = self.ctx
        branch.vars = dict(self.vars)
        branch._inherited = set(self.vars)
        branch._listeners = self._listeners
        branch.changes = []
        branch._limits = self._limits
        if self._limits is not None:  # the sizes as this store knows them, not measured again
            branch._sizes = dict(self._sizes)
            branch._total_size = self._total_size
            branch._bounded = set(self._bounded)
        return branch

    def _own(self, key: Any, *, whole: bool) -> None:
        """Copy the inherited entry ``key`` before a write inside it (not needed when the
        write replaces it whole)."""
        if key in self._inherited:
            self._inherited.discard(key)
            if not whole and key in self.vars:
                self.vars[key] = copy.deepcopy(self.vars[key])

    def limit(self, limits: StateLimits | None) -> None:
        """Hold every later write to ``limits`` (None: no bounds)."""
        self._limits = limits
        self._bounded = set()
        if limits is not None:
            self._sizes = {key: approx_size(value) for key, value in self.vars.items()}
            self._total_size = approx_size(self.inputs) + sum(self._sizes.values())

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
        """The value at ``path``, or ``default`` when it is missing (one walk, no error
        built: an increment's first read of its counter is a miss)."""
        if isinstance(path, str):
            path = parse_path(path)
        if path.root == "$secrets":
            return self._read_secret(path)
        value: Any = self._root(path.root)
        for key in path.keys:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                return default
        return value

    def exists(self, path: StatePath | str) -> bool:
        marker = object()
        return self.get(path, marker) is not marker

    def write(self, path: StatePath | str, value: Any, *, size: int | None = None) -> None:
        """Set ``path`` (under ``$vars`` or ``$tmp``), creating objects on the way.
        ``size``: ``approx_size(value)`` when the caller knows it already."""
        if isinstance(path, str):
            path = parse_path(path)
        keys = path.keys
        if path.root == "$vars":
            if len(keys) == 1 and type(keys[0]) is str:
                self._write_entry(path, keys[0], value, size)
                return
            if len(keys) == 2 and type(keys[0]) is str and type(keys[1]) is str:
                self._write_field(path, keys[0], keys[1], value, size)
                return
        self._write_path(path, value, size)

    def _write_path(self, path: StatePath, value: Any, size: int | None) -> None:
        """``write`` of any path: the general case (``_write_entry`` and ``_write_field``
        do the same for the two most common shapes)."""
        keys = path.keys
        if path.root not in ("$vars", "$tmp"):
            raise LatticeRunError(f"{path.text} is read-only to ops", error_type="state_error")
        if not path.keys:
            raise LatticeRunError("cannot replace a whole state root", error_type="state_error")
        limits = self._limits
        size = self._measured(path, value, size)  # before anything is made on the way
        if self._inherited and path.root == "$vars" and len(keys) > 1:
            self._own(keys[0], whole=False)
        target: Any = self._root(path.root)
        # where the write first puts something new, and what was there: to put back
        made: tuple[Any, Any, Any] | None = None
        for depth, key in enumerate(keys[:-1]):
            there = _value_at(target, key)
            child = _child_for(target, key, keys[depth + 1], path, depth)
            if made is None and child is not there:
                made = (target, key, there)
            target = child
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
        if made is None:
            made = (target, last, _value_at(target, last))
        target[last] = value
        if limits is not None and path.root == "$vars":
            assert size is not None  # (measured above)
            key = str(keys[0])
            try:
                if len(keys) == 1:  # a whole entry ($vars.x) is the value itself: its size is known
                    self._resize(key, size)
                else:  # the entry grew by at most the value and the objects made on its way
                    grown = size + sum([len(str(k)) + 6 for k in keys[1:]])
                    self._resize(key, self._sizes.get(key, 0) + grown, bound=True)
            except LatticeRunError:
                container, at, previous = made
                self._put_back(container, at, previous, key)
                raise
        if self._inherited and path.root == "$vars" and len(keys) == 1:
            self._own(keys[0], whole=True)  # only once it is made: put back, it is not ours
        if self.changes is not None and path.root == "$vars":
            self.changes.append(["set", path.text, value])
        for listener in self._listeners:
            listener(path.text, value)

    def _write_entry(
        self, path: StatePath, key: str, value: Any, size: int | None, *, change: bool = True
    ) -> None:
        """``write`` of a whole ``$vars`` entry (``$vars.<key>``), the most common write;
        ``change``: list it in ``changes`` (an append lists its own)."""
        limits = self._limits
        if limits is None:
            self.vars[key] = value
        else:
            size = self._measured(path, value, size)
            entries = self.vars
            previous = entries.get(key, _ABSENT)
            entries[key] = value
            try:
                self._resize(key, size)
            except LatticeRunError:
                self._put_back(entries, key, previous, key)
                raise
        if self._inherited:
            self._own(key, whole=True)  # only once it is made: put back, it is not ours
        if change and self.changes is not None:
            self.changes.append(["set", path.text, value])
        for listener in self._listeners:
            listener(path.text, value)

    def _write_field(
        self, path: StatePath, key: str, field: str, value: Any, size: int | None
    ) -> None:
        """``write`` of ``$vars.<key>.<field>`` (an op's ``$vars.<node>.result``), as the
        general path does it: a missing or non-object entry becomes ``{}`` first."""
        limits = self._limits
        size = self._measured(path, value, size)  # before the entry is made an object
        if self._inherited:
            self._own(key, whole=False)
        entries = self.vars
        there = entries.get(key, _ABSENT)
        if isinstance(there, dict):
            target = there
            made: tuple[Any, Any, Any] = (there, field, there.get(field, _ABSENT))
        else:
            target = entries[key] = {}
            made = (entries, key, there)
        target[field] = value
        if limits is not None:
            assert size is not None  # (measured above)
            try:  # the entry grew by at most the value and the field's key
                self._resize(key, self._sizes.get(key, 0) + size + len(field) + 6, bound=True)
            except LatticeRunError:
                container, at, previous = made
                self._put_back(container, at, previous, key)
                raise
        if self.changes is not None:
            self.changes.append(["set", path.text, value])
        for listener in self._listeners:
            listener(path.text, value)

    def append(self, path: StatePath | str, item: Any) -> list[Any]:
        """Append ``item`` to the list at ``path`` (a missing value or a non-list becomes
        the first item of a new list); returns the new list."""
        if isinstance(path, str):
            path = parse_path(path)
        keys = path.keys
        if path.root == "$vars" and len(keys) == 1 and type(keys[0]) is str:
            return self._append_entry(path, keys[0], item)
        return self._append_path(path, item)

    def _append_path(self, path: StatePath, item: Any) -> list[Any]:
        """``append`` to any path: the general case (``_append_entry`` does the same for
        a whole ``$vars`` entry)."""
        current = self.get(path, [])
        if not isinstance(current, list):
            current = [current]
        changes, self.changes = self.changes, None
        grown = [*current, item]
        try:
            self.write(path, grown)
        finally:
            self.changes = changes
        if changes is not None and path.root == "$vars":
            changes.append(["add", path.text, item])
        return grown

    def _append_entry(self, path: StatePath, key: str, item: Any) -> list[Any]:
        """``append`` to the whole ``$vars`` entry ``key``, the common case."""
        current = self.vars.get(key, [])
        size = None
        if isinstance(current, list):
            if self._limits is not None:
                # the list's size so far is known: measure the item alone (not the list again)
                known = (None if key in self._bounded else self._sizes.get(key)) if current else 2
                if known is not None:
                    size = known + approx_size(item) + 1
        else:
            current = [current]
        grown = [*current, item]
        self._write_entry(path, key, grown, size, change=False)
        if self.changes is not None:
            self.changes.append(["add", path.text, item])
        return grown

    def apply(self, change: list[Any]) -> None:
        """Replay one entry of ``changes`` (resume)."""
        kind, path = change[0], change[1]
        if kind == "set":
            self.write(path, change[2])
        elif kind == "add":
            self.append(path, change[2])
        elif kind == "del":
            self.delete(path)
        else:
            raise LatticeRunError(f"unknown state change {kind!r}", error_type="state_error")

    def merge(self, changes: list[list[Any]]) -> None:
        """Apply ``changes`` (the branches' changes at a join) all or nothing: when one
        fails (``state_limit``, ``state_error``), the state is left exactly as it was.

        They are applied to a fork of this store, which takes over on success; listeners
        hear of the writes only then."""
        trial = self.fork()
        heard: list[tuple[str, Any]] = []
        trial._listeners = [lambda path, value: heard.append((path, value))]
        for change in changes:
            trial.apply(change)
        self.vars = trial.vars
        self._inherited &= trial._inherited  # entries the trial wrote are its own copies
        self._sizes, self._total_size, self._bounded = (
            trial._sizes,
            trial._total_size,
            trial._bounded,
        )
        if self.changes is not None:
            self.changes.extend(trial.changes or ())
        for path, value in heard:
            for listener in self._listeners:
                listener(path, value)

    def _put_back(self, target: Any, at: Any, previous: Any, key: str) -> None:
        """Undo a write that took the state over its limit (``previous`` was at
        ``target[at]``): the state stays within it, and a ``failed`` route or the state a
        failed run records holds what was there."""
        if previous is _ABSENT:
            del target[at]
        else:
            target[at] = previous
        self._resize(key)  # measured again: within the limit, as it was before the write

    def _measured(self, path: StatePath, value: Any, size: int | None) -> int | None:
        """The size of ``value`` when the state has limits (``size`` when the caller knew
        it), refused when it is over ``max_value_bytes``: checked before a write makes
        anything on its way, so that a refused value changes nothing."""
        limits = self._limits
        if limits is None:
            return size
        if size is None:
            size = approx_size(value)
        if size > limits.max_value_bytes:
            self._check_size(path, size)
        return size

    def _check_size(self, path: StatePath, size: int) -> None:
        limits = self._limits
        assert limits is not None
        if size > limits.max_value_bytes:
            raise LatticeRunError(
                f"cannot write {path.text}: the value is about {size:,} bytes, over the limit "
                f"of {limits.max_value_bytes:,} ([runtime] max_value_bytes in lattice.toml)",
                error_type="state_limit",
                details={
                    "path": path.text,
                    "bytes": size,
                    "max_value_bytes": limits.max_value_bytes,
                },
            )

    def _resize(self, key: str, size: int | None = None, *, bound: bool = False) -> None:
        """Account for the new size of the entry ``$vars.<key>`` (``size``, when known).

        With ``bound``, ``size`` is an upper bound (a write inside the entry): the entries
        known that way are measured only when the total comes over the limit, so a write
        costs its own value's size, not its entry's."""
        limits = self._limits
        assert limits is not None
        if size is None:
            size = approx_size(self.vars[key]) if key in self.vars else 0
        if bound:
            self._bounded.add(key)
        elif self._bounded:
            self._bounded.discard(key)
        total = self._total_size = self._total_size + size - self._sizes.get(key, 0)
        self._sizes[key] = size
        if total > limits.max_state_bytes and self._bounded:
            for entry in self._bounded:
                exact = approx_size(self.vars[entry]) if entry in self.vars else 0
                total += exact - self._sizes[entry]
                self._sizes[entry] = exact
            self._bounded.clear()
            self._total_size = total
        if total > limits.max_state_bytes:
            raise LatticeRunError(
                f"the run's state is about {total:,} bytes, over the limit of "
                f"{limits.max_state_bytes:,} ([runtime] max_state_bytes in lattice.toml)",
                error_type="state_limit",
                details={"bytes": total, "max_state_bytes": limits.max_state_bytes},
            )

    def delete(self, path: StatePath | str) -> None:
        """Remove ``path`` if present."""
        if isinstance(path, str):
            path = parse_path(path)
        parent = StatePath(path.root, path.keys[:-1])
        if self._inherited and path.root == "$vars" and path.keys:
            self._own(path.keys[0], whole=len(path.keys) == 1)
        try:
            container = self.read(parent) if path.keys[:-1] else self._root(path.root)
        except MissingValueError:
            return
        key = path.keys[-1]
        if isinstance(container, dict) and isinstance(key, str):
            container.pop(key, None)
        if self._limits is not None and path.root == "$vars":
            self._resize(str(path.keys[0]))
        if self.changes is not None and path.root == "$vars":
            self.changes.append(["del", path.text])
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
