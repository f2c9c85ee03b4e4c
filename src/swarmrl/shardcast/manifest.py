"""The signed checkpoint manifest: what a version contains, shard by shard, and who vouches for it.

Clients trust only the trainer's public key: a relay can hand out a manifest but cannot forge one, and a
manifest for another version than the one asked for (a replay of an older, genuinely signed one) is refused.
"""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarmrl.configs.shardcast import HashAlgorithm
from swarmrl.identity import Identity, SignatureError, verify
from swarmrl.shardcast.errors import ManifestError
from swarmrl.shardcast.fsutil import is_safe_relative_path
from swarmrl.shardcast.layout import DELTA_DIR, is_metadata_path

MANIFEST_FORMAT: Final = 1
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
MAX_FILES = 100_000
DELTA_CODEC: Final = "xor-shuffle4-zstd"

HexDigest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileEntry(_Strict):
    path: str = Field(description="relative POSIX path inside the version directory")
    size: int = Field(ge=0, description="bytes")
    digest: HexDigest = Field(description="digest of the whole file (manifest.hash_algorithm)")


class ShardEntry(_Strict):
    index: int = Field(ge=0, description="unique across the manifest (full shards first, then delta shards)")
    path: str = Field(description="file the shard is a byte range of")
    offset: int = Field(ge=0)
    length: int = Field(ge=1)
    digest: HexDigest


class DeltaEntry(_Strict):
    path: str = Field(description="checkpoint file this payload rebuilds")
    parent_digest: HexDigest | None = Field(
        description="the parent's file it is xored against; None: no parent"
    )
    payload_path: str = Field(description="relative path of the compressed payload")
    payload_size: int = Field(ge=0)
    payload_digest: HexDigest


class DeltaInfo(_Strict):
    parent_version: int = Field(ge=0)
    codec: Literal["xor-shuffle4-zstd"] = DELTA_CODEC
    chunk_size: int = Field(ge=4, description="bytes of the target file per independently coded chunk")
    entries: list[DeltaEntry]
    shards: list[ShardEntry]


class Manifest(_Strict):
    format: Literal[1] = MANIFEST_FORMAT
    run_id: str = Field(min_length=1, max_length=256)
    version: int = Field(ge=0, description="the trainer step")
    created_at: float = Field(description="unix seconds at publish time")
    hash_algorithm: HashAlgorithm = Field(description="digest of every file, shard and payload")
    shard_size: int = Field(ge=1)
    total_size: int = Field(ge=0, description="sum of the checkpoint file sizes")
    files: list[FileEntry]
    shards: list[ShardEntry]
    delta: DeltaInfo | None = None

    @property
    def parent_version(self) -> int | None:
        return self.delta.parent_version if self.delta else None

    @property
    def all_shards(self) -> list[ShardEntry]:
        return self.shards + (self.delta.shards if self.delta else [])

    @property
    def file_by_path(self) -> dict[str, FileEntry]:
        return {entry.path: entry for entry in self.files}

    @model_validator(mode="after")
    def _check_consistency(self) -> Manifest:
        if len(self.files) > MAX_FILES:
            raise ValueError(f"{len(self.files)} files, more than {MAX_FILES}")
        paths = [entry.path for entry in self.files]
        _check_paths(paths, what="file")
        if any(is_metadata_path(path) for path in paths):
            raise ValueError("a checkpoint file may not live under the shardcast metadata directory")
        if self.total_size != sum(entry.size for entry in self.files):
            raise ValueError("total_size is not the sum of the file sizes")
        _check_tiling(self.shards, {e.path: e.size for e in self.files}, self.shard_size, first_index=0)
        if self.delta is not None:
            if self.delta.parent_version >= self.version:
                raise ValueError("a delta's parent must be an older version")
            if sorted(e.path for e in self.delta.entries) != sorted(paths):
                raise ValueError("delta entries must name exactly the checkpoint files")
            payloads = [e.payload_path for e in self.delta.entries]
            _check_paths(payloads, what="payload")
            if not all(p.startswith(DELTA_DIR + "/") for p in payloads):
                raise ValueError(f"delta payloads must live under {DELTA_DIR}/")
            _check_tiling(
                self.delta.shards,
                {e.payload_path: e.payload_size for e in self.delta.entries},
                self.shard_size,
                first_index=len(self.shards),
            )
        return self


