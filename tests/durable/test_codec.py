"""The payload codec: with a key, Temporal's history holds no plaintext of a run's inputs,
state or output; a client without the key (or with another) cannot read the run and says
why; with it, the run's output is the local engine's."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig, TemporalConfig, load_config
from lattice.errors import LatticeUserError
from tests.durable.helpers import example, history_text, run_locally, with_worker

pytest.importorskip("temporalio")

from temporalio.api.common.v1 import Payload

from lattice.durable.temporal.client import connect, follow, start_run
from lattice.durable.temporal.codec import (
    CodecKeyError,
    LatticeCodec,
    codec_from_config,
    parse_keys,
)

VARIABLE = "LATTICE_TEMPORAL_KEY"
LATTICE = [sys.executable, "-m", "lattice.cli"]
PLAINTEXT = ("charged twice", "Refund of the duplicate charge", "INV-2291")
"""Text of support-triage's inputs, its state and its output."""


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=text.encode())


def test_a_payload_round_trips_and_holds_no_plaintext() -> None:
    codec = LatticeCodec(parse_keys(new_key(), VARIABLE))
    [encoded] = asyncio.run(codec.encode([plain('{"ticket": "charged twice"}')]))
    assert encoded.metadata["encoding"] == b"binary/encrypted"
    assert b"charged twice" not in encoded.SerializeToString()
    [decoded] = asyncio.run(codec.decode([encoded]))
    assert decoded == plain('{"ticket": "charged twice"}')


def test_keys_rotate_and_a_wrong_or_missing_key_is_a_clear_error() -> None:
    old, new = new_key(), new_key()
    [sealed] = asyncio.run(LatticeCodec(parse_keys(old, VARIABLE)).encode([plain("x")]))
    rotated = LatticeCodec(parse_keys(f"{new}, {old}", VARIABLE))
    assert asyncio.run(rotated.decode([sealed])) == [plain("x")]
    [resealed] = asyncio.run(rotated.encode([plain("x")]))
    assert resealed.metadata["encryption-key-id"] != sealed.metadata["encryption-key-id"]
    with pytest.raises(CodecKeyError, match="not among the keys of LATTICE_TEMPORAL_KEY"):
        asyncio.run(LatticeCodec(parse_keys(new, VARIABLE)).decode([sealed]))
    with pytest.raises(CodecKeyError, match=r"encrypted .*set LATTICE_TEMPORAL_KEY"):
        asyncio.run(LatticeCodec().decode([sealed]))
    sealed.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(CodecKeyError, match="altered"):
        asyncio.run(LatticeCodec(parse_keys(old, VARIABLE)).decode([sealed]))
    # a payload written without a key stays readable with one (a run from before the key)
    assert asyncio.run(rotated.decode([plain("y")])) == [plain("y")]


def test_the_key_comes_from_the_configured_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    monkeypatch.delenv("TEAM_KEY", raising=False)
    assert not codec_from_config(TemporalConfig()).encrypts  # no key: plain payloads
    named = TemporalConfig(codec_key_env="TEAM_KEY")
    with pytest.raises(CodecKeyError, match="codec_key_env names TEAM_KEY, which is not set"):
        codec_from_config(named)
    monkeypatch.setenv("TEAM_KEY", "too-short")
    with pytest.raises(CodecKeyError, match="TEAM_KEY: key 1 is not base64 of 32 bytes"):
        codec_from_config(named)
    monkeypatch.setenv("TEAM_KEY", new_key())
    assert codec_from_config(named).encrypts
    toml = tmp_path / "lattice.toml"
    toml.write_text('[temporal]\ncodec_key_env = "not a name"\n', encoding="utf-8")
    with pytest.raises(LatticeUserError, match=r"temporal\.codec_key_env"):
        load_config(toml)


