"""Uploads straight to an S3-compatible store by presigned URL (moto's S3 server on 127.0.0.1)."""

import base64
import hashlib

import boto3
import httpx
import pytest
from botocore.config import Config

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.client import AdminClient, NodeClient, ValidatorClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.server.app import create_app
from swarmrl.coordinator.store.storage import S3Storage
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import serve_in_thread

ADMIN = "admin-secret"


@pytest.fixture
def s3(monkeypatch):
    # Imported here, not at collection: moto's server takes ~0.7 s to import, on every test worker.
    from moto.server import ThreadedMotoServer

    for name, value in (
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", config=Config(signature_version="s3v4")
    )
    client.create_bucket(Bucket="rollouts")
    try:
        yield url, client
    finally:
        server.stop()


@pytest.fixture
def swarm(s3, tmp_path):
    url, client = s3
    storage = S3Storage("rollouts", tmp_path / "cache", endpoint_url=url, client=client)
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=storage, admin_token=ADMIN)
    server = serve_in_thread(app)
    admin = AdminClient.at(server.url, admin_token=ADMIN, retry=NO_RETRY)
    trainer = Identity.generate()
    validator = ValidatorClient.at(server.url, Identity.generate(), retry=NO_RETRY)
    worker = NodeClient.at(server.url, Identity.generate(), retry=NO_RETRY)
    admin.create_run("s3-run", trainer.node_id, ContractSection(), bound_claims=False)
    admin.add_validator("s3-run", validator.node_id)
    worker.register({})
    worker.join("s3-run", ContractSection())
    try:
        yield worker, validator, client
    finally:
        server.stop()


def test_worker_uploads_to_the_bucket_and_the_validator_reads_it_back(swarm):
    worker, validator, s3 = swarm
    data = b"PAR1 rollout bytes" * 50
    sha = hashlib.sha256(data).hexdigest()
    unit = worker.lease_work("s3-run", max_units=1).units[0]
    slot = worker.request_upload("s3-run", 0, unit.batch_index, sha, len(data))
    assert slot.upload_url is not None and "X-Amz-Signature" in slot.upload_url
    worker.upload(slot, data)
    key = f"runs/s3-run/step_0/{worker.node_id}/{sha}-{slot.slot_id}.parquet"
    stored = s3.get_object(Bucket="rollouts", Key=key)
    assert stored["Body"].read() == data  # the bytes went to the store, not through the coordinator
    submission = worker.submit("s3-run", slot.slot_id, sha, 0, rows=8, tokens=64)
    assert submission.status == "pending"
    assert validator.fetch_submission(validator.pending_submissions("s3-run")[0]) == data


def test_a_node_sending_file_and_submission_in_one_request_is_sent_to_the_bucket_and_remembers(swarm):
    worker, validator, s3 = swarm
    sent = []
    worker.transport.http.event_hooks["request"].append(lambda request: sent.append(request.url.path))
    files = [b"first rollout" * 40, b"second rollout" * 40]
    for data in files:
        unit = worker.lease_work("s3-run", max_units=1).units[0]
        worker.upload_and_submit("s3-run", 0, unit.batch_index, data, rows=8, tokens=64)
    one_request = "/v1/uploads/runs/s3-run/submissions"
    assert sent.count(one_request) == 1 and sent[1] == one_request  # refused (direct_upload) once, not again
    assert sent.count("/v1/runs/s3-run/uploads") == 2 and sent.count("/v1/runs/s3-run/submissions") == 2
    stored = s3.list_objects_v2(Bucket="rollouts", Prefix=f"runs/s3-run/step_0/{worker.node_id}/")
    assert stored["KeyCount"] == 2  # the bytes went to the store, not through the coordinator
    pending = validator.pending_submissions("s3-run")
    assert sorted(validator.fetch_submission(s) for s in pending) == sorted(files)


def test_submit_before_the_upload_is_refused_and_other_bytes_never_pass_as_the_claimed_file(swarm):
    worker, validator, _ = swarm
    data = b"honest rollout file" * 20
    sha = hashlib.sha256(data).hexdigest()
    unit = worker.lease_work("s3-run", max_units=1).units[0]
    slot = worker.request_upload("s3-run", 0, unit.batch_index, sha, len(data))
    with pytest.raises(CoordinatorError) as refused:
        worker.submit("s3-run", slot.slot_id, sha, 0, rows=8, tokens=64)
    assert refused.value.kind == "not_uploaded"
    # Real S3 refuses bytes that do not match the checksum the presigned URL binds; moto stores them anyway,
    # which is the case the validator's own re-hash exists for: the file can never be read as the claimed one.
    _put_raw(slot.upload_url, b"x" * len(data), sha)
    submission = worker.submit("s3-run", slot.slot_id, sha, 0, rows=8, tokens=64)
    with pytest.raises(CoordinatorError) as refused:
        validator.fetch_submission(submission)
    assert refused.value.kind == "sha256_mismatch"


def _put_raw(url: str, data: bytes, claimed_sha: str):
    """A cheater sends other bytes under the checksum it declared for the slot."""
    response = httpx.put(
        url,
        content=data,
        headers={"x-amz-checksum-sha256": base64.b64encode(bytes.fromhex(claimed_sha)).decode()},
    )
    assert response.status_code < 300, response.text
