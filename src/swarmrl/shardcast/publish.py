"""Turn a checkpoint directory into a published version: hash it, code the delta, sign, write the manifest."""

from __future__ import annotations

import os
import time
from pathlib import Path

from swarmrl.configs.shardcast import HashAlgorithm
from swarmrl.identity import Identity
from swarmrl.shardcast.delta import encode_delta
from swarmrl.shardcast.errors import ManifestError, ShardcastError
from swarmrl.shardcast.fsutil import atomic_write_bytes, resolve_inside, unique_temp_name
from swarmrl.shardcast.hashing import hash_file_and_shards
from swarmrl.shardcast.layout import delta_payload_path, list_checkpoint_files, manifest_path
from swarmrl.shardcast.manifest import (
    DeltaEntry,
    DeltaInfo,
    FileEntry,
    Manifest,
    ShardEntry,
    SignedManifest,
    parse_signed_manifest,
    sign_manifest,
)


def _hash_into_entries(
    root: Path, paths: list[str], shard_size: int, first_index: int, algorithm: HashAlgorithm
) -> tuple[list[FileEntry], list[ShardEntry]]:
    files, shards = [], []
    index = first_index
    for relative in paths:
        path = resolve_inside(root, relative)
        size = path.stat().st_size
        file_sha, shard_shas = hash_file_and_shards(path, shard_size, algorithm)
        files.append(FileEntry(path=relative, size=size, digest=file_sha))
        for number, shard_sha in enumerate(shard_shas):
            offset = number * shard_size
            length = min(shard_size, size - offset)
            shards.append(
                ShardEntry(index=index, path=relative, offset=offset, length=length, digest=shard_sha)
            )
            index += 1
    return files, shards


def _build_delta(
    checkpoint_dir: Path,
    files: list[FileEntry],
    parent_dir: Path,
    parent: Manifest,
    shard_size: int,
    first_index: int,
    chunk_size: int,
    zstd_level: int,
    algorithm: HashAlgorithm,
) -> DeltaInfo:
    parent_files = parent.file_by_path
    entries = []
    for entry in files:
        parent_entry = parent_files.get(entry.path)
        parent_path = resolve_inside(parent_dir, entry.path) if parent_entry else None
        if parent_path is not None and not parent_path.is_file():
            parent_entry = parent_path = None  # the trainer pruned it: code this file against zeros
        payload_rel = delta_payload_path(parent.version, entry.path)
        payload = resolve_inside(checkpoint_dir, payload_rel)
        payload.parent.mkdir(parents=True, exist_ok=True)
        tmp = unique_temp_name(payload)
        try:
            encode_delta(resolve_inside(checkpoint_dir, entry.path), parent_path, tmp, chunk_size, zstd_level)
            os.replace(tmp, payload)
        finally:
            tmp.unlink(missing_ok=True)
        entries.append((entry, parent_entry, payload_rel))
    payload_files, payload_shards = _hash_into_entries(
        checkpoint_dir, [rel for _, _, rel in entries], shard_size, first_index, algorithm
    )
    return DeltaInfo(
        parent_version=parent.version,
        chunk_size=chunk_size,
        entries=[
            DeltaEntry(
                path=entry.path,
                parent_digest=parent_entry.digest if parent_entry else None,
                payload_path=payload_file.path,
                payload_size=payload_file.size,
                payload_digest=payload_file.digest,
            )
            for (entry, parent_entry, _), payload_file in zip(entries, payload_files, strict=True)
        ],
        shards=payload_shards,
    )


def publish_checkpoint(
    checkpoint_dir: Path,
    version: int,
    identity: Identity,
    run_id: str,
    shard_size: int,
    parent_dir: Path | None = None,
    delta_chunk_size: int = 16 * 1024 * 1024,
    delta_zstd_level: int = 3,
    hash_algorithm: HashAlgorithm = "blake3",
) -> SignedManifest:
    """Hash `checkpoint_dir`, optionally code it as a delta against the published `parent_dir`, sign, and
    write the manifest to `<checkpoint_dir>/.shardcast/manifest.json` (atomically, last, so a directory with a
    manifest is always complete)."""
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        raise ShardcastError(f"checkpoint directory {checkpoint_dir} does not exist")
    paths = list_checkpoint_files(checkpoint_dir)
    if not paths:
        raise ShardcastError(f"checkpoint directory {checkpoint_dir} holds no files")
    files, shards = _hash_into_entries(checkpoint_dir, paths, shard_size, 0, hash_algorithm)
    delta = None
    if parent_dir is not None:
        parent = read_local_manifest(parent_dir, identity.node_id)
        if parent.version >= version:
            raise ShardcastError(f"parent version {parent.version} is not older than {version}")
        delta = _build_delta(
            checkpoint_dir,
            files,
            parent_dir,
            parent,
            shard_size,
            len(shards),
            delta_chunk_size,
            delta_zstd_level,
            hash_algorithm,
        )
    manifest = Manifest(
        run_id=run_id,
        version=version,
        created_at=time.time(),
        hash_algorithm=hash_algorithm,
        shard_size=shard_size,
        total_size=sum(f.size for f in files),
        files=files,
        shards=shards,
        delta=delta,
    )
    signed = sign_manifest(manifest, identity)
    atomic_write_bytes(manifest_path(checkpoint_dir), signed.to_bytes(), fsync=True)
    return signed


def read_local_manifest(version_dir: Path, trainer_public_key: str, version: int | None = None) -> Manifest:
    """The verified manifest stored in a version directory (raises ManifestError if absent or bad)."""
    path = manifest_path(version_dir)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{version_dir}: no readable manifest ({exc})") from exc
    return parse_signed_manifest(raw, trainer_public_key, expected_version=version)
