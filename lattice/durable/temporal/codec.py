"""The payload codec: every payload Lattice sends through Temporal, encrypted with AES-GCM.

A run's inputs, state, op requests and results, events, questions, answers and the
journal of an op in flight (heartbeat details) all travel as payloads; with a key, each is
encrypted before it leaves the process, so Temporal's history and its web UI hold
ciphertext only. Keys come from an environment variable (``[temporal] codec_key_env``,
``LATTICE_TEMPORAL_KEY`` by default): base64 of 32 random bytes, several separated by
commas. The first key encrypts; every key decrypts (a payload names its key by a short
digest), so a key is rotated by putting the new one first and dropping the old one once
no run written with it is read any more.

Without a key, payloads are sent as they are, and an encrypted payload read without its
key is a ``CodecKeyError`` that says which variable to set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from lattice.config import TemporalConfig
from lattice.errors import ErrorType, LatticeUserError

ENCODING = b"binary/encrypted"
"""The encoding of an encrypted payload (as in Temporal's encryption samples)."""
KEY_ID = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12


class CodecKeyError(LatticeUserError):
    """A key that is missing, malformed, or not the one a payload was encrypted with."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_type=ErrorType.TEMPORAL_CODEC)


def key_id(key: bytes) -> str:
    """The short digest a payload names its key by (never the key itself)."""
    return hashlib.sha256(key).hexdigest()[:16]


def parse_keys(text: str, variable: str) -> list[bytes]:
    """The keys of ``text`` (base64 of 32 bytes each, comma-separated), in order."""
    keys = []
    for number, part in enumerate(filter(None, (p.strip() for p in text.split(","))), 1):
        try:
            key = base64.b64decode(part, validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != KEY_BYTES:
            raise CodecKeyError(
                f"{variable}: key {number} is not base64 of {KEY_BYTES} bytes "
                "(make one with: openssl rand -base64 32)"
            )
        keys.append(key)
    if not keys:
        raise CodecKeyError(f"{variable} is empty (make a key with: openssl rand -base64 32)")
    return keys


class LatticeCodec(PayloadCodec):
    """Encrypts with the first of ``keys`` and decrypts with any of them; with no keys,
    leaves payloads as they are and refuses to read an encrypted one."""

    def __init__(self, keys: Sequence[bytes] = (), *, variable: str = "LATTICE_TEMPORAL_KEY"):
        self.variable = variable
        self._keys = {key_id(key): AESGCM(key) for key in keys}
        self._current = key_id(keys[0]) if keys else None

    @property
    def encrypts(self) -> bool:
        return self._current is not None

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encode_one(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decode_one(payload) for payload in payloads]

    def encode_one(self, payload: Payload) -> Payload:
        """``payload`` encrypted with the current key (as it is without a key)."""
        if self._current is None:
            return payload
        nonce = os.urandom(NONCE_BYTES)
        data = nonce + self._keys[self._current].encrypt(nonce, payload.SerializeToString(), None)
        return Payload(metadata={"encoding": ENCODING, KEY_ID: self._current.encode()}, data=data)

    def decode_one(self, payload: Payload) -> Payload:
        """``payload`` decrypted (as it is when it was not encrypted); a CodecKeyError when
        none of the keys is the one it was encrypted with."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written without a key: readable as it is
        wanted = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        cipher = self._keys.get(wanted)
        if cipher is None:
            if not self._keys:
                raise CodecKeyError(
                    f"this run's payloads are encrypted (key {wanted}); set {self.variable} "
                    "to the key its workers use"
                )
            raise CodecKeyError(
                f"this run's payloads are encrypted with key {wanted}, which is not among "
                f"the keys of {self.variable} ({', '.join(self._keys)}); add that key "
                "after the current one"
            )
        data = bytes(payload.data)
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], None)
        except Exception as exc:  # cryptography's InvalidTag: altered or not ours
            raise CodecKeyError(
                f"a payload encrypted with key {wanted} does not decrypt: it was altered"
            ) from exc
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded


def codec_from_config(config: TemporalConfig) -> LatticeCodec:
    """The codec of ``[temporal]``: keys from its variable (which must be set when the
    configuration names it), or none."""
    variable, required = config.codec_key_variable()
    text = os.environ.get(variable, "")
    if not text.strip():
        if required:
            raise CodecKeyError(
                f"[temporal] codec_key_env names {variable}, which is not set "
                "(make a key with: openssl rand -base64 32)"
            )
        return LatticeCodec(variable=variable)
    return LatticeCodec(parse_keys(text, variable), variable=variable)
