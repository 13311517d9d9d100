"""The ``ray`` engine: a batch's rows spread over Ray actors (``pip install -e '.[ray]'``).

The driver (the ``lattice batch`` process) starts ``--ray-actors`` actors (default: one
per CPU of the cluster); each holds a ``BatchWorker`` built from the batch's
``WorkerSpec`` (the ExecIR, the document, the configuration, the mock script or the
fixtures' text travel with it, so workers need no files of the driver's machine) and
runs up to ``--concurrency`` rows at once on its own event loop. The driver sends rows
in small chunks to the actor with the most room; a chunk streams each row's results
line back as the row ends, and the driver writes it at once (the results file is the
batch's memory: a killed driver loses no row that had ended). Only the driver writes
the results file and shows progress.

One ``LimiterActor`` holds the batch's limits (calls, cost, requests and tokens per
minute) for every worker: a worker asks it before each model call (a delay to wait, or a
refusal) and tells it the answer's tokens afterwards. If it dies, each row in flight stops
before its next call (``interrupted``, ``batch_limiter_lost``), no more rows are sent,
and the batch fails saying so. Before the actors are killed, each stops its rows still
running (handing back what they had spent) and exports its last spans.

Without ``--ray-address`` a local Ray instance is started, listening on 127.0.0.1 only;
with one, the driver joins that cluster (``auto``, ``ray://host:10001``, ``host:6379``).
Ray is imported only here, and only when this engine is chosen.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any

from lattice.batch.limits import LIMITER_LOST, BatchLimits, Limiter, LimiterLost
from lattice.batch.worker import BatchWorker, RowTask, WorkerSpec
from lattice.errors import ErrorType, LatticeUserError, install_hint
from lattice.telemetry import flush as flush_spans

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to ``0`` before Ray is imported, Ray takes 127.0.0.1 as the node's address (as it
does on macOS and Windows), so a local instance listens on the loopback only."""

FLUSH_TIMEOUT_MS = 10_000
"""How long an actor may take to export its last spans before it is killed."""

CHUNK = 50
"""Rows sent to an actor in one call, at most (a quarter of its concurrency when less)."""


def import_ray() -> Any:
    """The ``ray`` module, or a LatticeUserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise LatticeUserError(
            f"the ray engine needs Ray: {install_hint('ray')}",
            error_type=ErrorType.USAGE_ERROR,
        ) from None
    return ray


def start_local_ray(**init: Any) -> Any:
    """Start a Ray instance on this machine (or keep the one this process has), listening
    on 127.0.0.1 only; ``init`` goes to ``ray.init`` (``num_cpus=2``)."""
    if "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            **init,
        )
    return ray


LIMITER_DIED = "the batch's limiter (the Ray actor that holds its budgets and rate limits) died"


def limiter_died(exc: BaseException) -> str:
    """What a worker says of the limiter actor that died (``exc``: the error Ray raised)."""
    lines = str(exc).strip().splitlines()
    return f"{LIMITER_DIED} ({lines[0] if lines else type(exc).__name__})"


class RayGate:
    """A worker's way to the batch's ``LimiterActor``."""

    def __init__(self, limiter: Any) -> None:
        self.limiter = limiter
        self._died: type[Exception] = import_ray().exceptions.RayActorError

    async def acquire(self, estimated_tokens: int) -> float | None:
        try:
            delay: float | None = await self.limiter.acquire.remote(estimated_tokens)
        except self._died as exc:
            raise LimiterLost(limiter_died(exc)) from None
        return delay

    def record(
        self, model: str, input_tokens: int, output_tokens: int, estimated_tokens: int
    ) -> None:
        # not awaited: if the limiter died, the row's next acquire says so
        self.limiter.record.remote(model, input_tokens, output_tokens, estimated_tokens)


class LimiterActor:
    """The batch's ``Limiter`` as a Ray actor (one for the whole job)."""

    def __init__(self, limits: BatchLimits, prices: Mapping[str, tuple[float, float]]) -> None:
        self.limiter = Limiter(limits, prices)

    async def acquire(self, estimated_tokens: int) -> float | None:
        return self.limiter.acquire(estimated_tokens)

    async def record(
        self, model: str, input_tokens: int, output_tokens: int, estimated_tokens: int
    ) -> None:
        self.limiter.record(model, input_tokens, output_tokens, estimated_tokens)

    async def exhausted(self) -> bool:
        return self.limiter.exhausted

    async def snapshot(self) -> dict[str, Any]:
        return self.limiter.snapshot()


