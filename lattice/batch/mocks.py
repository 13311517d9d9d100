"""Mock scripts in a batch: every row runs against its own copy of the script.

A mock script (docs/mocks.md) describes the model calls of one run: each node's list
is taken in order. Shared by a thousand concurrent runs, one list would be consumed in
whatever order the runs happen to call, and a row's answers would depend on timing
and on the engine. So in a batch each row gets a fresh copy of the script, exactly as
``lattice run --mock`` would give it: every row gets the same answers, whatever the
concurrency, on one machine or on Ray, and a row's run folder resumes like any run's.

To give chosen rows other answers (a failure, another branch), a batch script may add
``rows``, keyed by row id (as text)::

    {"responses": {"classify": ["billing"], "draft": ["…"]},
     "rows": {"t-17": {"responses": {"classify": ["bug"]}},
              "t-42": {"responses": {"draft": [{"$error": "invalid_request", "message": "…"}]}}}}

A row's entry replaces the lists of the nodes it names, under ``responses`` and under
``tools`` (and ``default`` when it gives one); the other nodes keep the script's lists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError
from lattice.llm.mock import MockProvider, read_mock_script

_NO_DEFAULT = object()


class BatchMock:
    """A batch's mock script: the script every row runs against, and the rows that have
    answers of their own."""

    def __init__(
        self,
        script: Mapping[str, Any],
        rows: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        latency: float = 0.0,
    ) -> None:
        MockProvider.from_script(script)  # a malformed script is a LatticeUserError now
        for row_id, override in (rows or {}).items():
            try:
                MockProvider.from_script(override)
            except LatticeUserError as exc:
                where = f"rows[{json.dumps(row_id, ensure_ascii=False)}]"
                message = exc.message.removeprefix("mock script: ")
                raise LatticeUserError(
                    f"mock script: {where}: {message}", error_type="mock_error"
                ) from None
        self.script = dict(script)
        self.rows = {str(k): dict(v) for k, v in (rows or {}).items()}
        self.latency = latency
        self._responses: dict[str, list[Any]] = {
            node: list(items) for node, items in (script.get("responses") or {}).items()
        }
        self._default: Any = script.get("default", _NO_DEFAULT)
        self._tools: dict[str, list[Any]] = {
            key: list(items) for key, items in (script.get("tools") or {}).items()
        }

    @classmethod
    def from_data(cls, data: Any, *, latency: float = 0.0) -> BatchMock:
        """From a parsed script, which may hold ``rows``."""
        if not isinstance(data, Mapping):
            raise LatticeUserError(
                'a mock script is a JSON object {"responses": {...}}', error_type="mock_error"
            )
        rows = data.get("rows", {})
        if not isinstance(rows, Mapping) or not all(isinstance(v, Mapping) for v in rows.values()):
            raise LatticeUserError(
                'mock script: "rows" maps row ids to scripts {"responses": {...}}',
                error_type="mock_error",
            )
        script = {k: v for k, v in data.items() if k != "rows"}
        return cls(script, rows, latency=latency)

    @classmethod
    def from_file(cls, path: str | Path, *, latency: float = 0.0) -> BatchMock:
        return cls.from_data(read_mock_script(path), latency=latency)

    def overridden(self, row_id: Any) -> bool:
        return str(row_id) in self.rows

    def script_for(self, row_id: Any) -> dict[str, Any]:
        """The whole script row ``row_id`` runs against (what its run folder records)."""
        override = self.rows.get(str(row_id))
        if override is None:
            return dict(self.script)
        merged: dict[str, Any] = {
            "responses": {**self.script.get("responses", {}), **override.get("responses", {})}
        }
        tools = {**self.script.get("tools", {}), **override.get("tools", {})}
        if tools:
            merged["tools"] = tools
        if "default" in override:
            merged["default"] = override["default"]
        elif "default" in self.script:
            merged["default"] = self.script["default"]
        return merged

    def for_row(self, row_id: Any) -> MockProvider:
        """A fresh provider for one run of row ``row_id``."""
        if str(row_id) in self.rows:
            return MockProvider.from_script(
                self.script_for(row_id), latency=self.latency, keep_calls=False
            )
        return MockProvider(
            self._responses,
            latency=self.latency,
            keep_calls=False,
            tools=self._tools,
            **({} if self._default is _NO_DEFAULT else {"default": self._default}),
        )
