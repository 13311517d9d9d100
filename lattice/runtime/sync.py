"""Running a coroutine from synchronous code on an event loop kept per thread.

``asyncio.run`` makes and tears down a loop on every call (about 150 µs); a
synchronous ``Runner.run`` or ``LLMPrimitive.run`` in a loop of its own would pay that
for every run. Each thread gets one loop instead, reused by every synchronous call made
on that thread and closed when the interpreter exits (or by ``close_thread_loop``).
Calling from inside a running event loop is a usage error: there, ``await`` the async
method instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from lattice.errors import LatticeUserError

T = TypeVar("T")

_local = threading.local()
_all: set[asyncio.Runner] = set()
_lock = threading.Lock()


def run_sync(make: Callable[[], Coroutine[Any, Any, T]], *, what: str) -> T:
    """Run the coroutine ``make()`` returns to completion on this thread's loop; ``what``
    names the async alternative in the error raised inside a running loop
    (``await runner.arun(...)``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise LatticeUserError(
            f"this synchronous call cannot run inside an event loop; use `{what}` instead",
            error_type="usage_error",
        )
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
    if runner is None:
        runner = asyncio.Runner()
        _local.runner = runner
        with _lock:
            _all.add(runner)
    return runner.run(make())


def close_thread_loop() -> None:
    """Close this thread's loop (a new one is made by the next synchronous call)."""
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
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