class RowActor:
    """Runs chunks of rows (each row in its own task) with a ``BatchWorker``."""

    def __init__(self, spec: WorkerSpec, limiter: Any) -> None:
        self.worker = BatchWorker(spec, gate=RayGate(limiter) if limiter is not None else None)
        self._rows: set[asyncio.Task[dict[str, Any]]] = set()

    async def ready(self) -> int:
        return os.getpid()

    async def run_rows(self, tasks: list[RowTask]) -> AsyncGenerator[list[dict[str, Any]], None]:
        """Run a chunk of rows at once, yielding the lines of the rows that ended as they
        end (a streaming actor method): no row's line waits for the rest of its chunk."""
        running = {self._start(task) for task in tasks}
        try:
            while running:
                done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                yield [row.result() for row in done]
        finally:
            for row in running:
                row.cancel()

    def _start(self, task: RowTask) -> asyncio.Task[dict[str, Any]]:
        row = asyncio.create_task(self.worker.run_row(task))
        self._rows.add(row)
        row.add_done_callback(self._rows.discard)
        return row

    async def stop_rows(self) -> dict[str, dict[str, Any]]:
        """Stop the rows still running (their runs end as ``interrupted``); what each row
        stopped part-way had spent, by row key."""
        for row in self._rows:
            row.cancel()
        await asyncio.gather(*self._rows, return_exceptions=True)
        return self.worker.stopped_usage

    async def flush_telemetry(self) -> bool:
        """Export the spans this actor still holds (the driver asks before it kills the
        actor, which runs no exit handler); True when all went out in time."""
        return await asyncio.to_thread(flush_spans, FLUSH_TIMEOUT_MS)

    async def stats(self) -> dict[str, float]:
        """This actor's process: CPU seconds and peak resident memory (MiB)."""
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "pid": os.getpid(),
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024,
        }


