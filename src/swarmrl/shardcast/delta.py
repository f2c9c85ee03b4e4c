"""Delta payloads: a checkpoint file as (file XOR parent file), byte-shuffled by 4, then zstd.

Why byte-level XOR of the whole file rather than per-tensor XOR of the safetensors contents: consecutive
checkpoints of one run have the same tensor names, shapes and dtypes, so their safetensors headers and data
offsets are identical and byte XOR *is* per-tensor XOR, without parsing an untrusted header and for every file
of the checkpoint (config, tokenizer, optimizer state alike). Why the 4-byte shuffle: one small optimizer step
changes only the low mantissa bytes of each fp32 weight; putting byte 0 of every word together, then byte 1…
turns the unchanged sign/exponent/high-mantissa bytes into long zero runs that zstd squeezes to almost nothing
(the same trick as blosc / HDF5's shuffle filter). For bf16 it groups pairs of values, which still helps.

Files are coded in fixed chunks so memory stays bounded for multi-GiB files; a chunk shorter than a multiple
of 4 (only the last) is zero-padded before shuffling and trimmed after.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import zstandard

from swarmrl.configs.shardcast import HashAlgorithm
from swarmrl.shardcast.errors import DeltaError
from swarmrl.shardcast.fsutil import resolve_inside
from swarmrl.shardcast.hashing import new_hasher
from swarmrl.shardcast.manifest import DeltaEntry, Manifest

DEFAULT_CHUNK_SIZE = 16 * 1024 * 1024
WORD = 4


def shuffle_bytes(data: np.ndarray) -> np.ndarray:
    """Byte planes of 4-byte words: [b0 of every word, b1 of every word, ...]; pads to a multiple of 4."""
    padded_len = -(-len(data) // WORD) * WORD
    if padded_len != len(data):
        data = np.concatenate([data, np.zeros(padded_len - len(data), dtype=np.uint8)])
    return np.ascontiguousarray(data.reshape(-1, WORD).T).reshape(-1)


def unshuffle_bytes(planes: np.ndarray, length: int) -> np.ndarray:
    """Inverse of shuffle_bytes for an original of `length` bytes."""
    return np.ascontiguousarray(planes.reshape(WORD, -1).T).reshape(-1)[:length]


def _read_parent_chunk(parent, offset: int, length: int, parent_size: int) -> np.ndarray:
    """Parent bytes at [offset, offset+length), zero beyond the parent's end."""
    chunk = np.zeros(length, dtype=np.uint8)
    if parent is not None and offset < parent_size:
        available = min(length, parent_size - offset)
        raw = os.pread(parent.fileno(), available, offset)
        chunk[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return chunk


def encode_delta(
    target: Path, parent: Path | None, out: Path, chunk_size: int = DEFAULT_CHUNK_SIZE, level: int = 3
) -> None:
    """Write the payload that rebuilds `target` from `parent` (None: from zeros) to `out`."""
    if chunk_size % WORD:
        raise DeltaError(f"chunk_size must be a multiple of {WORD}")
    target_size = target.stat().st_size
    parent_size = parent.stat().st_size if parent is not None else 0
    out.parent.mkdir(parents=True, exist_ok=True)
    compressor = zstandard.ZstdCompressor(level=level)
    parent_file = open(parent, "rb") if parent is not None else None
    try:
        with open(target, "rb") as src, open(out, "wb") as sink, compressor.stream_writer(sink) as writer:
            for offset in range(0, target_size, chunk_size):
                length = min(chunk_size, target_size - offset)
                data = np.frombuffer(src.read(length), dtype=np.uint8)
                xored = data ^ _read_parent_chunk(parent_file, offset, length, parent_size)
                writer.write(shuffle_bytes(xored).tobytes())
    finally:
        if parent_file is not None:
            parent_file.close()


def apply_delta(
    payload: Path, parent: Path | None, out: Path, target_size: int, chunk_size: int, algorithm: HashAlgorithm
) -> str:
    """Rebuild a file from `parent` and a payload into `out`; return the digest of what was written.

    The payload is untrusted until the caller compares the returned hash with the signed manifest; it must
    decompress to exactly the expected number of bytes (a bomb or a truncated stream raises DeltaError).
    """
    if chunk_size % WORD or chunk_size <= 0:
        raise DeltaError(f"chunk_size must be a positive multiple of {WORD}")
    parent_size = parent.stat().st_size if parent is not None else 0
    digest = new_hasher(algorithm)
    decompressor = zstandard.ZstdDecompressor()
    parent_file = open(parent, "rb") if parent is not None else None
    try:
        with open(payload, "rb") as src, open(out, "wb") as sink, decompressor.stream_reader(src) as reader:
            for offset in range(0, target_size, chunk_size):
                length = min(chunk_size, target_size - offset)
                padded = -(-length // WORD) * WORD
                planes = _read_exactly(reader, padded)
                data = unshuffle_bytes(np.frombuffer(planes, dtype=np.uint8), length)
                rebuilt = (data ^ _read_parent_chunk(parent_file, offset, length, parent_size)).tobytes()
                digest.update(rebuilt)
                sink.write(rebuilt)
            if reader.read(1):
                raise DeltaError(f"{payload.name}: payload holds more bytes than the target file")
    except zstandard.ZstdError as exc:
        raise DeltaError(f"{payload.name}: corrupt zstd payload ({exc})") from exc
    finally:
        if parent_file is not None:
            parent_file.close()
    return digest.hexdigest()


def rebuild_file(
    manifest: Manifest, item: DeltaEntry, payload_root: Path, parent_root: Path, out: Path
) -> None:
    """Rebuild `item`'s checkpoint file into `out` from its payload under `payload_root` and the parent version's
    file under `parent_root` (the caller has checked that file is the one the delta was coded against);
    DeltaError unless the result hashes to the signed digest."""
    assert manifest.delta is not None
    target = manifest.file_by_path[item.path]
    digest = apply_delta(
        resolve_inside(payload_root, item.payload_path),
        resolve_inside(parent_root, item.path) if item.parent_digest is not None else None,
        out,
        target.size,
        manifest.delta.chunk_size,
        manifest.hash_algorithm,
    )
    if digest != target.digest:
        raise DeltaError(f"{item.path} rebuilt from the delta does not match the signed hash")


def _read_exactly(reader, n: int) -> bytes:
    parts, remaining = [], n
    while remaining:
        part = reader.read(remaining)
        if not part:
            raise DeltaError("payload ends before the target file does")
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)
