"""The coordinator clients over one signed transport: signatures, retries through the one retry helper
(jittered back-off that honours Retry-After, said once), typed refusals, a client per kind of caller."""

import hashlib
import json
import logging

import httpx
import pytest
from polling import RecordedWaits

from swarmrl.configs import ConfigError
from swarmrl.coordinator.api import SubmissionInfo
from swarmrl.coordinator.cli import load_config
from swarmrl.coordinator.client import AdminClient, NodeClient, PublicReads
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.signing import NONCE_HEADER, verify_request
from swarmrl.identity import Identity
from swarmrl.retry import RetryPolicy

HEARTBEAT_ACK = {"current_step": 3, "async_level": 2, "min_policy_step": 1, "next_heartbeat_s": 10.0}
FAST = RetryPolicy(attempts=5, deadline_seconds=60.0, initial_seconds=0.001, max_seconds=0.002)


def _client(handler, retry=FAST, stop=None, role=NodeClient):
    return role.at(
        "http://coordinator.test",
        Identity.from_seed(b"\x05" * 32),
        transport=httpx.MockTransport(handler),
        retry=retry,
        stop=stop,
    )


def test_requests_are_signed_over_the_exact_target_and_body():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        signed = verify_request(
            headers,
            request.method,
            request.url.raw_path.decode(),
            hashlib.sha256(request.content).hexdigest(),
            now=float(headers["x-swarmrl-timestamp"]),
            max_skew_s=1.0,
        )
        seen.append((signed.node_id, request.url.raw_path.decode(), json.loads(request.content or b"null")))
        if request.url.path.endswith("/seed"):
            return httpx.Response(
                200, json={"run_id": "r", "node_id": "n", "step": 2, "batch_index": 5, "seed": 42}
            )
        return httpx.Response(200, json=HEARTBEAT_ACK)

    client = _client(handler)
    assert client.heartbeat("r", policy_step=1).min_policy_step == 1
    assert client.task_seed("r", 2, 5) == 42
    assert seen == [
        (client.node_id, "/v1/runs/r/heartbeat", {"policy_step": 1}),
        (client.node_id, "/v1/runs/r/seed?step=2&batch_index=5", None),
    ]


def test_5xx_and_connection_errors_are_retried_with_a_fresh_nonce():
    nonces = []

    def handler(request: httpx.Request) -> httpx.Response:
        nonces.append(request.headers[NONCE_HEADER])
        if len(nonces) == 1:
            raise httpx.ConnectError("refused")
        if len(nonces) == 2:
            return httpx.Response(503, json={"error": "database_unavailable", "detail": "busy"})
        return httpx.Response(200, json=HEARTBEAT_ACK)

    assert _client(handler).heartbeat("r").current_step == 3
    assert len(nonces) == 3 and len(set(nonces)) == 3


def test_retries_are_bounded():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("refused")

    with pytest.raises(CoordinatorError) as info:
        _client(handler, retry=RetryPolicy(attempts=3, initial_seconds=0.001, max_seconds=0.001)).heartbeat(
            "r"
        )
    assert (info.value.status, info.value.kind, len(calls)) == (0, "unreachable", 3)


def test_4xx_is_not_retried_and_carries_the_error_kind():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(403, json={"error": "banned", "detail": "this node is banned"})

    with pytest.raises(CoordinatorError) as info:
        _client(handler).heartbeat("r")
    assert (info.value.status, info.value.kind, info.value.detail, len(calls)) == (
        403,
        "banned",
        "this node is banned",
        1,
    )


def test_non_json_errors_and_bad_answers_are_typed():
    client = _client(lambda request: httpx.Response(418, text="teapot"))
    with pytest.raises(CoordinatorError, match="418 http_error"):
        client.heartbeat("r")
    client = _client(lambda request: httpx.Response(200, json={"unexpected": True}))
    with pytest.raises(CoordinatorError, match="bad_response"):
        client.heartbeat("r")


def test_fetched_files_are_checked_against_the_recorded_hash():
    client = _client(lambda request: httpx.Response(200, content=b"tampered"))
    info = SubmissionInfo(
        id=1,
        run_id="r",
        node_id="n",
        step=0,
        sha256="00" * 32,
        size_bytes=8,
        rows=1,
        tokens=1,
        status="pending",
        submitted_at=0.0,
        file_path="/v1/submissions/1/file",
    )
    with pytest.raises(CoordinatorError, match="sha256_mismatch"):
        client.fetch_submission(info)


