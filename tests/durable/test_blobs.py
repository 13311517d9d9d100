"""Values of any size on Temporal (``blobs.py``): a payload over the threshold is kept in
the blob store (a folder, or an S3-compatible server), the history holds a reference;
blobs are what the codec made of the payload (ciphertext with a key), and are deleted
once Temporal no longer has their run."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig, TemporalConfig, load_config
from lattice.llm.mock import MockProvider
from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import settings_from_config
from tests.builders import chain, node
from tests.durable.conftest import free_port
from tests.durable.helpers import run_locally, with_worker, worker_process

pytest.importorskip("temporalio")  # the temporal_address fixture says how to install it

from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from lattice.durable.temporal.blobs import (
    BlobDriver,
    BlobError,
    BlobStore,
    FolderBlobStore,
    S3BlobStore,
    blob_store_from_config,
    collect_garbage,
    payload_sizes,
    run_folder_name,
    workflow_id_of,
)
from lattice.durable.temporal.client import connect, follow, start_run

MB = 5 * 1024 * 1024
THRESHOLD = 256 * 1024
WAIT = 120.0


def big_document(*, held_url: str | None = None) -> dict[str, Any]:
    """``first`` writes a large answer, ``second`` and ``third`` read it (between them, an
    HTTP call to ``held_url`` when given)."""
    middle = [node("call", "httpRequest", method="GET", url=held_url)] if held_url else []
    return chain(
        node("first", "prompt", prompt="Write at length about {{ $in.topic }}."),
        *middle,
        node("second", "prompt", prompt="Count the words of {{ $vars.first.result }}"),
        node("third", "prompt", prompt="Quote {{ $vars.first.result }} and stop."),
    )


def big_script(size: int) -> dict[str, Any]:
    return {"responses": {"first": ["B" * size], "second": ["many"], "third": ["done"]}}


async def history_of(client: Any, run_id: str) -> list[int]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [size for event in history.events for size in payload_sizes(event)]


async def forget(client: Any, run_id: str) -> None:
    """Delete the run from Temporal, as its namespace's retention does once it has passed."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run_id),
        )
    )
    deadline = time.monotonic() + WAIT
    while True:
        try:
            await client.get_workflow_handle(run_id).describe()
        except Exception:
            return
        assert time.monotonic() < deadline, "the deleted run stayed"
        await asyncio.sleep(0.2)


# -- the driver and the stores ------------------------------------------------------------


def payload(size: int) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * size + b'"')


async def round_trip(store: BlobStore) -> None:
    driver = BlobDriver(store)
    context = StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace="default", id="run/with odd:chars")
    )
    claims = await driver.store(context, [payload(1000), payload(2000)])
    assert [c.claim_data["run"] for c in claims] == [run_folder_name("run/with odd:chars")] * 2
    back = await driver.retrieve(StorageDriverRetrieveContext(), claims)
    assert back == [payload(1000), payload(2000)]
    assert await store.runs() == [run_folder_name("run/with odd:chars")]
    missing = StorageDriverClaim(claim_data={**claims[0].claim_data, "sha256": "0" * 64})
    with pytest.raises(BlobError, match="is not in"):
        await driver.retrieve(StorageDriverRetrieveContext(), [missing])
    assert await store.delete_run(run_folder_name("run/with odd:chars")) == 2
    assert await store.runs() == []


def test_a_folder_store_keeps_payloads_by_run_and_hash(tmp_path: Path) -> None:
    asyncio.run(round_trip(FolderBlobStore(tmp_path / "blobs")))


def test_an_altered_blob_is_refused(tmp_path: Path) -> None:
    store = FolderBlobStore(tmp_path)
    driver = BlobDriver(store)
    context = StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace="default", id="r1")
    )
    (claim,) = asyncio.run(driver.store(context, [payload(100)]))
    path = tmp_path / "r1" / claim.claim_data["sha256"]
    path.write_bytes(path.read_bytes().replace(b"x", b"y"))
    with pytest.raises(BlobError, match="altered"):
        asyncio.run(driver.retrieve(StorageDriverRetrieveContext(), [claim]))


@pytest.mark.parametrize("workflow_id", ["20261126T132739-22959ed0", "a/b c", "b64-x", "é"])
def test_a_runs_folder_name_gives_its_workflow_id_back(workflow_id: str) -> None:
    name = run_folder_name(workflow_id)
    assert "/" not in name and workflow_id_of(name) == workflow_id


def test_the_store_is_the_configurations(tmp_path: Path) -> None:
    assert isinstance(blob_store_from_config(TemporalConfig()), FolderBlobStore)
    folder = blob_store_from_config(TemporalConfig(blob_store=str(tmp_path)))
    assert isinstance(folder, FolderBlobStore) and folder.folder == tmp_path


# -- runs on Temporal ---------------------------------------------------------------------


