"""Webhooks (``[triggers.<name>]``): checking a delivery's HMAC signature and freshness,
reading a workflow's inputs from it, and keeping each delivery id once.

Two signatures are understood, each an HMAC-SHA256 keyed by the secret in the
environment variable the trigger names (never in a document):

- ``github``: ``X-Hub-Signature-256: sha256=<hex of HMAC(body)>``, the delivery id in
  ``X-GitHub-Delivery`` (GitHub signs no time);
- ``lattice``: ``X-Lattice-Signature: t=<unix seconds>,v1=<hex of HMAC("<t>." + body)>``
  (several ``v1=`` may be given, for a secret being rotated), the delivery id in
  ``X-Lattice-Delivery`` (without one, the signature stands for it); a ``t`` further than
  ``tolerance_seconds`` from now is refused.

A delivery that is kept is a file under the runs folder, made with one atomic link
(``.deliveries/<trigger>/<digest of the id>.json``, holding the id and its run id): a
second delivery of the same id finds it and starts nothing. The id headers are not
signed, so what the signature covers (the body, and the time for ``lattice``) is kept
too: the same signed request sent again under another id starts nothing either.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jmespath.exceptions import JMESPathError

from lattice.config import TriggerConfig
from lattice.errors import LatticeUserError
from lattice.files import sync_directory, write_replacing
from lattice.runtime.conditions import compile_jmespath

MAX_DELIVERY_ID = 200
"""The longest delivery id kept (longer ones are refused)."""


class Refused(Exception):
    """A delivery that starts nothing: the HTTP status, an error code and why."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message


@dataclass(frozen=True)
class Delivery:
    """A request to a trigger whose signature holds: its id and its JSON body."""

    id: str
    body: Any
    headers: dict[str, str]
    signed: str = ""
    """What the signature covers, as a key (``sig-<hex>``): the id header is not signed,
    so a captured request sent again under another id is still this one."""


def secret_of(name: str, trigger: TriggerConfig, environ: Mapping[str, str]) -> bytes:
    value = environ.get(trigger.secret_env)
    if not value:
        raise LatticeUserError(
            f"trigger {name!r}: the environment variable {trigger.secret_env} (its HMAC "
            "secret) is not set"
        )
    return value.encode("utf-8")


def verify(
    trigger: TriggerConfig,
    secret: bytes,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float,
) -> Delivery:
    """The delivery ``body`` and ``headers`` (lower-case names) make, when its signature
    holds and it is fresh; else Refused (401: signature, time; 400: the body)."""
    if trigger.signature == "github":
        delivery_id, digest = _github(secret, body, headers)
    else:
        delivery_id, digest = _lattice(trigger, secret, body, headers, now=now)
    if not delivery_id or len(delivery_id) > MAX_DELIVERY_ID:
        raise Refused(400, "invalid_delivery", "the delivery id is missing or too long")
    try:
        data = json.loads(body) if body.strip() else None
    except (ValueError, RecursionError):
        raise Refused(400, "invalid_json", "the request body is not valid JSON") from None
    return Delivery(delivery_id, data, dict(headers), f"sig-{digest}")


def _github(secret: bytes, body: bytes, headers: Mapping[str, str]) -> tuple[str, str]:
    given = headers.get("x-hub-signature-256", "")
    if not given.startswith("sha256="):
        raise Refused(401, "missing_signature", "X-Hub-Signature-256: sha256=<hex> is missing")
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.removeprefix("sha256=").encode(), expected.encode()):
        raise Refused(401, "invalid_signature", "the signature does not match the body")
    return headers.get("x-github-delivery", ""), expected


def _lattice(
    trigger: TriggerConfig, secret: bytes, body: bytes, headers: Mapping[str, str], *, now: float
) -> tuple[str, str]:
    given = headers.get("x-lattice-signature", "")
    if not given:
        raise Refused(401, "missing_signature", "X-Lattice-Signature: t=<unix>,v1=<hex> is missing")
    parts = [part.strip().partition("=") for part in given.split(",")]
    stamps = [value for key, _, value in parts if key == "t"]
    signatures = [value for key, _, value in parts if key == "v1"]
    if len(stamps) != 1 or not stamps[0].isdigit() or not signatures:
        raise Refused(401, "invalid_signature", "X-Lattice-Signature must be t=<unix>,v1=<hex>")
    stamp = int(stamps[0])
    expected = hmac.new(secret, stamps[0].encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(s.encode(), expected.encode()) for s in signatures):
        raise Refused(401, "invalid_signature", "the signature does not match the body")
    if abs(now - stamp) > trigger.tolerance_seconds:
        raise Refused(
            401,
            "stale_timestamp",
            f"the signature's time is more than {trigger.tolerance_seconds} s from now",
        )
    return headers.get("x-lattice-delivery") or f"sig-{expected}", expected


def sign(secret: bytes, body: bytes, *, timestamp: int) -> str:
    """The ``X-Lattice-Signature`` of ``body`` sent at ``timestamp`` (for senders and tests)."""
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def github_signature(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` GitHub sends with ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class InputMapping:
    """A trigger's inputs, each a JMESPath expression over ``{"body", "headers"}``."""

    def __init__(self, name: str, inputs: Mapping[str, str]) -> None:
        self.searches: dict[str, Callable[[Any], Any]] = {}
        for key, expression in inputs.items():
            try:
                self.searches[key] = compile_jmespath(expression)
            except JMESPathError as exc:
                raise LatticeUserError(
                    f"triggers.{name}.inputs.{key}: {expression!r} is not JMESPath: {exc}"
                ) from None

    def inputs(self, delivery: Delivery) -> dict[str, Any]:
        """The inputs the delivery gives (an input whose expression finds nothing is left
        out, so that the workflow's default or its check applies)."""
        data = {"body": delivery.body, "headers": delivery.headers}
        found = {}
        for key, search in self.searches.items():
            try:
                value = search(data)
            except JMESPathError as exc:
                raise Refused(422, "invalid_inputs", f"input {key!r}: {exc}") from None
            if value is not None:
                found[key] = value
        return found


class DeliveryLedger:
    """The delivery ids a trigger has started runs for, kept in ``folder``."""

    def __init__(self, folder: Path, *, durable: bool = True) -> None:
        self.folder = folder
        self.durable = durable

    def _path(self, delivery_id: str) -> Path:
        return self.folder / f"{hashlib.sha256(delivery_id.encode()).hexdigest()[:40]}.json"

    def claim(self, delivery_id: str, run_id: str) -> str | None:
        """Keep ``delivery_id`` for ``run_id``; the run id kept before when it was kept
        already (then nothing is written)."""
        path = self._path(delivery_id)
        if path.exists():  # the common repeat: refused without writing anything
            return self.kept(delivery_id) or "?"
        record = json.dumps({"delivery": delivery_id, "run_id": run_id}) + "\n"
        staged = path.with_name(f".{path.name}.{os.getpid()}.{run_id}")
        self.folder.mkdir(parents=True, exist_ok=True)
        write_replacing(staged, record, sync=self.durable)
        try:
            os.link(staged, path)  # fails when the id is kept: one claim wins
        except FileExistsError:
            return self.kept(delivery_id) or "?"
        finally:
            staged.unlink(missing_ok=True)
        if self.durable:
            sync_directory(self.folder)
        return None

    def kept(self, delivery_id: str) -> str | None:
        try:
            return str(json.loads(self._path(delivery_id).read_text(encoding="utf-8"))["run_id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def release(self, delivery_id: str) -> None:
        """Forget a claim whose run could not start (a later delivery may start it)."""
        self._path(delivery_id).unlink(missing_ok=True)
