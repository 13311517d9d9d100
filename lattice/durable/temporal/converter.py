"""How Lattice's runs travel through Temporal: JSON, with the keys in their order, through
the payload codec the user configures, large payloads through the blob store.

Temporal's default JSON converter sorts object keys; a run's output, state and events
keep the order the workflow wrote them in (as a local run prints and records them), so
every client and worker of Lattice runs uses ``data_converter``'s converter.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
)

from lattice.durable.temporal.codec import LatticeCodec


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


def data_converter(
    codec: LatticeCodec | None = None, storage: ExternalStorage | None = None
) -> DataConverter:
    """The data converter of every Lattice client and worker: ordered JSON through
    ``codec``, then, for a payload too large for the history, ``storage`` (the blob store
    of ``blobs.py``: it keeps the encoded payload, the history a reference). When the codec
    encrypts, a failure's message and stack trace are encoded too (Temporal keeps them as
    plain text otherwise)."""
    if codec is None or not codec.encrypts:
        return DataConverter(
            payload_converter_class=LatticePayloadConverter,
            payload_codec=codec,
            external_storage=storage,
        )
    return DataConverter(
        payload_converter_class=LatticePayloadConverter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
        external_storage=storage,
    )
