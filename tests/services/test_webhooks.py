"""Webhooks of ``[triggers.*]`` on the gateway: a signed delivery starts one run and is
answered 202 at once; a bad or missing signature, a stale timestamp and a repeated
delivery start none and write nothing; 200 deliveries at once start 200 runs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.runs.view import list_runs
from lattice.server.app import ServerSettings, create_app
from lattice.server.in_thread import serve_in_thread
from lattice.services.schedules import ManualClock
from lattice.services.webhooks import github_signature, sign
from tests.conftest import EXAMPLES

SECRET = "whsec-test-0123456789"
TOKEN = "gateway-token"
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
CONFIG = {
    "runs": {"durability": "os"},  # forcing 200 run folders to disk is not what is tested
    "triggers": {
        "greet": {
            "path": "greet",
            "workflow": "hello-world.json",
            "inputs": {"name": "body.sender.login"},
            "secret_env": "LATTICE_TEST_HOOK_SECRET",
        },
        "github": {
            "path": "github/push",
            "workflow": "hello-world.json",
            "inputs": {"name": "body.pusher.name"},
            "signature": "github",
            "secret_env": "LATTICE_TEST_HOOK_SECRET",
        },
    },
}


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    monkeypatch.setenv("LATTICE_TEST_HOOK_SECRET", SECRET)
    settings = ServerSettings(
        runs_dir=tmp_path,
        workflows_dir=EXAMPLES,
        config=LatticeConfig.model_validate(CONFIG),
        token=TOKEN,
        mocks=True,
        max_active_runs=256,
        clock=ManualClock(NOW),
    )
    with serve_in_thread(settings) as url:
        yield url, tmp_path


def signed(body: bytes, *, delivery: str, at: datetime = NOW) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "X-Lattice-Signature": sign(SECRET.encode(), body, timestamp=int(at.timestamp())),
        "X-Lattice-Delivery": delivery,
    }


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def wait_for_end(url: str, run_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(2000):
        run = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers).json()
        if run["status"] != "running":
            return dict(run)
        time.sleep(0.01)
    raise AssertionError(f"run {run_id} did not end")


def test_a_signed_delivery_starts_one_run(gateway: tuple[str, Path]) -> None:
    url, runs = gateway
    body = json.dumps({"sender": {"login": "ada"}}).encode()
    answer = httpx.post(f"{url}/hooks/greet", content=body, headers=signed(body, delivery="d-1"))
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    assert answer.json()["delivery"] == "d-1"
    assert wait_for_end(url, run_id)["status"] == "completed"
    meta = json.loads((runs / run_id / "checkpoint.json").read_text())["meta"]
    assert meta["started_by"] == {"via": "webhook", "trigger": "greet", "delivery": "d-1"}
    assert json.loads((runs / run_id / "input.json").read_text()) == {"name": "ada"}

    listed = list_runs(runs).splitlines()  # the kept deliveries are not a run
    assert len(listed) == 1 and listed[0].startswith(run_id)
    before = files(runs)
    again = httpx.post(f"{url}/hooks/greet", content=body, headers=signed(body, delivery="d-1"))
    assert again.status_code == 409
    assert again.json()["error"] == "repeated_delivery"
    assert files(runs) == before


def test_github_deliveries_are_checked_with_x_hub_signature_256(
    gateway: tuple[str, Path],
) -> None:
    url, runs = gateway
    body = json.dumps({"pusher": {"name": "grace"}}).encode()
    assert httpx.post(f"{url}/v1/runs", json={}).status_code == 401  # the API needs the token
    headers = {  # as GitHub sends them: no bearer token, the signature stands for it
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    }
    good = {**headers, "X-Hub-Signature-256": github_signature(SECRET.encode(), body)}
    answer = httpx.post(f"{url}/hooks/github/push", content=body, headers=good)
    assert answer.status_code == 202, answer.text
    assert wait_for_end(url, answer.json()["run_id"])["output"]
    before = files(runs)
    wrong = {**headers, "X-Hub-Signature-256": github_signature(b"another secret", body)}
    assert httpx.post(f"{url}/hooks/github/push", content=body, headers=wrong).status_code == 401
    assert httpx.post(f"{url}/hooks/github/push", content=body, headers=good).status_code == 409
    assert files(runs) == before


def test_a_captured_delivery_sent_again_under_another_id_starts_nothing(
    gateway: tuple[str, Path],
) -> None:
    """The delivery id headers are not signed: whoever saw one signed request could
    send it again under new ids, each a run, until its time is stale (GitHub's: ever)."""
    url, runs = gateway
    body = json.dumps({"sender": {"login": "ada"}}).encode()
    first = signed(body, delivery="d-1")
    assert httpx.post(f"{url}/hooks/greet", content=body, headers=first).status_code == 202
    before = files(runs)
    replayed = httpx.post(
        f"{url}/hooks/greet", content=body, headers={**first, "X-Lattice-Delivery": "d-2"}
    )
    assert replayed.status_code == 409, replayed.text
    assert replayed.json()["error"] == "repeated_delivery"
    assert files(runs) == before
    # the sender's own retry of d-1, signed anew, is still the one delivery
    retry = signed(body, delivery="d-1", at=NOW - timedelta(seconds=5))
    assert httpx.post(f"{url}/hooks/greet", content=body, headers=retry).status_code == 409
    # a new delivery of the same body, signed at another time, starts its run
    later = signed(body, delivery="d-3", at=NOW - timedelta(seconds=5))
    assert httpx.post(f"{url}/hooks/greet", content=body, headers=later).status_code == 202

    push = json.dumps({"pusher": {"name": "grace"}}).encode()
    github = {"X-Hub-Signature-256": github_signature(SECRET.encode(), push)}
    one = {**github, "X-GitHub-Delivery": "g-1"}
    assert httpx.post(f"{url}/hooks/github/push", content=push, headers=one).status_code == 202
    two = {**github, "X-GitHub-Delivery": "g-2"}
    assert httpx.post(f"{url}/hooks/github/push", content=push, headers=two).status_code == 409


def test_bad_missing_and_stale_signatures_start_nothing(gateway: tuple[str, Path]) -> None:
    url, runs = gateway
    body = json.dumps({"sender": {"login": "ada"}}).encode()
    before = files(runs)
    tampered = body.replace(b"ada", b"eve")
    refusals = {
        "bad": httpx.post(
            f"{url}/hooks/greet", content=tampered, headers=signed(body, delivery="x")
        ),
        "missing": httpx.post(
            f"{url}/hooks/greet", content=body, headers={"Authorization": f"Bearer {TOKEN}"}
        ),
        "stale": httpx.post(
            f"{url}/hooks/greet",
            content=body,
            headers=signed(body, delivery="y", at=NOW - timedelta(minutes=10)),
        ),
    }
    assert {name: r.status_code for name, r in refusals.items()} == dict.fromkeys(refusals, 401)
    assert refusals["bad"].json()["error"] == "invalid_signature"
    assert refusals["missing"].json()["error"] == "missing_signature"
    assert refusals["stale"].json()["error"] == "stale_timestamp"
    assert files(runs) == before


def test_200_deliveries_at_once_start_200_runs(gateway: tuple[str, Path]) -> None:
    url, runs = gateway

    def deliver(n: int) -> httpx.Response:
        body = json.dumps({"sender": {"login": f"user{n}"}}).encode()
        return httpx.post(
            f"{url}/hooks/greet",
            content=body,
            headers=signed(body, delivery=f"burst-{n}"),
            timeout=60,
        )

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(deliver, range(200)))
    assert [a.status_code for a in answers] == [202] * 200
    run_ids = {a.json()["run_id"] for a in answers}
    assert len(run_ids) == 200
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(6000):
        listed = httpx.get(f"{url}/v1/runs?limit=500", headers=headers).json()["runs"]
        if all(run["status"] != "running" for run in listed):
            break
        time.sleep(0.02)
    assert {run["run_id"] for run in listed} == run_ids
    assert {run["status"] for run in listed} == {"completed"}
    assert len([p for p in runs.iterdir() if not p.name.startswith(".")]) == 200


