"""Running a coroutine from synchronous code on an event loop kept per thread.

``asyncio.run`` makes and tears down a loop on every call (about 150 µs); a
synchronous ``Runner.run`` or ``LLMPrimitive.run`` in a loop of its own would pay that
for every run. Each thread gets one loop instead, reused by every synchronous call made
on that thread and closed when the interpreter exits (or by ``close_thread_loop``).
Calling from inside a running event loop is a usage error: there, ``await`` the async
method instead.

Each call behaves like ``asyncio.Runner.run``: the coroutine runs as a task in a copy of
the caller's context, and on the main thread Ctrl-C (SIGINT) cancels that task, so a run
records itself as interrupted, and the call then raises ``KeyboardInterrupt``. It costs
less than ``asyncio.Runner.run``, whose signal handling alone took about 20 µs a call:
``signal.signal`` and ``signal.getsignal`` look every handler up in an enum, which fails
for a callable and formats the handler's repr into the error, task repr included. The
handler is installed and removed here through ``_signal``, the C module the ``signal``
module wraps, which does neither.

A call whose coroutine never waits (ops that only compute) finishes in its task's first
step. That step is taken here, as ``run_forever``'s first iteration would take it (the
loop marked running on this thread, its async generator hooks installed), without the
rest of ``run_until_complete``: its two loop iterations, two ``epoll_wait`` calls and
its setup cost about as much as a 10-op run's ops (measured in docs/performance.md).
The call is still a task (``asyncio.current_task()``, cancellation, a copy of the
caller's context); when the step leaves anything for the loop to do (the task waits,
or scheduled a callback, or a Ctrl-C came), ``run_until_complete`` takes over. Only
asyncio's own loop is stepped this way, and only when it has nothing else pending: a
task or timer that an earlier call left behind gets its turn when the loop next runs,
not during a call that never waits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

from lattice.errors import ErrorType, LatticeUserError

try:
    import _signal as _c_signal  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - an interpreter without the C module
    _c_signal = signal
_getsignal: Callable[[int], Any] = _c_signal.getsignal
_setsignal: Callable[[int, Any], Any] = _c_signal.signal

T = TypeVar("T")
_get_hooks = sys.get_asyncgen_hooks
_set_hooks = sys.set_asyncgen_hooks
_set_running_loop = asyncio.events._set_running_loop


class ThreadLoop:
    """One thread's event loop and the bookkeeping of the call running on it."""

    __slots__ = ("interrupts", "loop", "stepped", "thread")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)  # the thread's loop, as asyncio.Runner makes it
        self.thread = threading.get_ident()
        self.interrupts = 0
        self.stepped: Any = self.loop if isinstance(self.loop, asyncio.BaseEventLoop) else None
        """The loop, when its first step can be taken by hand (asyncio's own loop; another
        event loop policy's, uvloop's for one, always runs the call itself)."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.loop
        stepped = self.stepped
        ready = None
        if stepped is not None and not stepped._debug:
            ready = stepped._ready
            if ready or stepped._scheduled:  # the loop has work of its own: it runs the call
                ready = None
        task = loop.create_task(coro)
        handler: Callable[[int, FrameType | None], None] | None = None
        if (
            threading.current_thread() is threading.main_thread()
            and _getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            handler = functools.partial(self._on_sigint, task=task)
            try:
                _setsignal(signal.SIGINT, handler)
            except ValueError:  # pragma: no cover - as asyncio.Runner does
                handler = None
        self.interrupts = 0
        try:
            if ready is not None and len(ready) == 1:
                self._first_step(ready.popleft(), task)
                if task.done() and not ready and not stepped._stopping:
                    return task.result()
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if self.interrupts and task.uncancel() == 0:
                raise KeyboardInterrupt from None
            raise
        finally:
            if handler is not None and _getsignal(signal.SIGINT) is handler:
                _setsignal(signal.SIGINT, signal.default_int_handler)

    def _first_step(self, step: asyncio.Handle, task: asyncio.Task[Any]) -> None:
        """Run the task's first step as ``run_forever``'s first iteration would: the loop
        marked running on this thread, its async generator hooks installed."""
        loop = self.stepped
        hooks = _get_hooks()
        loop._thread_id = threading.get_ident()
        _set_hooks(firstiter=loop._asyncgen_firstiter_hook, finalizer=loop._asyncgen_finalizer_hook)
        _set_running_loop(loop)
        try:
            step._run()
        except BaseException:  # a second Ctrl-C, SystemExit: as run_until_complete does
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: it is raised here, not logged at exit
            raise
        finally:
            loop._thread_id = None
            _set_running_loop(None)
            _set_hooks(*hooks)

    def _on_sigint(self, signum: int, frame: FrameType | None, *, task: asyncio.Task[Any]) -> None:
        """The first Ctrl-C cancels the task (the run stops as interrupted); a second one
        raises KeyboardInterrupt where the loop is."""
        self.interrupts += 1
        if self.interrupts == 1 and not task.done():
            task.cancel()
            self.loop.call_soon_threadsafe(lambda: None)  # wake a loop blocked in select()
            return
        raise KeyboardInterrupt

    def close(self) -> None:
        """Cancel what is left, shut down async generators and the default executor, close."""
        loop = self.loop
        if loop.is_closed():
            return
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            if threading.get_ident() == self.thread:
                asyncio.set_event_loop(None)
            loop.close()


_local = threading.local()
_all: set[ThreadLoop] = set()
_lock = threading.Lock()
_inherited: list[ThreadLoop] = []
"""A forked child's copies of its parent's loops: kept, never closed (closing one would
take its wake-up pipe out of the epoll set the child shares with the parent)."""


def _after_fork_in_child() -> None:
    global _local, _lock
    _inherited.extend(_all)
    _all.clear()
    _local = threading.local()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def run_sync(make: Callable[[], Coroutine[Any, Any, T]], *, what: str) -> T:
    """Run the coroutine ``make()`` returns to completion on this thread's loop; ``what``
    names the async alternative in the error raised inside a running loop
    (``await runner.arun(...)``)."""
    if asyncio._get_running_loop() is not None:  # (get_running_loop raises when there is none)
        raise LatticeUserError(
            f"this synchronous call cannot run inside an event loop; use `{what}` instead",
            error_type=ErrorType.USAGE_ERROR,
        )
    runner: ThreadLoop | None = getattr(_local, "runner", None)
    if runner is None:
        runner = ThreadLoop()
        _local.runner = runner
        with _lock:
            _all.add(runner)
    return runner.run(make())


def close_thread_loop() -> None:
    """Close this thread's loop (a new one is made by the next synchronous call)."""
    runner: ThreadLoop | None = getattr(_local, "runner", None)
    if runner is not None:
        _local.runner = None
        with _lock:
            _all.discard(runner)
        runner.close()


@atexit.register
def _close_all() -> None:
    with _lock:
        runners = list(_all)
        _all.clear()
    for runner in runners:
        with contextlib.suppress(RuntimeError):  # a loop another thread still runs
            runner.close()
