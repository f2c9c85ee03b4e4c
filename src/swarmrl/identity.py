"""Ed25519 node identities: keys on disk, signatures, and the error every verifier raises.

Every signed thing in swarmrl (rollout files, checkpoint manifests, coordinator requests) goes through
this module so that there is exactly one way to name a key and check a signature.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swarmrl.errors import UserError, writing

PUBLIC_KEY_HEX_LEN = 64
SIGNATURE_HEX_LEN = 128


class SignatureError(Exception):
    """A signature or public key is malformed, or does not verify."""


class KeyFileError(SignatureError, UserError):
    """A key file is missing, unreadable or not an Ed25519 PEM private key."""


@dataclass(frozen=True)
class Identity:
    """A private Ed25519 key; `node_id` is the hex public key, the name every other node knows it by."""

    private_key: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """Deterministic key from 32 bytes; for tests and reproducible local swarms only."""
        if len(seed) != 32:
            raise SignatureError(f"an Ed25519 seed is 32 bytes, got {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def load(cls, path: str | Path) -> Identity:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KeyFileError(
                f"{path}: cannot read the key file ({exc.strerror}; `swarmrl keygen` makes one)"
            ) from exc
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"{path}: not an unencrypted PEM private key ({exc})") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"{path}: not an Ed25519 key (make one with `swarmrl keygen --out {path}`)")
        return cls(key)

    @classmethod
    def load_or_create(cls, path: str | Path) -> Identity:
        path = Path(path)
        if path.exists():
            return cls.load(path)
        identity = cls.generate()
        identity.save(path)
        return identity

    def save(self, path: str | Path) -> None:
        path = Path(path)
        pem = self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
            os.replace(tmp, path)

    @property
    def public_key_bytes(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @property
    def node_id(self) -> str:
        return self.public_key_bytes.hex()

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    def sign_hex(self, message: bytes) -> str:
        return self.sign(message).hex()


def public_key_from_hex(public_key_hex: str) -> Ed25519PublicKey:
    if not isinstance(public_key_hex, str) or len(public_key_hex) != PUBLIC_KEY_HEX_LEN:
        raise SignatureError(f"a public key is {PUBLIC_KEY_HEX_LEN} hex characters")
    try:
        raw = bytes.fromhex(public_key_hex)
    except ValueError as exc:
        raise SignatureError("public key is not hex") from exc
    return Ed25519PublicKey.from_public_bytes(raw)


def verify(public_key_hex: str, message: bytes, signature: bytes | str) -> None:
    """Raise SignatureError unless `signature` is the holder of `public_key_hex` signing `message`."""
    if isinstance(signature, str):
        if len(signature) != SIGNATURE_HEX_LEN:
            raise SignatureError(f"a signature is {SIGNATURE_HEX_LEN} hex characters")
        try:
            signature = bytes.fromhex(signature)
        except ValueError as exc:
            raise SignatureError("signature is not hex") from exc
    if len(signature) != 64:
        raise SignatureError("a signature is 64 bytes")
    try:
        public_key_from_hex(public_key_hex).verify(signature, message)
    except InvalidSignature as exc:
        raise SignatureError("signature does not verify") from exc