def triage_history(
    address: str,
    config: LatticeConfig,
    then: Callable[[str], Awaitable[Any]] | None = None,
) -> tuple[dict[str, Any], str, Any]:
    """Run support-triage with its mock on a worker with ``config``: its outcome, its
    history (payloads as stored, base64-decoded), and what ``then(run_id)`` gives while
    the worker still answers the run's queries."""
    ir, script, inputs = example("support-triage")
    rid = f"codec-{uuid.uuid4().hex[:10]}"

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        outcome = await follow(handle)
        history = await handle.fetch_history()
        after = await then(rid) if then is not None else None
        return outcome, history_text(history.to_json_dict()), after

    return asyncio.run(with_worker(address, body, config))


def test_with_a_key_the_history_holds_no_plaintext_and_only_the_key_reads_it(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ir, script, inputs = example("support-triage")
    local = run_locally(ir, script, inputs)
    monkeypatch.delenv(VARIABLE, raising=False)
    unencrypted, history, _ = triage_history(temporal_address, LatticeConfig())
    assert unencrypted["output"] == local.output
    assert all(text in history for text in PLAINTEXT)  # what the codec is for

    key = new_key()
    monkeypatch.setenv(VARIABLE, key)

    async def read_with(rid: str, env_value: str | None) -> Any:
        if env_value is None:
            monkeypatch.delenv(VARIABLE)
        else:
            monkeypatch.setenv(VARIABLE, env_value)
        client = await connect(temporal_address)
        try:
            return await follow(client.get_workflow_handle(rid))
        except CodecKeyError as exc:
            return exc

    async def reads(rid: str) -> list[Any]:
        return [await read_with(rid, env) for env in (None, new_key(), f"{key},{new_key()}")]

    outcome, history, (missing, wrong, rotated) = triage_history(
        temporal_address, LatticeConfig(), reads
    )
    assert outcome["status"] == "completed"
    assert outcome["output"] == local.output
    assert [text for text in PLAINTEXT if text in history] == []
    assert base64.b64encode(b"binary/encrypted").decode() in history  # metadata stays base64
    assert isinstance(missing, CodecKeyError) and "set LATTICE_TEMPORAL_KEY" in str(missing)
    assert isinstance(wrong, CodecKeyError) and "not among the keys" in str(wrong)
    assert rotated["output"] == local.output


def test_the_cli_without_the_key_says_which_variable_to_set(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(VARIABLE, new_key())
    env = {k: v for k, v in os.environ.items() if k not in ("LATTICE_CONFIG", VARIABLE)}

    async def show(rid: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run,
            [*LATTICE, "runs", "show", rid, "--temporal", temporal_address],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )

    outcome, _, done = triage_history(temporal_address, LatticeConfig(), show)
    assert outcome["status"] == "completed"
    assert done.returncode == 2, done.stderr
    assert "encrypted" in done.stderr and "LATTICE_TEMPORAL_KEY" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_list_leaves_out_the_runs_it_cannot_decrypt(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lattice.durable.temporal.backend import TemporalRuns

    key = new_key()
    monkeypatch.setenv(VARIABLE, key)

    async def listed(rid: str) -> tuple[list[str], list[str]]:
        keyless = TemporalConfig(codec_key_env="LATTICE_TEMPORAL_TEST_NO_KEY")
        monkeypatch.setenv("LATTICE_TEMPORAL_TEST_NO_KEY", new_key())  # another key
        deadline = asyncio.get_running_loop().time() + 60
        while True:  # Temporal's visibility shows a new run after a moment
            page = await TemporalRuns(temporal_address).list_runs(
                status=None, workflow=None, limit=1000, before=None
            )
            with_key = [view.run_id for view in page.runs]
            if rid in with_key or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        other = await TemporalRuns(temporal_address, config=keyless).list_runs(
            status=None, workflow=None, limit=1000, before=None
        )
        return with_key, [view.run_id for view in other.runs]

    outcome, _, (with_key, with_another) = triage_history(
        temporal_address, LatticeConfig(), lambda rid: listed(rid)
    )
    assert outcome["status"] == "completed"
    rid = outcome["run_id"]
    assert rid in with_key
    assert rid not in with_another  # left out, and the list of the others still comes
