import hashlib

import pytest

from swarmrl.coordinator.signing import (
    NODE_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    RequestSignatureError,
    canonical_message,
    sign_request,
    verify_request,
)
from swarmrl.identity import Identity

NOW = 1_700_000_000.0
BODY = b'{"hardware":{}}'
BODY_SHA = hashlib.sha256(BODY).hexdigest()


def _verify(headers, method="POST", target="/v1/nodes/register", body_sha=BODY_SHA, now=NOW, skew=30.0):
    return verify_request(headers, method, target, body_sha, now=now, max_skew_s=skew)


def test_canonical_message_layout():
    assert (
        canonical_message("post", "/a?b=1", "ff", "12.5", "00" * 8) == b"POST\n/a?b=1\nff\n12.5\n" + b"00" * 8
    )


def test_signed_request_verifies_and_names_the_node():
    identity = Identity.from_seed(bytes(32))
    headers = sign_request(identity, "POST", "/v1/nodes/register", BODY, now=NOW)
    signed = _verify(headers)
    assert signed.node_id == identity.node_id
    assert signed.timestamp == NOW
    assert headers[NONCE_HEADER] != sign_request(identity, "POST", "/x", BODY, now=NOW)[NONCE_HEADER]


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (lambda h: h.pop(SIGNATURE_HEADER), "unsigned"),
        (lambda h: h.pop(NODE_HEADER), "unsigned"),
        (lambda h: h.update({NODE_HEADER: "zz" * 32}), "malformed_signature"),
        (lambda h: h.update({TIMESTAMP_HEADER: "soon"}), "malformed_signature"),
        (lambda h: h.update({TIMESTAMP_HEADER: "nan"}), "malformed_signature"),
        (lambda h: h.update({NONCE_HEADER: "short"}), "malformed_signature"),
        (lambda h: h.update({SIGNATURE_HEADER: "ab"}), "malformed_signature"),
        (lambda h: h.update({SIGNATURE_HEADER: "00" * 64}), "bad_signature"),
        (lambda h: h.update({NODE_HEADER: Identity.from_seed(b"\x01" * 32).node_id}), "bad_signature"),
    ],
)
def test_tampered_headers_are_refused_by_kind(change, kind):
    headers = sign_request(Identity.from_seed(bytes(32)), "POST", "/v1/nodes/register", BODY, now=NOW)
    change(headers)
    with pytest.raises(RequestSignatureError) as info:
        _verify(headers)
    assert info.value.kind == kind


def test_signature_binds_method_path_and_body():
    headers = sign_request(Identity.generate(), "POST", "/v1/runs/a/join", BODY, now=NOW)
    for kwargs in (
        {"method": "PUT"},
        {"target": "/v1/runs/b/join"},
        {"body_sha": hashlib.sha256(b"{}").hexdigest()},
    ):
        with pytest.raises(RequestSignatureError, match="does not verify"):
            _verify(headers, **{"target": "/v1/runs/a/join", **kwargs})


@pytest.mark.parametrize("offset", [-31.0, 31.0, -1e9])
def test_timestamps_outside_the_skew_window_expire(offset):
    headers = sign_request(Identity.generate(), "POST", "/p", BODY, now=NOW + offset)
    with pytest.raises(RequestSignatureError) as info:
        _verify(headers, target="/p")
    assert info.value.kind == "expired"


def test_timestamp_at_the_edge_of_the_window_is_accepted():
    headers = sign_request(Identity.generate(), "POST", "/p", BODY, now=NOW - 29.9)
    _verify(headers, target="/p")