def _check_paths(paths: list[str], what: str) -> None:
    for path in paths:
        if not is_safe_relative_path(path):
            raise ValueError(f"unsafe {what} path {path!r}")
    if len(set(paths)) != len(paths):
        raise ValueError(f"duplicate {what} paths")
    # A file and a directory of the same name cannot both exist on disk.
    as_set = set(paths)
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in as_set:
                raise ValueError(f"{what} path {path!r} nests inside another {what}")


def _check_tiling(shards: list[ShardEntry], sizes: dict[str, int], shard_size: int, first_index: int) -> None:
    """Shards must cover every byte of every file exactly once, in order, indices consecutive."""
    if [s.index for s in shards] != list(range(first_index, first_index + len(shards))):
        raise ValueError("shard indices must be consecutive")
    cursor = {path: 0 for path in sizes}
    for shard in shards:
        if shard.path not in sizes:
            raise ValueError(f"shard {shard.index} names unknown file {shard.path!r}")
        if shard.length > shard_size:
            raise ValueError(f"shard {shard.index} is longer than shard_size")
        if shard.offset != cursor[shard.path]:
            raise ValueError(f"shard {shard.index} leaves a gap or overlaps in {shard.path!r}")
        cursor[shard.path] += shard.length
    for path, size in sizes.items():
        if cursor[path] != size:
            raise ValueError(f"shards do not cover {path!r} exactly ({cursor[path]} of {size} bytes)")


class SignedManifest(_Strict):
    manifest: Manifest
    signer: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex Ed25519 public key of the trainer")
    signature: str = Field(pattern=r"^[0-9a-f]{128}$", description="hex signature over canonical_bytes")

    def to_bytes(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()


def canonical_bytes(manifest: Manifest) -> bytes:
    """The exact bytes signed: sorted keys, no whitespace, ASCII only, so any verifier rebuilds them."""
    body = json.dumps(
        manifest.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return b"swarmrl-shardcast-manifest-v1\n" + body.encode("ascii")


def sign_manifest(manifest: Manifest, identity: Identity) -> SignedManifest:
    return SignedManifest(
        manifest=manifest, signer=identity.node_id, signature=identity.sign_hex(canonical_bytes(manifest))
    )


def parse_signed_manifest(
    raw: bytes,
    trainer_public_key: str,
    expected_version: int | None = None,
    min_version: int | None = None,
    expected_run_id: str | None = None,
) -> Manifest:
    """Parse untrusted manifest bytes; return the manifest only if the trainer signed it and it is fresh.

    `expected_version`: the version the caller asked for (anything else is a replay or a mix-up).
    `min_version`: the newest version the caller already holds; an older manifest is a replay.
    """
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest is {len(raw)} bytes, more than {MAX_MANIFEST_BYTES}")
    try:
        signed = SignedManifest.model_validate_json(raw)
    except ValidationError as exc:
        raise ManifestError(f"malformed manifest: {_first_error(exc)}") from exc
    if signed.signer != trainer_public_key.lower():
        raise ManifestError(f"manifest signed by {signed.signer[:16]}…, not the trainer key")
    try:
        verify(trainer_public_key.lower(), canonical_bytes(signed.manifest), signed.signature)
    except SignatureError as exc:
        raise ManifestError(f"forged manifest for version {signed.manifest.version}: {exc}") from exc
    manifest = signed.manifest
    if expected_version is not None and manifest.version != expected_version:
        raise ManifestError(f"asked for version {expected_version}, got a manifest for {manifest.version}")
    if min_version is not None and manifest.version < min_version:
        raise ManifestError(f"replayed manifest: version {manifest.version} is older than {min_version}")
    if expected_run_id is not None and manifest.run_id != expected_run_id:
        raise ManifestError(f"manifest belongs to run {manifest.run_id!r}, not {expected_run_id!r}")
    return manifest


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid"))
