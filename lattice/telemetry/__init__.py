"""OpenTelemetry traces of runs (docs/telemetry.md).

A run's events become spans: one for the run, one per op, one per model attempt, named
and attributed after the OpenTelemetry GenAI semantic conventions, plus Lattice's own
attributes. ``TraceListener`` (``lattice.telemetry.spans``) is an ordinary event
listener; a Runner whose settings have ``telemetry`` subscribes one to every run.

Nothing here imports OpenTelemetry: ``spans`` does, and it is imported only when tracing
is configured (``[telemetry] otlp_endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``, or a
``TelemetrySettings`` given in Python). The SDK and the OTLP exporter come with
``pip install -e '.[otel]'`` (in a clone of Lattice).
"""

from __future__ import annotations

import sys

from lattice.telemetry.settings import TelemetrySettings, telemetry_from_config

__all__ = ["TelemetrySettings", "flush", "telemetry_from_config"]


def flush(timeout_millis: int = 30_000) -> bool:
    """Export the spans Lattice's own tracer providers still hold (a process exit does it
    too); True when there was nothing to do or all went out in time."""
    spans = sys.modules.get("lattice.telemetry.spans")
    if spans is None:
        return True
    return bool(spans.flush_providers(timeout_millis))
