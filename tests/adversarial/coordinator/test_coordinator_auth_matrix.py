"""Forged, stale, replayed and misdirected requests against the real service, on SQLite and Postgres."""

import hashlib
import json
import time

import httpx
import pytest

from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient
from swarmrl.coordinator.signing import NODE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_request
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import POSTGRES_SKIP_REASON, coordinator_backend, postgres_available

ADMIN = "admin-secret"
CONFIG = CoordinatorConfig(clock_skew_s=30.0, requests_per_minute=20)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def service(request, tmp_path_factory):
    if request.param == "postgres" and not postgres_available():
        pytest.skip(POSTGRES_SKIP_REASON)
    with coordinator_backend(
        request.param, tmp_path_factory.mktemp(f"auth-{request.param}"), config=CONFIG, admin_token=ADMIN
    ) as process:
        trainer = Identity.generate()
        AdminClient.at(process.url, admin_token=ADMIN).create_run(
            "r", trainer.node_id, ContractSection(), bound_claims=False
        )
        yield process


def _signed(identity, method, path, payload=None, *, now=None):
    body = json.dumps(payload if payload is not None else {}).encode()
    headers = {"content-type": "application/json", **sign_request(identity, method, path, body, now=now)}
    return body, headers


def _send(url, method, path, body, headers):
    response = httpx.request(method, url + path, content=body, headers=headers, timeout=30)
    if response.status_code >= 400:
        payload = response.json()
        assert set(payload) == {"error", "detail"} and payload["detail"], payload
    return response


def _expect(response, status, kind):
    assert response.status_code == status, response.text
    assert response.json()["error"] == kind


def test_a_correctly_signed_request_is_accepted(service):
    identity = Identity.generate()
    body, headers = _signed(identity, "POST", "/v1/nodes/register", {"hardware": {"gpu": "H100"}})
    response = _send(service.url, "POST", "/v1/nodes/register", body, headers)
    assert response.status_code == 200 and response.json()["node_id"] == identity.node_id


def test_unsigned_request(service):
    _expect(
        _send(service.url, "POST", "/v1/nodes/register", b"{}", {"content-type": "application/json"}),
        401,
        "unsigned",
    )


def test_signature_by_another_key(service):
    victim, attacker = Identity.generate(), Identity.generate()
    body, headers = _signed(attacker, "POST", "/v1/nodes/register")
    headers[NODE_HEADER] = victim.node_id
    _expect(_send(service.url, "POST", "/v1/nodes/register", body, headers), 401, "bad_signature")


def test_replayed_nonce(service):
    identity = Identity.generate()
    body, headers = _signed(identity, "POST", "/v1/nodes/register")
    assert _send(service.url, "POST", "/v1/nodes/register", body, headers).status_code == 200
    _expect(_send(service.url, "POST", "/v1/nodes/register", body, headers), 401, "replayed_nonce")


@pytest.mark.parametrize("offset", [-3600.0, 31.0])
def test_expired_or_future_timestamp(service, offset):
    body, headers = _signed(Identity.generate(), "POST", "/v1/nodes/register", now=time.time() + offset)
    _expect(_send(service.url, "POST", "/v1/nodes/register", body, headers), 401, "expired")


def test_malformed_headers(service):
    body, headers = _signed(Identity.generate(), "POST", "/v1/nodes/register")
    for name, value in [(TIMESTAMP_HEADER, "yesterday"), (SIGNATURE_HEADER, "xyz"), (NODE_HEADER, "k" * 64)]:
        _expect(
            _send(service.url, "POST", "/v1/nodes/register", body, {**headers, name: value}),
            401,
            "malformed_signature",
        )


def test_body_and_path_are_bound_to_the_signature(service):
    identity = Identity.generate()
    body, headers = _signed(identity, "POST", "/v1/nodes/register", {"hardware": {"gpu": "A100"}})
    forged_body = json.dumps({"hardware": {"gpu": "8xH100"}}).encode()
    _expect(_send(service.url, "POST", "/v1/nodes/register", forged_body, headers), 401, "bad_signature")
    body, headers = _signed(identity, "POST", "/v1/runs/r/join")
    _expect(_send(service.url, "POST", "/v1/runs/r/leave", body, headers), 401, "bad_signature")
    body, headers = _signed(identity, "GET", "/v1/runs/r/seed?step=0&batch_index=0", None)
    _expect(
        _send(service.url, "GET", "/v1/runs/r/seed?step=0&batch_index=1", body, headers), 401, "bad_signature"
    )


