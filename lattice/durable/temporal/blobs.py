"""The claim check: payloads too large for Temporal's history, kept in a blob store.

Temporal's SDK hands every payload, once the payload codec has encoded it (encrypted, with
a key), to its external storage when it is ``[temporal] blob_threshold_bytes`` or larger
(256 KB by default): ``BlobDriver`` keeps it in the run's blob store, under the SHA-256 of
its bytes, and the history holds a small reference (``{"driverName": "lattice-blobs",
"claimData": {"run": ..., "sha256": ..., "bytes": ...}}``). Whoever decodes the reference
(a worker replaying the workflow, an op reading its request, a client reading a result)
reads the blob back, checks its hash and decodes it with the codec as any payload. So a
blob holds what the history would have held: ciphertext when there is a key.

A store is a folder (``FolderBlobStore``; by default one per user on this machine, shared
by its workers) or an S3 bucket, on AWS or any S3-compatible server (``S3BlobStore``,
with the ``s3`` extra). Blobs are kept per run (the workflow id), so that
``collect_garbage`` can delete a run's blobs once Temporal no longer has the run (its
namespace's retention has passed, or it was deleted).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import hashlib
import logging
import os
import re
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from lattice.config import TemporalConfig
from lattice.errors import ErrorType, LatticeUserError, install_hint

DRIVER_NAME = "lattice-blobs"
"""The storage driver's name, as references in the history give it."""
UNOWNED = "_unowned"
"""Where a payload whose run is not known is kept (none of Lattice's: a safeguard)."""
UNOWNED_KEEP_SECONDS = 7 * 24 * 3600
"""How long ``collect_garbage`` keeps blobs of no known run."""
GARBAGE_GRACE_SECONDS = 3600.0
"""A run's blobs written this recently are kept even when Temporal does not know the run:
a run's input is stored just before its workflow is started."""
current_run: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lattice_blob_run", default=None
)
"""The run whose op runs in this task: an op's heartbeats (its journal) name the op, not
its run, to the storage driver, so the op's activity sets this."""
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
LOG = logging.getLogger(__name__)


def run_folder_name(workflow_id: str) -> str:
    """The name a run's blobs are kept under: its workflow id when that is a safe file or
    key name, else ``b64-`` and its URL-safe base64."""
    if _SAFE.fullmatch(workflow_id) and not workflow_id.startswith("b64-"):
        return workflow_id
    return "b64-" + base64.urlsafe_b64encode(workflow_id.encode()).decode().rstrip("=")


def workflow_id_of(name: str) -> str:
    """The workflow id ``run_folder_name`` gave ``name`` for."""
    if not name.startswith("b64-"):
        return name
    text = name[4:]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


class BlobStore(ABC):
    """Blobs, by run and name (the SHA-256 of their bytes)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the blobs are (for messages)."""

    @abstractmethod
    async def put(self, run: str, name: str, data: bytes) -> None:
        """Keep ``data`` as blob ``name`` of ``run`` (kept once: a blob never changes)."""

    @abstractmethod
    async def get(self, run: str, name: str) -> bytes | None:
        """Blob ``name`` of ``run``, or None when it is not there."""

    @abstractmethod
    async def runs(self) -> list[str]:
        """The runs that have blobs (their folder names)."""

    @abstractmethod
    async def newest(self, run: str) -> float | None:
        """When ``run``'s newest blob was written (seconds since the epoch), or None."""

    @abstractmethod
    async def delete_run(self, run: str) -> int:
        """Delete ``run``'s blobs; how many there were."""