def test_admin_calls_need_a_token_and_send_it_as_bearer():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer tok"
        return httpx.Response(200, json={"ok": True})

    assert (
        AdminClient.at("http://c.test", admin_token="tok", transport=httpx.MockTransport(handler))
        .ban("ab" * 32)
        .ok
    )
    with pytest.raises(CoordinatorError, match="no_admin_token"):
        _client(handler, role=AdminClient).ban("ab" * 32)


def test_cli_config_reads_a_coordinator_table_or_top_level_fields(tmp_path):
    run_config = tmp_path / "run.toml"
    run_config.write_text(
        "[coordinator]\nheartbeat_interval_s = 2.0\n[coordinator.reject_severity]\ntoploc = 'soft'\n"
    )
    config = load_config(run_config)
    assert (config.heartbeat_interval_s, config.severity_of("toploc")) == (2.0, "soft")
    flat = tmp_path / "flat.toml"
    flat.write_text("dead_after_missed = 6\n")
    assert load_config(flat).dead_after_missed == 6
    assert load_config(None).heartbeat_interval_s == 10.0
    flat.write_text("no_such_field = 1\n")
    with pytest.raises(ConfigError, match="no_such_field"):
        load_config(flat)


def test_cli_config_takes_a_run_config_as_it_is(tmp_path):
    # The cross-machine recipe hands the coordinator the run's own TOML, which need not hold [coordinator].
    run_config = tmp_path / "run.toml"
    run_config.write_text("[run]\nname = 'R'\n[trainer]\nsteps = 3\n[contract]\ngroup_size = 4\n")
    assert load_config(run_config).heartbeat_interval_s == 10.0
    run_config.write_text("[run]\nname = 'R'\n[coordinator]\nheartbeat_interval_s = 3.0\n")
    assert load_config(run_config).heartbeat_interval_s == 3.0
    run_config.write_text("[run]\nname = 'R'\n[trainer]\nno_such_field = 1\n")
    with pytest.raises(ConfigError, match="no_such_field"):
        load_config(run_config)  # the whole run config is checked, not only its [coordinator] table


def _rate_limited_then_ok(refusals: int, retry_after: str | None = "7"):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers[NONCE_HEADER])
        if len(calls) <= refusals:
            headers = {} if retry_after is None else {"retry-after": retry_after}
            body = {"error": "upload_rate_limited", "detail": "at most 2 uploads per hour per node"}
            return httpx.Response(429, json=body, headers=headers)
        return httpx.Response(200, json=HEARTBEAT_ACK)

    return handler, calls


def test_a_rate_limited_call_waits_as_long_as_retry_after_says():
    handler, calls = _rate_limited_then_ok(refusals=2)
    waits = RecordedWaits()
    assert _client(handler, stop=waits).heartbeat("r").current_step == 3
    assert len(calls) == 3 and len(set(calls)) == 3  # signed afresh each time
    assert waits.waits and all(wait >= 7.0 for wait in waits.waits)


def test_without_retry_after_the_waits_are_jittered_and_capped():
    handler, _ = _rate_limited_then_ok(refusals=4, retry_after=None)
    waits = RecordedWaits()
    policy = RetryPolicy(attempts=6, initial_seconds=0.5, max_seconds=2.0)
    assert _client(handler, retry=policy, stop=waits).heartbeat("r").current_step == 3
    assert len(waits.waits) == 4 and all(0 <= w <= min(2.0, 0.5 * 2**n) for n, w in enumerate(waits.waits))
    assert len(set(waits.waits)) == 4  # drawn, not a fixed schedule every node would share


def test_a_rate_limited_node_says_so_once(caplog):
    refused = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        refused["n"] += 1
        if refused["n"] % 3:  # two refusals, then an answer, over and over
            return httpx.Response(429, json={"error": "rate_limited", "detail": "slow down"})
        return httpx.Response(200, json=HEARTBEAT_ACK)

    client = _client(handler, stop=RecordedWaits())
    with caplog.at_level(logging.DEBUG, logger="swarmrl"):
        client.heartbeat("r")  # 2 refusals, then it clears
        for _ in range(20):
            client.heartbeat("r")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # not once per refusal (42)
    assert "429" in warnings[0].getMessage() and "said once" in warnings[0].getMessage()
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 42  # the rest at debug level


def test_public_reads_are_unsigned_and_every_role_can_read():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(NONCE_HEADER in request.headers)
        return httpx.Response(200, json=[])

    assert PublicReads.at("http://c.test", transport=httpx.MockTransport(handler)).runs() == []
    assert _client(handler).reads.runs() == []
    assert seen == [False, False]