@pytest.mark.parametrize(
    ("table", "entry", "message"),
    [
        ("triggers", {"path": "../up", "workflow": "w.json", "secret_env": "S"}, "path"),
        ("triggers", {"path": "x", "workflow": "w.json", "secret_env": "my secret"}, "secret"),
        (
            "triggers",
            {"path": "x", "workflow": "w.json", "secret_env": "S", "signature": "md5"},
            "signature",
        ),
        (
            "schedules",
            {"cron": "* * * * *", "workflow": "w.json", "timezone": "Mars/Olympus"},
            "time zone",
        ),
        ("schedules", {"cron": "* * * * *", "workflow": "w.json", "catch_up": "all"}, "catch_up"),
    ],
)
def test_a_trigger_or_schedule_that_is_not_one_is_a_config_error(
    table: str, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        LatticeConfig.model_validate({table: {"x": entry}})


def test_the_gateway_refuses_a_trigger_it_could_never_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LATTICE_TEST_HOOK_SECRET", raising=False)
    config = LatticeConfig.model_validate(CONFIG)
    with pytest.raises(LatticeUserError, match="--workflows"):
        create_app(ServerSettings(runs_dir=tmp_path, config=config))
    with pytest.raises(LatticeUserError, match="LATTICE_TEST_HOOK_SECRET"):
        create_app(ServerSettings(runs_dir=tmp_path, workflows_dir=EXAMPLES, config=config))
    monkeypatch.setenv("LATTICE_TEST_HOOK_SECRET", SECRET)
    missing = {"triggers": {"t": {**CONFIG["triggers"]["greet"], "workflow": "nope.json"}}}
    with pytest.raises(LatticeUserError, match=r"nope\.json"):
        create_app(
            ServerSettings(
                runs_dir=tmp_path,
                workflows_dir=EXAMPLES,
                config=LatticeConfig.model_validate(missing),
            )
        )
