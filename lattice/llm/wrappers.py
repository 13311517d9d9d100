"""Providers that wrap providers: client-side limits and routing by ``"provider:model"``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, close_loop_clients
from lattice.llm.errors import LoopLocalClients


class LimitedProvider:
    """At most ``max_concurrency`` calls in flight and ``requests_per_minute`` starts per minute."""

    def __init__(
        self, inner: LLMProvider, *, max_concurrency: int = 8, requests_per_minute: int = 0
    ) -> None:
        self.inner = inner
        self.name = inner.name
        # asyncio primitives bind to one event loop; each Runner.run has its own.
        self._semaphores = LoopLocalClients(lambda: asyncio.Semaphore(max_concurrency))
        self._locks = LoopLocalClients(asyncio.Lock)
        self._interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._next_start = 0.0

    async def _pace(self) -> None:
        if not self._interval:
            return
        async with self._locks.get():
            now = time.monotonic()
            wait = self._next_start - now
            self._next_start = max(now, self._next_start) + self._interval
        if wait > 0:
            await asyncio.sleep(wait)

    async def aclose_loop_clients(self) -> None:
        await close_loop_clients(self.inner)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        async with self._semaphores.get():
            await self._pace()
            return await self.inner.complete(request)


class RouterProvider:
    """Sends ``provider:model`` requests to the named provider (built on first use);
    anything else goes to the default provider."""

    def __init__(
        self, default: LLMProvider, factory: Callable[[str], LLMProvider], names: tuple[str, ...]
    ) -> None:
        self.default = default
        self.name = default.name
        self._factory = factory
        self._names = names
        self._built: dict[str, LLMProvider] = {default.name: default}

    def ensure(self, name: str) -> LLMProvider:
        """The provider called ``name``, built on first use."""
        if name not in self._built:
            self._built[name] = self._factory(name)
        return self._built[name]

    def _route(self, request: LLMRequest) -> tuple[LLMProvider, LLMRequest]:
        model = request.model or ""
        prefix, sep, rest = model.partition(":")
        if sep and prefix in self._names:
            return self.ensure(prefix), replace(request, model=rest or None)
        return self.default, request

    async def aclose_loop_clients(self) -> None:
        for provider in self._built.values():
            await close_loop_clients(provider)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        provider, routed = self._route(request)
        return await provider.complete(routed)

    def __getattr__(self, name: str) -> object:
        # checkpoint/restore/covers/calls of a mock default stay reachable through the router
        return getattr(self.default, name)
