"""The ``local`` engine: every row on this process's event loop, ``concurrency`` at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any

from lattice.batch.limits import BatchLimits, Limiter, LocalGate
from lattice.batch.worker import BatchWorker, RowTask, WorkerSpec
from lattice.llm.base import LLMProvider


class LocalEngine:
    """Runs rows in this process; one limiter for all of them."""

    name = "local"

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        concurrency: int,
        limits: BatchLimits,
        prices: Mapping[str, tuple[float, float]],
        provider: LLMProvider | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.limiter = Limiter(limits, prices) if limits else None
        self.worker = BatchWorker(
            spec,
            gate=LocalGate(self.limiter) if self.limiter is not None else None,
            provider=provider,
        )
        self._stopped = False

    @property
    def stopped_usage(self) -> dict[str, dict[str, Any]]:
        """What each row stopped part-way had spent, by row key."""
        return self.worker.stopped_usage

    async def start(self) -> None:
        pass

    def stop(self) -> None:
        """Take no new rows (those running go on to their end)."""
        self._stopped = True

    async def stop_reason(self) -> str | None:
        """Why the batch may spend no more (its budget), if so."""
        if self.limiter is not None and self.limiter.exhausted:
            return self.limiter.spent
        return None

    async def run(self, tasks: Iterable[RowTask]) -> AsyncGenerator[dict[str, Any], None]:
        """Each row's results line, as rows end (in the order they end)."""
        pending = iter(tasks)
        finished: asyncio.Queue[asyncio.Task[dict[str, Any]]] = asyncio.Queue()
        running: set[asyncio.Task[dict[str, Any]]] = set()
        limiter = self.limiter
        more = True
        try:
            while True:
                while more and len(running) < self.concurrency and not self._stopped:
                    if limiter is not None and limiter.exhausted:
                        self._stopped = True
                        break
                    task = next(pending, None)
                    if task is None:
                        more = False
                        break
                    row = asyncio.create_task(self.worker.run_row(task))
                    running.add(row)
                    row.add_done_callback(finished.put_nowait)
                if not running:
                    return
                done = await finished.get()
                running.discard(done)
                yield done.result()
        finally:
            for row in running:
                row.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            await self.worker.provider.aclose_loop_clients()

    async def close(self) -> dict[str, Any] | None:
        """The limiter's counts (None when the batch had no limits)."""
        return self.limiter.snapshot() if self.limiter is not None else None
