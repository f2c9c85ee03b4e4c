"""The one way to talk to a coordinator: signed (or admin) HTTP calls, retried through `swarmrl.retry`.

Each attempt is signed afresh (timestamp and nonce), so a retried call is never a replay. Retried: the
coordinator unreachable, a 5xx, and a 429 (rate limited) — with full-jitter exponential back-off that never
comes back sooner than the answer's Retry-After. Any other refusal raises `CoordinatorError(status, kind,
detail)` at once. A node held back (rate limited, coordinator down) says so once, not on every attempt.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.signing import sign_request
from swarmrl.identity import Identity
from swarmrl.retry import Notices, RetryPolicy, call_with_retries
from swarmrl.tls import client_tls

log = logging.getLogger(__name__)

Model = TypeVar("Model")

# Nodes keep trying for two minutes ([swarm] coordinator_retry_s): a coordinator restart or a rate limit's
# window, not a lost cause.
NODE_RETRY = RetryPolicy(attempts=12, deadline_seconds=120.0, initial_seconds=0.25, max_seconds=8.0)


def node_retry(deadline_seconds: float) -> RetryPolicy:
    """A node's retry policy with the run's patience for its coordinator: the deadline ends the retries, never
    the count of attempts (12 full-jitter waits of at most 8 s add up to about 30 s, not the 120 s of
    `[swarm] coordinator_retry_s`)."""
    attempts = max(NODE_RETRY.attempts, 1 + math.ceil(deadline_seconds / NODE_RETRY.initial_seconds))
    return dataclasses.replace(NODE_RETRY, deadline_seconds=deadline_seconds, attempts=attempts)


# Operator tools and one-shot reads give up sooner.
SHORT_RETRY = RetryPolicy(attempts=3, deadline_seconds=10.0, initial_seconds=0.25, max_seconds=2.0)
RETRIED_STATUSES = {429, 502, 503, 504}


def retryable(exc: BaseException) -> bool:
    """Worth another attempt: the coordinator unreachable, overloaded or rate limiting; never a refusal."""
    return isinstance(exc, CoordinatorError) and (
        exc.status == 0 or exc.status in RETRIED_STATUSES or exc.status >= 500
    )


def retry_after(exc: BaseException) -> float | None:
    return exc.retry_after_s if isinstance(exc, CoordinatorError) else None


def failure_kind(exc: BaseException) -> str:
    return f"{exc.status} {exc.kind}" if isinstance(exc, CoordinatorError) else type(exc).__name__


class SignedTransport:
    """HTTP to one coordinator as one identity (or with the admin token); shared by the role clients."""

    def __init__(
        self,
        base_url: str,
        identity: Identity | None = None,
        *,
        admin_token: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy = NODE_RETRY,
        stop: threading.Event | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.identity = identity
        self.admin_token = admin_token
        self.retry = retry
        self.stop = stop
        self.clock = clock
        self.notices = Notices(log)
        self.http = httpx.Client(
            base_url=self.base_url, timeout=timeout_s, transport=transport, verify=client_tls()
        )

    def close(self) -> None:
        self.http.close()

    @property
    def node_id(self) -> str:
        if self.identity is None:
            raise CoordinatorError(0, "no_identity", "this client has no identity to sign with")
        return self.identity.node_id

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: BaseModel | dict | None = None,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
        admin: bool = False,
        signed: bool = True,
    ) -> httpx.Response:
        """One call, retried; returns the 2xx response or raises CoordinatorError."""
        if json_body is not None:
            payload = json_body.model_dump(mode="json") if isinstance(json_body, BaseModel) else json_body
            body = json.dumps(payload, separators=(",", ":")).encode()
            content_type = "application/json"
        else:
            body = content or b""
            content_type = "application/octet-stream"
        query = {k: v for k, v in (params or {}).items() if v is not None}
        target = f"{path}?{urlencode(query)}" if query else path
        base_headers = {"content-type": content_type} if body or json_body is not None else {}

        def attempt() -> httpx.Response:
            headers = {**base_headers, **self._credentials(method, target, body, admin=admin, signed=signed)}
            try:
                response = self.http.request(method, target, content=body, headers=headers)
            except httpx.TransportError as exc:
                raise CoordinatorError(
                    0,
                    "unreachable",
                    f"cannot reach the coordinator at {self.base_url}: {type(exc).__name__}: {exc}",
                ) from exc
            if response.status_code >= 400:
                raise error_from(response)
            return response

        return call_with_retries(
            attempt,
            retry_on=retryable,
            what=f"coordinator {method} {path}",
            policy=self.retry,
            stop=self.stop,
            wait_hint=retry_after,
            notices=self.notices,
            kind_of=failure_kind,
        )

    def _credentials(
        self, method: str, target: str, body: bytes, *, admin: bool, signed: bool
    ) -> dict[str, str]:
        if admin:
            if not self.admin_token:
                raise CoordinatorError(0, "no_admin_token", "this client has no admin token")
            return {"authorization": f"Bearer {self.admin_token}"}
        if not signed:
            return {}
        if self.identity is None:
            raise CoordinatorError(0, "no_identity", "this client has no identity to sign with")
        return sign_request(self.identity, method, target, body, now=self.clock())

    def call(self, model: type[Model], method: str, path: str, **kwargs: Any) -> Model:
        """A call whose JSON answer is validated as `model`."""
        response = self.request(method, path, **kwargs)
        try:
            return TypeAdapter(model).validate_python(response.json())
        except (ValueError, ValidationError) as exc:
            raise CoordinatorError(response.status_code, "bad_response", f"unexpected answer: {exc}") from exc


def error_from(response: httpx.Response) -> CoordinatorError:
    """The coordinator's `{"error", "detail"}` answer (and its Retry-After) as a CoordinatorError."""
    try:
        body = response.json()
        error = CoordinatorError(response.status_code, str(body["error"]), str(body.get("detail", "")))
    except (ValueError, KeyError, TypeError):
        error = CoordinatorError(response.status_code, "http_error", response.text[:500])
    error.retry_after_s = _seconds(response.headers.get("retry-after"))
    return error


def _seconds(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not used by swarmrl's servers: ignored)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None
