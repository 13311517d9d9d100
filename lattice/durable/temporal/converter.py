"""How Lattice's runs travel through Temporal: JSON, with the keys in their order.

Temporal's default JSON converter sorts object keys; a run's output, state and events
keep the order the workflow wrote them in (as a local run prints and records them), so
every client and worker of Lattice runs uses ``DATA_CONVERTER``.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)


class OrderedJSONPayloadConverter(JSONPlainPayloadConverter):
    """``json/plain`` payloads whose objects keep their key order."""

    def to_payload(self, value: Any) -> Payload | None:
        text = json.dumps(value, cls=AdvancedJSONEncoder, separators=(",", ":"), ensure_ascii=False)
        return Payload(metadata={"encoding": self.encoding.encode()}, data=text.encode())


class LatticePayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converters, with ``OrderedJSONPayloadConverter`` for JSON."""

    def __init__(self) -> None:
        super().__init__(
            *(
                OrderedJSONPayloadConverter()
                if isinstance(converter, JSONPlainPayloadConverter)
                else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = DataConverter(payload_converter_class=LatticePayloadConverter)
"""The data converter of every Lattice client and worker."""