def test_banned_node_is_refused_everywhere(service):
    identity = Identity.generate()
    node = NodeClient.at(service.url, identity, retry=NO_RETRY)
    node.register()
    node.join("r", ContractSection())
    AdminClient.at(service.url, admin_token=ADMIN).ban(identity.node_id, "sybil")
    for method, path in [
        ("POST", "/v1/runs/r/heartbeat"),
        ("POST", "/v1/nodes/register"),
        ("POST", "/v1/runs/r/join"),
    ]:
        body, headers = _signed(identity, method, path)
        _expect(_send(service.url, method, path, body, headers), 403, "banned")


def test_admin_endpoints_need_the_right_bearer_token(service):
    run = {
        "run_id": "admin-test",
        "trainer_public_key": "ab" * 32,
        "contract": ContractSection().model_dump(),
    }
    payload = json.dumps(run).encode()
    base = {"content-type": "application/json"}
    _expect(_send(service.url, "POST", "/v1/admin/runs", payload, base), 401, "admin_token_required")
    _expect(
        _send(service.url, "POST", "/v1/admin/runs", payload, {**base, "authorization": "Bearer wrong"}),
        403,
        "admin_token_invalid",
    )
    _expect(
        _send(service.url, "POST", "/v1/admin/runs", payload, {**base, "authorization": f"Basic {ADMIN}"}),
        403,
        "admin_token_invalid",
    )
    body, headers = _signed(
        Identity.generate(),
        "POST",
        "/v1/admin/runs",
        run,
    )
    _expect(_send(service.url, "POST", "/v1/admin/runs", body, headers), 401, "admin_token_required")
    ok = _send(service.url, "POST", "/v1/admin/runs", payload, {**base, "authorization": f"Bearer {ADMIN}"})
    assert ok.status_code == 201 and ok.json()["run_id"] == "admin-test"


def test_node_only_endpoints_refuse_the_admin(service):
    response = _send(
        service.url,
        "POST",
        "/v1/nodes/register",
        b"{}",
        {"content-type": "application/json", "authorization": f"Bearer {ADMIN}"},
    )
    _expect(response, 403, "node_required")


def test_per_node_request_rate_limit(service):
    identity = Identity.generate()
    statuses = []
    for _ in range(CONFIG.requests_per_minute + 3):
        body, headers = _signed(identity, "POST", "/v1/nodes/register")
        statuses.append(_send(service.url, "POST", "/v1/nodes/register", body, headers).status_code)
    assert statuses.count(429) >= 2 and statuses[0] == 200
    body, headers = _signed(Identity.generate(), "POST", "/v1/nodes/register")
    assert _send(service.url, "POST", "/v1/nodes/register", body, headers).status_code == 200


def test_upload_signature_covers_the_file_bytes(service):
    identity = Identity.generate()
    node = NodeClient.at(service.url, identity, retry=NO_RETRY)
    node.register()
    node.join("r", ContractSection())
    data = b"rollout" * 10
    unit = node.lease_work("r", max_units=1).units[0]
    slot = node.request_upload("r", 0, unit.batch_index, hashlib.sha256(data).hexdigest(), len(data))
    headers = sign_request(identity, "PUT", slot.upload_path, b"something else" * 5)
    _expect(_send(service.url, "PUT", slot.upload_path, data, headers), 401, "bad_signature")
    thief = Identity.generate()
    headers = sign_request(thief, "PUT", slot.upload_path, data)
    _expect(_send(service.url, "PUT", slot.upload_path, data, headers), 404, "unknown_slot")
    _expect(_send(service.url, "PUT", slot.upload_path, data, {}), 401, "unsigned")
    node.upload(slot, data)


def test_oversized_json_bodies_are_refused_before_parsing(service):
    big = b'{"hardware": {"x": "' + b"a" * (CONFIG.max_request_body_bytes + 10) + b'"}}'
    body, headers = _signed(Identity.generate(), "POST", "/v1/nodes/register")
    _expect(_send(service.url, "POST", "/v1/nodes/register", big, headers), 413, "too_large")

    def chunks():  # no Content-Length: the limit must hold on the streamed bytes too
        for _ in range(CONFIG.max_request_body_bytes // 65536 + 2):
            yield b"a" * 65536

    response = httpx.post(f"{service.url}/v1/nodes/register", content=chunks(), headers=headers, timeout=30)
    _expect(response, 413, "too_large")


def test_unknown_routes_and_methods_answer_json(service):
    _expect(_send(service.url, "GET", "/v1/nothing-here", b"", {}), 404, "not_found")
    _expect(_send(service.url, "DELETE", "/v1/runs/r", b"", {}), 405, "method_not_allowed")
