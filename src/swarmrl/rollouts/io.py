"""Write rollout files and read untrusted ones: schema, sizes, types and ranges checked before use.

The signature covers sha256(header JSON ‖ Arrow IPC bytes of the table), so neither rows nor header can
change without breaking it, while the parquet encoding itself stays free to vary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from swarmrl.errors import writing
from swarmrl.identity import Identity, SignatureError, verify
from swarmrl.rollouts.errors import RolloutError
from swarmrl.rollouts.schema import (
    FINISH_REASONS,
    PROOF_CHUNK_TOKENS,
    ROLLOUT_SCHEMA,
    SCHEMA_VERSION,
    SCORED_SCHEMA,
    RolloutHeader,
    RolloutRow,
    ScoredRow,
)

if TYPE_CHECKING:
    from swarmrl.configs.contract import ContractSection

_META_HEADER = b"swarmrl.header"
_META_SIGNATURE = b"swarmrl.signature"


class RolloutLimits(BaseModel):
    """Bounds an untrusted file must respect; the validator sets them from the run config."""

    max_file_bytes: int = Field(100 * 2**20, description="largest accepted file (INTELLECT-2: 100 MiB)")
    max_rows: int = Field(65536, description="most rows in one file")
    max_prompt_tokens: int = Field(8192, description="longest prompt")
    max_completion_tokens: int = Field(32768, description="longest completion")
    vocab_size: int = Field(2**31 - 1, description="token ids must lie in [0, vocab_size)")
    require_proofs: bool = Field(
        True,
        description="refuse a file written without TOPLOC proofs (header `proofs: false`, a local run's "
        "shortcut); only the trainer of a local run, whose files no validator reads, turns it off",
    )

    @classmethod
    def for_contract(cls, contract: ContractSection, vocab_size: int) -> RolloutLimits:
        """Bounds a rollout file of a run with this [contract] must respect; `vocab_size` is the policy
        model's, not the tokenizer's."""
        return cls(
            max_rows=contract.rows_per_batch,
            max_completion_tokens=contract.max_new_tokens,
            vocab_size=vocab_size,
        )


def _table(rows: Sequence[RolloutRow], schema: pa.Schema) -> pa.Table:
    names = schema.names
    columns = {name: [getattr(row, name) for row in rows] for name in names}
    return pa.Table.from_pydict(columns, schema=schema)


def _digest(header: RolloutHeader, table: pa.Table, schema: pa.Schema) -> bytes:
    sink = io.BytesIO()
    # Rebuilt from Python values on the canonical schema, so that chunking, buffer offsets and list
    # child names (which a parquet round trip does not keep) can't change the bytes that are hashed.
    plain = pa.Table.from_pydict(table.to_pydict(), schema=schema)
    with pa.ipc.new_stream(sink, plain.schema) as writer:
        writer.write_table(plain)
    header_bytes = json.dumps(dataclasses.asdict(header), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(header_bytes + b"\0" + sink.getvalue()).digest()


def write_rollouts(
    path: str | Path, header: RolloutHeader, rows: Sequence[RolloutRow], identity: Identity | None = None
) -> Path:
    """Write rows (scored if they are `ScoredRow`s), signed by `identity` when given; atomic."""
    path = Path(path)
    schema = SCORED_SCHEMA if rows and isinstance(rows[0], ScoredRow) else ROLLOUT_SCHEMA
    table = _table(rows, schema)
    metadata = {_META_HEADER: json.dumps(dataclasses.asdict(header)).encode()}
    if identity is not None:
        if identity.node_id != header.node_id:
            raise RolloutError("the signing key is not the header's node id")
        metadata[_META_SIGNATURE] = identity.sign_hex(_digest(header, table, schema)).encode()
    table = table.replace_schema_metadata(metadata)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    return path


def read_rollouts(
    path: str | Path,
    limits: RolloutLimits | None = None,
    *,
    require_signature: bool = True,
    scored: bool = False,
) -> tuple[RolloutHeader, list[RolloutRow]]:
    """Read an untrusted rollout file; raise `RolloutError` naming the first problem found."""
    limits = limits or RolloutLimits()
    path = Path(path)
    _check_size(path, limits)
    try:
        parquet_file = pq.ParquetFile(path)
        file_meta = parquet_file.metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise RolloutError(f"{path.name}: not a parquet file ({exc})") from exc
    if file_meta.num_rows > limits.max_rows:
        raise RolloutError(f"{path.name}: {file_meta.num_rows} rows exceeds the cap of {limits.max_rows}")
    expected = SCORED_SCHEMA if scored else ROLLOUT_SCHEMA
    schema = parquet_file.schema_arrow
    if not schema.remove_metadata().equals(expected):
        raise RolloutError(
            f"{path.name}: schema differs from rollout schema v{SCHEMA_VERSION}: {_schema_diff(schema, expected)}"
        )
    header = _parse_header(path.name, schema.metadata or {})
    if limits.require_proofs and not header.proofs:
        raise RolloutError(
            f"{path.name}: written without TOPLOC proofs (a local run's file, contract.local_proofs off); "
            "this reader requires them"
        )
    try:
        table = parquet_file.read()
        # Full validation: parquet reads strings without checking them, and an invalid UTF-8 value would
        # otherwise surface as a UnicodeDecodeError deep inside the signature digest.
        table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise RolloutError(f"{path.name}: unreadable row data ({exc})") from exc
    if require_signature:
        signature = (schema.metadata or {}).get(_META_SIGNATURE)
        if signature is None:
            raise RolloutError(f"{path.name}: unsigned")
        try:
            verify(
                header.node_id, _digest(header, table, expected), signature.decode("ascii", errors="replace")
            )
        except SignatureError as exc:
            raise RolloutError(f"{path.name}: signature by {header.node_id[:12]}… invalid: {exc}") from exc
    row_cls = ScoredRow if scored else RolloutRow
    rows = [row_cls(**record) for record in table.to_pylist()]
    for i, row in enumerate(rows):
        _check_row(path.name, i, row, header, limits)
    return header, rows


def read_header(path: str | Path, limits: RolloutLimits | None = None) -> RolloutHeader:
    """The header of a rollout file from its footer alone, unverified (the signature covers the rows as well):
    for ordering files before `read_rollouts` checks each; raises `RolloutError` naming the problem."""
    path = Path(path)
    _check_size(path, limits or RolloutLimits())
    try:
        metadata = pq.read_schema(path).metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise RolloutError(f"{path.name}: not a parquet file ({exc})") from exc
    return _parse_header(path.name, metadata or {})


def _check_size(path: Path, limits: RolloutLimits) -> None:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise RolloutError(f"{path}: cannot stat ({exc.strerror})") from exc
    if size > limits.max_file_bytes:
        raise RolloutError(f"{path.name}: {size} bytes exceeds the {limits.max_file_bytes}-byte cap")


def _schema_diff(actual: pa.Schema, expected: pa.Schema) -> str:
    for field in expected:
        if field.name not in actual.names:
            return f"missing column {field.name!r}"
        got = actual.field(field.name)
        if not got.equals(field):
            return f"column {field.name!r} is {got.type}{'' if got.nullable == field.nullable else ' (nullable)'}, expected {field.type}"
    extra = set(actual.names) - set(expected.names)
    return f"unexpected columns {sorted(extra)}" if extra else "column order differs"


def _parse_header(name: str, metadata: dict[bytes, bytes]) -> RolloutHeader:
    raw = metadata.get(_META_HEADER)
    if raw is None:
        raise RolloutError(f"{name}: no swarmrl header in the file metadata")
    try:
        data: Any = json.loads(raw)
        header = RolloutHeader(**data)
    except (ValueError, TypeError) as exc:
        raise RolloutError(f"{name}: malformed header ({exc})") from exc
    if header.schema_version != SCHEMA_VERSION:
        raise RolloutError(
            f"{name}: schema version {header.schema_version}, this reader speaks {SCHEMA_VERSION}"
        )
    for key, kind in (("run_id", str), ("node_id", str), ("policy_step", int), ("batch_index", int)):
        value = getattr(header, key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RolloutError(f"{name}: header field {key} must be {kind.__name__}")
    if not isinstance(header.proofs, bool):
        raise RolloutError(f"{name}: header field proofs must be bool")
    if header.policy_step < 0 or header.batch_index < 0:
        raise RolloutError(f"{name}: negative policy step or batch index in header")
    return header


def _check_row(name: str, i: int, row: RolloutRow, header: RolloutHeader, limits: RolloutLimits) -> None:
    def fail(problem: str) -> RolloutError:
        return RolloutError(f"{name} row {i}: {problem}")

    if not 0 < len(row.prompt_ids) <= limits.max_prompt_tokens:
        raise fail(f"prompt length {len(row.prompt_ids)} outside (0, {limits.max_prompt_tokens}]")
    if not 0 < len(row.completion_ids) <= limits.max_completion_tokens:
        raise fail(f"completion length {len(row.completion_ids)} outside (0, {limits.max_completion_tokens}]")
    for column in ("prompt_ids", "completion_ids"):
        ids = getattr(row, column)
        if min(ids) < 0 or max(ids) >= limits.vocab_size:
            raise fail(f"{column} holds a token id outside [0, {limits.vocab_size})")
    if row.policy_step != header.policy_step:
        raise fail(f"policy step {row.policy_step} differs from the header's {header.policy_step}")
    if len(row.logprobs) != len(row.completion_ids):
        raise fail(f"{len(row.logprobs)} logprobs for {len(row.completion_ids)} completion tokens")
    if any(not math.isfinite(lp) or lp > 0.0 for lp in row.logprobs):
        raise fail("a logprob is positive or not finite")
    if not (math.isfinite(row.temperature) and 0.0 < row.temperature <= 10.0):
        raise fail(f"temperature {row.temperature} outside (0, 10]")
    if row.finish_reason not in FINISH_REASONS:
        raise fail(f"finish reason {row.finish_reason!r} not one of {FINISH_REASONS}")
    if row.prompt_index < 0 or row.group_id < 0:
        raise fail("negative prompt index or group id")
    if row.target_length < -1:
        raise fail(f"target length {row.target_length} below -1")
    if not math.isfinite(row.claimed_reward):
        raise fail("claimed reward is not finite")
    if row.completion_mask:
        if len(row.completion_mask) != len(row.completion_ids):
            raise fail(
                f"{len(row.completion_mask)} mask bits for {len(row.completion_ids)} completion tokens"
            )
        if any(bit not in (0, 1) for bit in row.completion_mask):
            raise fail("the completion mask holds values other than 0 and 1")
        if row.completion_mask[0] != 1 or row.completion_mask[-1] != 1:
            raise fail("a multi-turn completion must start and end with model tokens")
    # Proofs cover the model's tokens only: environment tokens are prefill, like the prompt.
    expected = -(-row.model_token_count // PROOF_CHUNK_TOKENS) if header.proofs else 0
    if len(row.proofs) != expected:
        raise fail(
            f"{len(row.proofs)} TOPLOC proofs for {row.model_token_count} model tokens, expected {expected}"
            + ("" if header.proofs else " (the header says the file carries none)")
        )
    if isinstance(row, ScoredRow):
        for column in ("task_reward", "length_term", "reward", "advantage"):
            if not math.isfinite(getattr(row, column)):
                raise fail(f"{column} is not finite")
