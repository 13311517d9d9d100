"""Retry jitter: no two processes retry on one schedule, unless a test asks for one."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys

from lattice.contracts.policies import RetrySettings

SCHEDULE = (
    "import json; from lattice.contracts.policies import RetrySettings; "
    "print(json.dumps([RetrySettings().delay(n, None) for n in range(3)]))"
)


def schedule(settings: RetrySettings) -> list[float]:
    return [settings.delay(n, None) for n in range(3)]


def test_two_processes_retry_on_different_schedules() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    schedules = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", SCHEDULE],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            ).stdout
        )
        for _ in range(2)
    ]
    assert schedules[0] != schedules[1], "a retry storm would come back in step"
    for delays in schedules:
        for delay, base in zip(delays, [1.0, 2.0, 4.0], strict=True):
            assert base <= delay <= base * 1.25


def test_copies_of_the_settings_sent_to_workers_draw_their_own_jitter() -> None:
    settings = RetrySettings()
    copy = pickle.loads(pickle.dumps(settings))
    assert schedule(settings) != schedule(copy)


def test_a_seeded_rng_repeats_its_schedule() -> None:
    first = schedule(RetrySettings(rng=random.Random(7)))
    assert first == schedule(RetrySettings(rng=random.Random(7)))
    assert first != schedule(RetrySettings(rng=random.Random(8)))