def default_folder() -> Path:
    """``lattice/temporal-blobs`` under ``$XDG_DATA_HOME``, else ``~/.local/share``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "lattice" / "temporal-blobs"


class FolderBlobStore(BlobStore):
    """Blobs as files, ``<folder>/<run>/<sha256>`` (written whole, then renamed)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def describe(self) -> str:
        return f"the folder {self.folder}"

    async def put(self, run: str, name: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, run, name, data)

    def _put(self, run: str, name: str, data: bytes) -> None:
        path = self.folder / run / name
        if path.exists():
            os.utime(path)  # the run wrote it again: keep it as long as the newest blob
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{name}.{os.getpid()}.{id(data)}")
        partial.write_bytes(data)
        os.replace(partial, path)

    async def get(self, run: str, name: str) -> bytes | None:
        path = self.folder / run / name
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return None

    async def runs(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(p.name for p in self.folder.iterdir() if p.is_dir())

    async def newest(self, run: str) -> float | None:
        times = [p.stat().st_mtime for p in (self.folder / run).glob("*") if p.is_file()]
        return max(times, default=None)

    async def delete_run(self, run: str) -> int:
        folder = self.folder / run
        count = sum(1 for p in folder.glob("*") if p.is_file())
        await asyncio.to_thread(shutil.rmtree, folder, True)
        return count


class S3BlobStore(BlobStore):
    """Blobs as objects, ``s3://<bucket>/<prefix>/<run>/<sha256>``, on S3 or an
    S3-compatible server (``endpoint_url``), through boto3 (the ``s3`` extra)."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        try:
            import boto3  # type: ignore[import-untyped]
        except ImportError as exc:
            raise LatticeUserError(
                f"[temporal] blob_store on S3 needs boto3: {install_hint('s3')}",
                error_type=ErrorType.TEMPORAL_BLOBS,
            ) from exc
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self._s3: Any = boto3.client("s3", endpoint_url=endpoint_url)

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def _key(self, run: str, name: str = "") -> str:
        return f"{self.prefix}{run}/{name}"

    async def put(self, run: str, name: str, data: bytes) -> None:
        await asyncio.to_thread(
            self._s3.put_object, Bucket=self.bucket, Key=self._key(run, name), Body=data
        )

    async def get(self, run: str, name: str) -> bytes | None:
        def read() -> bytes | None:
            try:
                found = self._s3.get_object(Bucket=self.bucket, Key=self._key(run, name))
            except self._s3.exceptions.NoSuchKey:
                return None
            data: bytes = found["Body"].read()
            return data

        return await asyncio.to_thread(read)

    def _objects(self, run: str) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(run)
        ):
            objects.extend(page.get("Contents", []))
        return objects

    async def runs(self) -> list[str]:
        def listed() -> list[str]:
            names = []
            for page in self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"
            ):
                for common in page.get("CommonPrefixes", []):
                    names.append(common["Prefix"][len(self.prefix) :].rstrip("/"))
            return sorted(names)

        return await asyncio.to_thread(listed)

    async def newest(self, run: str) -> float | None:
        objects = await asyncio.to_thread(self._objects, run)
        return max((o["LastModified"].timestamp() for o in objects), default=None)

    async def delete_run(self, run: str) -> int:
        def delete() -> int:
            keys = [{"Key": o["Key"]} for o in self._objects(run)]
            for start in range(0, len(keys), 1000):
                self._s3.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": keys[start : start + 1000]}
                )
            return len(keys)

        return await asyncio.to_thread(delete)


def blob_store_from_config(config: TemporalConfig) -> BlobStore:
    """The blob store ``[temporal]`` names (a folder, or ``s3://BUCKET/PREFIX``)."""
    where = config.blob_store
    if where is None:
        return FolderBlobStore(default_folder())
    if where.startswith("s3://"):
        bucket, _, prefix = where[len("s3://") :].partition("/")
        if not bucket:
            raise LatticeUserError(
                f"[temporal] blob_store {where!r} names no bucket (s3://BUCKET/PREFIX)",
                error_type=ErrorType.TEMPORAL_BLOBS,
            )
        return S3BlobStore(bucket, prefix, config.blob_endpoint_url)
    return FolderBlobStore(Path(where).expanduser())


class BlobError(LatticeUserError):
    """A reference whose blob is missing or altered."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_type=ErrorType.TEMPORAL_BLOBS)


class BlobDriver(StorageDriver):
    """Temporal's storage driver over a ``BlobStore`` (module docstring)."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs

    def name(self) -> str:
        return DRIVER_NAME

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        target = context.target
        if isinstance(target, StorageDriverWorkflowInfo) and target.id:
            run = run_folder_name(target.id)
        else:  # an op's heartbeat: its activity said whose op it is
            owner = current_run.get()
            run = run_folder_name(owner) if owner else UNOWNED
        claims = []
        for payload in payloads:
            data = payload.SerializeToString()
            name = hashlib.sha256(data).hexdigest()
            await self.blobs.put(run, name, data)
            claims.append(
                StorageDriverClaim(claim_data={"run": run, "sha256": name, "bytes": str(len(data))})
            )
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        payloads = []
        for claim in claims:
            run, name = claim.claim_data["run"], claim.claim_data["sha256"]
            data = await self.blobs.get(run, name)
            if data is None:
                raise BlobError(
                    f"blob {name} of run {workflow_id_of(run)} is not in {self.blobs.describe()}: "
                    "give every client and worker the same [temporal] blob_store "
                    "(docs/temporal.md, 'Values of any size')"
                )
            if hashlib.sha256(data).hexdigest() != name:
                raise BlobError(f"blob {name} of run {workflow_id_of(run)} was altered")
            payload = Payload()
            payload.ParseFromString(data)
            payloads.append(payload)
        return payloads


def external_storage(config: TemporalConfig) -> ExternalStorage:
    """The external storage of every Lattice client and worker: ``[temporal]``'s blob
    store, for payloads of ``blob_threshold_bytes`` or more."""
    return ExternalStorage(
        drivers=[BlobDriver(blob_store_from_config(config))],
        payload_size_threshold=config.blob_threshold_bytes,
    )


async def collect_garbage(
    client: Any, store: BlobStore, *, grace_seconds: float = GARBAGE_GRACE_SECONDS
) -> list[str]:
    """Delete the blobs of the runs Temporal no longer has (their retention has passed, or
    they were deleted) and that wrote none in the last ``grace_seconds``; the workflow ids
    whose blobs were deleted."""
    from temporalio.service import RPCError, RPCStatusCode

    deleted = []
    now = time.time()
    for run in await store.runs():
        newest = await store.newest(run)
        if run == UNOWNED:
            if newest is not None and now - newest > UNOWNED_KEEP_SECONDS:
                await store.delete_run(run)
            continue
        if newest is not None and now - newest < grace_seconds:
            continue
        try:
            await client.get_workflow_handle(workflow_id_of(run)).describe()
            continue
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                LOG.warning("blob store: run %s not checked: %s", workflow_id_of(run), exc)
                continue
        count = await store.delete_run(run)
        LOG.info("blob store: deleted %d blob(s) of run %s", count, workflow_id_of(run))
        deleted.append(workflow_id_of(run))
    return deleted


def payload_sizes(message: Any) -> list[int]:
    """The size in bytes of every payload ``message`` (a history, an event) holds, as
    Temporal counts it against its per-payload limit: a reference counts, not its blob."""
    if isinstance(message, Payload):
        return [message.ByteSize()]
    sizes: list[int] = []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = value.values()
        elif field.is_repeated:
            items = value
        else:
            items = [value]
        for item in items:
            if hasattr(item, "ListFields"):
                sizes.extend(payload_sizes(item))
    return sizes
