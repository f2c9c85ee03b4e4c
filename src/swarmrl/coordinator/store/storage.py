"""Where uploaded rollout files live: one small interface; a local directory (default) or an S3-compatible bucket
that nodes upload to directly with presigned URLs (at scale, the coordinator never carries the bytes)."""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

_KEY_PART = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class StorageError(Exception):
    """A storage key is malformed or names no object."""


def validate_key(key: str) -> list[str]:
    parts = key.split("/")
    for part in parts:
        if not _KEY_PART.match(part) or part in (".", ".."):
            raise StorageError(f"invalid storage key part {part!r} in {key!r}")
    return parts


class Storage(ABC):
    # Nodes put files straight into the store (`upload_url`), not through the coordinator.
    takes_direct_uploads = False

    @abstractmethod
    def put(self, key: str, source: Path) -> None:
        """Store the file at `source` under `key` (moving it when it can), atomically."""

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def path(self, key: str) -> Path:
        """A local path to the object's bytes (a cached copy for remote stores)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; an absent one is not an error."""

    @abstractmethod
    def staging_dir(self) -> Path:
        """Where uploads through the coordinator are written before `put` (same filesystem, so `put` moves)."""

    def upload_url(self, key: str, size_bytes: int, sha256: str) -> str | None:
        """A URL the node uploads to directly, or None: upload through the coordinator."""
        return None

    def size(self, key: str) -> int | None:
        """Size of a directly uploaded object, None when absent."""
        return None


class LocalStorage(Storage):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.staging = self.root / ".staging"
        self.staging.mkdir(exist_ok=True)

    def _resolve(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key))

    def staging_dir(self) -> Path:
        return self.staging

    def put(self, key: str, source: Path) -> None:
        target = self._resolve(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.move(str(source), tmp)
        os.replace(tmp, target)

    def get(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def delete(self, key: str) -> None:
        self._resolve(key).unlink(missing_ok=True)

    def path(self, key: str) -> Path:
        target = self._resolve(key)
        if not target.is_file():
            raise StorageError(f"no object {key!r}")
        return target


class S3Storage(Storage):
    """An S3-compatible bucket (AWS S3, MinIO, Ceph, ...). Nodes upload straight to it with a presigned PUT URL
    that binds the object's size and SHA-256 (the store refuses other bytes); the coordinator only checks the
    object is there with the declared size before it accepts the submission, and validators re-hash what they
    download. Reads go through a local cache, so the coordinator can serve files to validators."""

    takes_direct_uploads = True

    def __init__(
        self,
        bucket: str,
        cache_dir: str | Path,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        url_ttl_s: int = 900,
        client: Any = None,  # a boto3 S3 client (boto3 is untyped here); built from the settings when None
    ) -> None:
        import boto3  # optional dependency: the `s3` extra
        from botocore.config import Config

        self.bucket = bucket
        self.url_ttl_s = url_ttl_s
        # SigV4: the presigned URL then signs the size and checksum the node must send.
        self.client = client or boto3.client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=Config(signature_version="s3v4")
        )
        self.cache = LocalStorage(cache_dir)

    def staging_dir(self) -> Path:
        return self.cache.staging

    def put(self, key: str, source: Path) -> None:
        validate_key(key)
        self.client.upload_file(str(source), self.bucket, key)
        self.cache.put(key, source)

    def get(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def delete(self, key: str) -> None:
        validate_key(key)
        self.client.delete_object(Bucket=self.bucket, Key=key)
        self.cache.delete(key)

    def path(self, key: str) -> Path:
        try:
            return self.cache.path(key)
        except StorageError:
            pass
        from botocore.exceptions import ClientError

        staged = self.cache.staging / f"{secrets.token_hex(8)}.part"
        try:
            self.client.download_file(self.bucket, key, str(staged))
        except ClientError as exc:
            staged.unlink(missing_ok=True)
            raise StorageError(f"no object {key!r} in bucket {self.bucket!r}") from exc
        self.cache.put(key, staged)
        return self.cache.path(key)

    def upload_url(self, key: str, size_bytes: int, sha256: str) -> str | None:
        validate_key(key)
        return self.client.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ContentLength": size_bytes,
                "ChecksumSHA256": base64.b64encode(bytes.fromhex(sha256)).decode(),
            },
            ExpiresIn=self.url_ttl_s,
        )

    def size(self, key: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except ClientError:
            return None
