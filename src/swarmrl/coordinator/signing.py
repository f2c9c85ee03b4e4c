"""Request signatures: the canonical message both sides build, and the headers that carry it.

A node signs `METHOD \n path?query \n sha256(body) \n timestamp \n nonce`. Binding the query string and the body
hash means a captured request cannot be re-aimed at another resource or carry another payload; the timestamp
bounds how long it is worth replaying, and the nonce (remembered by the server for that long) stops replays
inside the window.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from swarmrl.identity import PUBLIC_KEY_HEX_LEN, SIGNATURE_HEX_LEN, Identity, SignatureError, verify

NODE_HEADER = "x-swarmrl-node"
TIMESTAMP_HEADER = "x-swarmrl-timestamp"
NONCE_HEADER = "x-swarmrl-nonce"
SIGNATURE_HEADER = "x-swarmrl-signature"
SIGNED_HEADERS = (NODE_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)

NONCE_MIN_LEN = 16
NONCE_MAX_LEN = 64
_HEX = set("0123456789abcdef")


class RequestSignatureError(Exception):
    """The signature headers are missing, malformed, stale, or do not verify; `kind` names which."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class SignedHeaders:
    node_id: str
    timestamp: float
    nonce: str
    signature: str


def canonical_message(method: str, target: str, body_sha256: str, timestamp: str, nonce: str) -> bytes:
    """`target` is the path, plus `?query` exactly as sent when there is one."""
    return "\n".join((method.upper(), target, body_sha256, timestamp, nonce)).encode()


def sign_request(
    identity: Identity, method: str, target: str, body: bytes, *, now: float | None = None
) -> dict:
    timestamp = f"{time.time() if now is None else now:.6f}"
    nonce = secrets.token_hex(16)
    message = canonical_message(method, target, hashlib.sha256(body).hexdigest(), timestamp, nonce)
    return {
        NODE_HEADER: identity.node_id,
        TIMESTAMP_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: identity.sign_hex(message),
    }


def parse_signed_headers(headers: dict[str, str]) -> SignedHeaders:
    """Shape checks only; `headers` keys are lower-case."""
    missing = [name for name in SIGNED_HEADERS if not headers.get(name)]
    if missing:
        raise RequestSignatureError("unsigned", f"missing headers: {', '.join(missing)}")
    node_id = headers[NODE_HEADER].lower()
    if len(node_id) != PUBLIC_KEY_HEX_LEN or not set(node_id) <= _HEX:
        raise RequestSignatureError(
            "malformed_signature", f"{NODE_HEADER} must be {PUBLIC_KEY_HEX_LEN} hex chars"
        )
    try:
        timestamp = float(headers[TIMESTAMP_HEADER])
    except ValueError as exc:
        raise RequestSignatureError("malformed_signature", f"{TIMESTAMP_HEADER} is not a number") from exc
    if timestamp != timestamp or timestamp in (float("inf"), float("-inf")):
        raise RequestSignatureError("malformed_signature", f"{TIMESTAMP_HEADER} is not finite")
    nonce = headers[NONCE_HEADER]
    if not NONCE_MIN_LEN <= len(nonce) <= NONCE_MAX_LEN or not set(nonce) <= _HEX:
        raise RequestSignatureError(
            "malformed_signature",
            f"{NONCE_HEADER} must be {NONCE_MIN_LEN}-{NONCE_MAX_LEN} lower-case hex chars",
        )
    signature = headers[SIGNATURE_HEADER]
    if len(signature) != SIGNATURE_HEX_LEN:
        raise RequestSignatureError(
            "malformed_signature", f"{SIGNATURE_HEADER} must be {SIGNATURE_HEX_LEN} hex chars"
        )
    return SignedHeaders(node_id, timestamp, nonce, signature)


def verify_request(
    headers: dict[str, str],
    method: str,
    target: str,
    body_sha256: str,
    *,
    now: float,
    max_skew_s: float,
) -> SignedHeaders:
    """Everything a single request proves on its own; the nonce's freshness is the caller's (stateful) job."""
    signed = parse_signed_headers(headers)
    if abs(now - signed.timestamp) > max_skew_s:
        raise RequestSignatureError(
            "expired", f"timestamp is {now - signed.timestamp:+.1f}s from server time (window ±{max_skew_s}s)"
        )
    message = canonical_message(method, target, body_sha256, headers[TIMESTAMP_HEADER], signed.nonce)
    try:
        verify(signed.node_id, message, signed.signature)
    except (SignatureError, ValueError) as exc:
        raise RequestSignatureError(
            "bad_signature", f"signature does not verify for this node: {exc}"
        ) from exc
    return signed