class RayEngine:
    """Runs rows on Ray actors; the driver keeps ``concurrency`` rows in flight per actor."""

    name = "ray"

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        concurrency: int,
        limits: BatchLimits,
        prices: Mapping[str, tuple[float, float]],
        address: str | None = None,
        actors: int | None = None,
        init: Mapping[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.concurrency = concurrency
        self.limits = limits
        self.prices = dict(prices)
        self.address = address
        self.actors = actors
        self.init = dict(init or {})
        self._ray: Any = None
        self._owns = False
        self._limiter: Any = None
        self._workers: list[Any] = []
        self._stopped = False
        self._limiter_lost = False
        """True once the limiter actor died (the batch then stops)."""
        self.stopped_usage: dict[str, dict[str, Any]] = {}
        """What each row stopped part-way had spent, by row key (read when it closes)."""
        self.worker_stats: list[dict[str, float]] = []
        """Each actor's CPU seconds and peak memory, read when the engine closes."""

    async def start(self) -> None:
        ray = import_ray()
        if not ray.is_initialized():  # joined or started here: left (stopped) at the end
            if self.address:
                ray.init(address=self.address, log_to_driver=False, **self.init)
            else:
                start_local_ray(**self.init)
            self._owns = True
        self._ray = ray
        cpus = float(ray.cluster_resources().get("CPU", 1.0)) or 1.0
        count = self.actors or max(1, int(cpus))
        if self.limits:
            self._limiter = (
                ray.remote(LimiterActor).options(num_cpus=0).remote(self.limits, self.prices)
            )
        actor = ray.remote(RowActor).options(num_cpus=min(1.0, cpus / count))
        self._workers = [actor.remote(self.spec, self._limiter) for _ in range(count)]
        try:
            await asyncio.gather(*(worker.ready.remote() for worker in self._workers))
        except Exception as exc:
            raise LatticeUserError(f"the Ray workers could not start: {exc}") from None

    def stop(self) -> None:
        self._stopped = True

    async def stop_reason(self) -> str | None:
        snapshot = await self._snapshot()
        return snapshot.get("spent") if snapshot is not None else None

    async def _snapshot(self) -> dict[str, Any] | None:
        """The limiter's counts (None without a limiter, or when it died)."""
        if self._limiter is None or self._limiter_lost:
            return None
        try:
            snapshot: dict[str, Any] = await self._limiter.snapshot.remote()
        except self._ray.exceptions.RayActorError:
            return None
        return snapshot

    async def run(self, tasks: Iterable[RowTask]) -> AsyncGenerator[dict[str, Any], None]:
        """Each row's results line, as rows end: chunks go to the actor with the most room,
        and each chunk streams its rows' lines back one by one as they end."""
        pending = iter(tasks)
        chunk = max(1, min(CHUNK, self.concurrency // 4))
        inflight = [0] * len(self._workers)
        finished: asyncio.Queue[tuple[int, list[dict[str, Any]] | BaseException]] = asyncio.Queue()
        calls: set[asyncio.Task[None]] = set()

        async def call(index: int, rows: list[RowTask]) -> None:
            try:
                async for lines in self._workers[index].run_rows.remote(rows):
                    finished.put_nowait((index, await lines))
            except Exception as exc:
                finished.put_nowait((index, exc))

        more = True
        try:
            while True:
                while more and not self._stopped:
                    index = min(range(len(inflight)), key=inflight.__getitem__)
                    if self.concurrency - inflight[index] < chunk:
                        break  # rows come back one by one: wait for a chunk's worth of room
                    if await self._budget_spent():
                        self._stopped = True  # as the local engine: no row starts after it
                        break
                    rows = list(itertools.islice(pending, chunk))
                    if not rows:
                        more = False
                        break
                    inflight[index] += len(rows)
                    sent = asyncio.create_task(call(index, rows))
                    calls.add(sent)
                    sent.add_done_callback(calls.discard)
                if not any(inflight):
                    if self._limiter_lost:
                        raise LatticeUserError(
                            f"{LIMITER_DIED}: the batch stopped; the rows it did not finish "
                            "(interrupted, or not started) run with the same command"
                        )
                    return
                index, outcome = await finished.get()
                if isinstance(outcome, BaseException):
                    raise LatticeUserError(
                        f"a Ray worker failed (the rows it had in flight run again next time): "
                        f"{outcome}"
                    )
                inflight[index] -= len(outcome)
                for line in outcome:
                    if line.get("error_type") == LIMITER_LOST:
                        self._lose_limiter()
                    yield line
        finally:
            for sent in list(calls):
                sent.cancel()

    async def _budget_spent(self) -> bool:
        """True when the batch's budget is spent (asked before each chunk is sent), or its
        limiter died."""
        if self._limiter is None:
            return False
        try:
            spent: bool = await self._limiter.exhausted.remote()
        except self._ray.exceptions.RayActorError:
            self._lose_limiter()
            return True
        return spent

    def _lose_limiter(self) -> None:
        """The limiter died: send no more rows, let those in flight end (each stops at its
        next model call), then fail the batch saying why."""
        self._stopped = self._limiter_lost = True

    async def close(self) -> dict[str, Any] | None:
        ray = self._ray
        snapshot: dict[str, Any] | None = None
        if ray is None:
            return None
        try:
            snapshot = await self._snapshot()
            if self._workers:
                for stopped in await asyncio.gather(
                    *(worker.stop_rows.remote() for worker in self._workers),
                    return_exceptions=True,
                ):
                    if isinstance(stopped, dict):  # not a worker that died
                        self.stopped_usage.update(stopped)
                # ray.kill runs no exit handler: spans go out now (a dead worker has none)
                await asyncio.gather(
                    *(worker.flush_telemetry.remote() for worker in self._workers),
                    return_exceptions=True,
                )
                try:
                    self.worker_stats = list(
                        await asyncio.gather(*(worker.stats.remote() for worker in self._workers))
                    )
                except Exception:  # a worker that died has no figures to give
                    self.worker_stats = []
        finally:
            for worker in self._workers:
                ray.kill(worker)
            if self._limiter is not None:
                ray.kill(self._limiter)
            self._workers, self._limiter = [], None
            if self._owns:
                ray.shutdown()
        return snapshot
