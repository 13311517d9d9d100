"""What tracing needs to know, without OpenTelemetry: where spans go and what they hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the config is read by telemetry_from_config, never needed to import
    from lattice.config import LatticeConfig


@dataclass(frozen=True)
class TelemetrySettings:
    """Tracing of runs.

    ``traces_url`` is where an OTLP/HTTP exporter posts spans (``…/v1/traces``); Lattice
    keeps one tracer provider per URL and service name for the whole process.
    ``tracer_provider`` (an OpenTelemetry ``TracerProvider``) is used instead when given:
    your application's own, or one with an in-memory exporter in tests.
    ``capture_content`` puts the messages of each request and the text of each answer on
    the attempt spans, masked like run folders (``lattice.runs.redaction``).
    """

    traces_url: str | None = None
    capture_content: bool = False
    service_name: str = "lattice"
    tracer_provider: Any = None

    @property
    def enabled(self) -> bool:
        return self.traces_url is not None or self.tracer_provider is not None


def telemetry_from_config(config: LatticeConfig) -> TelemetrySettings | None:
    """The ``[telemetry]`` section (with the ``OTEL_*`` variables ``load_config`` applied);
    None when tracing is off."""
    section = config.telemetry
    url = section.traces_url()
    if url is None:
        return None
    return TelemetrySettings(
        traces_url=url,
        capture_content=section.capture_content,
        service_name=section.service_name,
    )