def test_a_run_with_a_5_mb_value_keeps_no_large_payload_in_its_history(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LATTICE_TEMPORAL_KEY", base64.b64encode(os.urandom(32)).decode())
    ir = lower_document(big_document()).ir
    assert ir is not None
    script, inputs = big_script(MB), {"topic": "tea"}
    local = run_locally(ir, script, inputs)
    assert local.status == "completed"
    config = LatticeConfig(temporal=TemporalConfig(blob_store=str(tmp_path / "blobs")))
    store = blob_store_from_config(config.temporal)
    run_id = f"big-{uuid.uuid4().hex[:12]}"

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], list[int], list[str]]:
        handle = await start_run(
            client,
            ir,
            run_id=run_id,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        done = await follow(handle)
        sizes = await history_of(client, run_id)
        kept = await collect_garbage(client, store, grace_seconds=0)
        return done, sizes, kept

    done, sizes, kept = asyncio.run(with_worker(temporal_address, body, config))
    assert done["status"] == "completed"
    assert done["output"] == local.output
    assert done["vars"] == local.vars
    assert max(sizes) <= THRESHOLD
    blobs = list((tmp_path / "blobs" / run_id).iterdir())
    assert len(blobs) >= 3 and max(b.stat().st_size for b in blobs) > MB
    # what the history would have held: encrypted by the payload codec
    for blob in blobs:
        stored = Payload.FromString(blob.read_bytes())
        assert stored.metadata["encoding"] == b"binary/encrypted"
        assert b"BBBB" not in blob.read_bytes()
    assert kept == []  # Temporal still has the run: its blobs stay

    async def after_retention() -> list[str]:
        client = await connect(temporal_address, config.temporal)
        await forget(client, run_id)
        return await collect_garbage(client, store, grace_seconds=0)

    assert asyncio.run(after_retention()) == [run_id]
    assert not (tmp_path / "blobs" / run_id).exists()


def test_a_worker_killed_mid_run_changes_nothing(
    temporal_address: str,
    tmp_path: Path,
    held: tuple[str, threading.Event, threading.Event],
) -> None:
    url_held, arrived, release = held
    (tmp_path / "lattice.toml").write_text(
        f'[http]\nallow_hosts = ["127.0.0.1"]\n[temporal]\nblob_store = "{tmp_path / "blobs"}"\n',
        encoding="utf-8",
    )
    config = load_config(tmp_path / "lattice.toml")
    ir = lower_document(big_document(held_url=f"{url_held}/slow")).ir
    assert ir is not None
    script, inputs = big_script(MB), {"topic": "tea"}
    queue = f"test-{uuid.uuid4().hex[:12]}"
    run_id = f"big-{uuid.uuid4().hex[:12]}"
    first = worker_process(temporal_address, queue, tmp_path)
    second: subprocess.Popen[bytes] | None = None
    try:

        async def start() -> None:
            client = await connect(temporal_address, config.temporal)
            await start_run(
                client,
                ir,
                run_id=run_id,
                inputs=inputs,
                provider={"mock_script": script},
                task_queue=queue,
            )

        asyncio.run(start())
        assert arrived.wait(WAIT)  # the 5 MB answer recorded, the HTTP call held on a worker
        first.send_signal(signal.SIGKILL)
        first.wait(WAIT)
        release.set()
        second = worker_process(temporal_address, queue, tmp_path)

        async def finish() -> tuple[dict[str, Any], list[int]]:
            client = await connect(temporal_address, config.temporal)
            done = await asyncio.wait_for(follow(client.get_workflow_handle(run_id)), WAIT)
            sizes = await history_of(client, run_id)
            await forget(client, run_id)  # its blobs are in no other test's store
            return done, sizes

        done, sizes = asyncio.run(finish())
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    local = Runner(
        ir,
        provider=MockProvider.from_script(script),
        store=RunStore(None),
        settings=settings_from_config(config),
    ).run(inputs)
    assert local.status == "completed"
    assert done["status"] == "completed"
    assert done["output"] == local.output
    for answered in (done["vars"], local.vars):  # the held server's clock, not the run's
        answered["call"]["result"]["headers"].pop("date")
    assert done["vars"] == local.vars
    assert max(sizes) <= THRESHOLD


# -- an S3-compatible server --------------------------------------------------------------


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's S3 server (a real HTTP S3 API) on 127.0.0.1, with a bucket ``lattice``."""
    boto3 = pytest.importorskip("boto3", reason="boto3 is not installed: pip install -e '.[s3]'")
    pytest.importorskip("moto.server", reason="moto is not installed: pip install 'moto[server]'")
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "lattice-test"),
        ("AWS_SECRET_ACCESS_KEY", "lattice-test-secret"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        s3 = boto3.client("s3", endpoint_url=url)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                s3.create_bucket(Bucket="lattice")
                break
            except Exception:
                assert server.poll() is None and time.monotonic() < deadline, "no S3 server"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait()


def test_an_s3_store_keeps_payloads_by_run_and_hash(s3_server: str) -> None:
    asyncio.run(round_trip(S3BlobStore("lattice", "runs", s3_server)))


def test_a_run_keeps_its_large_values_on_an_s3_compatible_server(
    temporal_address: str, s3_server: str
) -> None:
    ir = lower_document(big_document()).ir
    assert ir is not None
    script, inputs = big_script(600_000), {"topic": "tea"}
    local = run_locally(ir, script, inputs)
    config = LatticeConfig(
        temporal=TemporalConfig(blob_store="s3://lattice/runs", blob_endpoint_url=s3_server)
    )
    store = blob_store_from_config(config.temporal)
    run_id = f"s3-{uuid.uuid4().hex[:12]}"

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], list[int], list[str]]:
        handle = await start_run(
            client,
            ir,
            run_id=run_id,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        done = await follow(handle)
        sizes = await history_of(client, run_id)
        assert await store.runs() == [run_id]
        await forget(client, run_id)
        return done, sizes, await collect_garbage(client, store, grace_seconds=0)

    assert asyncio.run(store.runs()) == []
    done, sizes, deleted = asyncio.run(with_worker(temporal_address, body, config))
    assert done["status"] == "completed"
    assert done["output"] == local.output and done["vars"] == local.vars
    assert max(sizes) <= THRESHOLD
    assert deleted == [run_id]
    assert asyncio.run(store.runs()) == []
