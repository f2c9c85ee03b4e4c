"""Byte-level corpus from Python source files: deterministic train/eval split by file, disjoint worker shards."""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from swarmrl.configs.diloco import ByteCorpusConfig
from swarmrl.diloco.errors import CorpusError
from swarmrl.diloco.model import EOS_TOKEN_ID


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _split_score(relative_path: str) -> float:
    # A hash of the path (not the listing order) keeps the split stable across machines and file additions.
    digest = hashlib.sha256(relative_path.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _source_files(root: Path) -> list[Path]:
    files = sorted(
        p
        for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "test" not in p.parts and p.is_file()
    )
    if not files:
        raise CorpusError(f"no .py files under {root}")
    return files


def _encode_files(paths: list[Path]) -> torch.Tensor:
    chunks: list[torch.Tensor] = []
    for path in paths:
        data = path.read_bytes()
        chunks.append(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.long))
        chunks.append(torch.tensor([EOS_TOKEN_ID]))
    return torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.long)


@dataclass(frozen=True)
class CorpusSplit:
    """Token streams of one worker's training shard and of the shared eval set."""

    train_tokens: torch.Tensor
    eval_tokens: torch.Tensor


def load_corpus_split(config: ByteCorpusConfig, rank: int, world_size: int) -> CorpusSplit:
    """Read up to `max_bytes` of source; worker `rank` gets every `world_size`-th training file."""
    root = config.root or stdlib_root()
    chosen: list[Path] = []
    total = 0
    for path in _source_files(root):
        if total >= config.max_bytes:
            break
        total += path.stat().st_size
        chosen.append(path)
    scores = {path: _split_score(path.relative_to(root).as_posix()) for path in chosen}
    # The lowest-scoring file is always held out, so a small corpus still has an eval set.
    lowest = min(chosen, key=scores.__getitem__)
    eval_files = [p for p in chosen if scores[p] < config.eval_fraction or p == lowest]
    train_files = [p for p in chosen if p not in eval_files]
    shard = train_files[rank::world_size]
    train_tokens = _encode_files(shard)
    eval_tokens = _encode_files(eval_files)
    needed = config.seq_len + 2
    if train_tokens.numel() < needed or eval_tokens.numel() < needed:
        raise CorpusError(
            f"corpus under {root} too small: shard {rank}/{world_size} has {train_tokens.numel()} tokens, "
            f"eval has {eval_tokens.numel()}, need at least {needed} each"
        )
    return CorpusSplit(train_tokens=train_tokens, eval_tokens=eval_tokens)


class BatchSampler:
    """Random windows of `seq_len + 1` tokens from a token stream, reproducible and checkpointable."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int) -> None:
        self._tokens = tokens
        self._seq_len = seq_len
        self._batch_size = batch_size
        self._generator = torch.Generator().manual_seed(seed)

    def next_batch(self) -> torch.Tensor:
        high = self._tokens.numel() - self._seq_len - 1
        starts = torch.randint(0, high, (self._batch_size,), generator=self._generator)
        offsets = torch.arange(self._seq_len + 1)
        return self._tokens[starts[:, None] + offsets[None, :]]

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._generator.set_state(state["generator"])


def fixed_eval_batches(
    tokens: torch.Tensor, seq_len: int, batch_size: int, n_batches: int
) -> list[torch.Tensor]:
    """The same eval windows on every worker and every run (evenly spaced through the eval stream)."""
    n_windows = batch_size * n_batches
    high = tokens.numel() - seq_len - 1
    starts = torch.linspace(0, high, n_windows).long()
    offsets = torch.arange(seq_len + 1)
    windows = tokens[starts[:, None] + offsets[None, :]]
    return list(windows.split(batch_size))
