"""Runs the paged model on its device: sizes the KV pool, packs each step's inputs, samples, and — on CUDA —
replays decoding steps from CUDA graphs captured per batch-size bucket. The only place that knows devices.

A decoding step of a bucket pads its rows to the bucket's size: padding rows feed token 0 at position 0,
write into the pool's scratch block and are never read back. On CPU the same code runs each step eagerly at
its exact batch size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence as Seq

import torch
from torch import nn

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.errors import InferenceError
from swarmrl.inference.paged.attention import (
    DecodeInputs,
    FlexDecodeAttention,
    GatherDecodeAttention,
    PrefillAttention,
)
from swarmrl.inference.paged.block_manager import BlockCopy
from swarmrl.inference.paged.kv_pool import KVPool
from swarmrl.inference.paged.model import PagedModel
from swarmrl.inference.paged.scheduler import PrefillItem
from swarmrl.inference.paged.sequence import Sequence
from swarmrl.inference.sampler import choose

log = logging.getLogger(__name__)

_FLEX_BLOCK_SIZE = 128
_GATHER_BLOCK_SIZE = 16


def decode_buckets(max_batch: int) -> list[int]:
    """Batch sizes graphs are captured for: powers of two to 64, then multiples of 64, and the maximum."""
    sizes = [size for size in (1, 2, 4, 8, 16, 32, 64) if size < max_batch]
    sizes += list(range(128, max_batch, 64))
    return [*sizes, max_batch]


def bucket_for(batch: int, buckets: Seq[int]) -> int:
    """The smallest bucket that holds `batch` rows."""
    for size in buckets:
        if size >= batch:
            return size
    raise ValueError(f"batch {batch} exceeds the largest bucket {buckets[-1]}")


_compiled: dict[str, object] = {}


def _compiled_flex():
    """FlexAttention compiled once per process (compiled kernels are shared by every engine)."""
    if "flex" not in _compiled:
        from torch.nn.attention.flex_attention import flex_attention

        # One kernel per (bucket, pool shape): more than dynamo's default cache of 8 entries.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(
            torch._dynamo.config.accumulated_cache_size_limit, 1024
        )
        _compiled["flex"] = torch.compile(flex_attention, dynamic=False)
    return _compiled["flex"]


class ModelRunner:
    def __init__(self, model: nn.Module, config: PagedEngineConfig) -> None:
        self.model = PagedModel(model)
        self.config = config
        self.device = self.model.device
        cuda = self.device.type == "cuda"
        self.attention_kind = (
            config.attention if config.attention != "auto" else ("flex" if cuda else "gather")
        )
        default_block = _FLEX_BLOCK_SIZE if self.attention_kind == "flex" else _GATHER_BLOCK_SIZE
        self.block_size = config.block_size or default_block
        self.max_batch = config.max_num_seqs
        self.pool = KVPool(
            self.model.pool_shape,
            self._pool_blocks(),
            self.block_size,
            self.device,
            zero_all=self.attention_kind == "flex",  # flex's block lists are not its only reads everywhere
        )
        max_positions = self.model.parts.max_positions or self.pool.num_blocks * self.block_size
        self.max_blocks = min(-(-max_positions // self.block_size), self.pool.num_blocks)
        self.inputs = DecodeInputs(self.max_batch, self.max_blocks, self.pool)
        self._tokens = torch.zeros(self.max_batch, dtype=torch.int64, device=self.device)
        self._positions = torch.zeros(self.max_batch, dtype=torch.int64, device=self.device)
        self._slots = torch.full(
            (self.max_batch,), self.pool.null_slot, dtype=torch.int64, device=self.device
        )
        self.attention: FlexDecodeAttention | GatherDecodeAttention
        if self.attention_kind == "flex":
            flex = _compiled_flex() if cuda else _eager_flex()
            self.attention = FlexDecodeAttention(self.pool, self.model.shape, self.inputs, flex)
            self.buckets = decode_buckets(self.max_batch)
        else:
            self.attention = GatherDecodeAttention(self.pool, self.model.shape, self.inputs)
            self.buckets = []  # exact batch sizes, no padding
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        if cuda and config.cuda_graphs and self.attention_kind == "flex":
            self._capture_graphs()
        self._choose = choose
        if cuda and config.compile_sampler:
            self._choose = torch.compile(choose, dynamic=True)

    # --- steps -----------------------------------------------------------------------------------------

    def prefill(self, items: Seq[PrefillItem]) -> torch.Tensor:
        """Run each item's tokens from position 0 into its blocks; final hidden states [items, H] of each
        item's last position (the model's dtype)."""
        lengths = [len(item.token_ids) for item in items]
        tokens = torch.tensor([t for item in items for t in item.token_ids], dtype=torch.int64)
        positions = torch.cat([torch.arange(n) for n in lengths])
        slots = torch.cat([self.pool.slots(item.table, 0, n) for item, n in zip(items, lengths, strict=True)])
        hidden = self.model.forward(
            tokens.to(self.device),
            positions.to(self.device),
            slots.to(self.device),
            self.pool,
            PrefillAttention(lengths, self.model.shape),
        )
        last = torch.tensor(lengths).cumsum(0) - 1
        return hidden[last.to(self.device)]

    def decode(self, sequences: Seq[Sequence]) -> torch.Tensor:
        """Feed each sequence's last token at position length − 1; logits [B, V] of the next token. The
        final hidden states are stored in the pool (at each fed position's slot)."""
        batch = len(sequences)
        rows = self._fill_inputs(sequences)
        if rows in self._graphs:
            graph, _, logits = self._graphs[rows]
            graph.replay()
            return logits[:batch]
        width = max(len(s.table) for s in sequences)
        return self._decode_body(rows, width)[1][:batch]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.logits(hidden)

    def sample(
        self, logits: torch.Tensor, seeds: Seq[int], positions: Seq[int], params: SamplingParams
    ) -> tuple[list[int], list[float]]:
        """Seeded choices and their logprobs (see `sampler`), one host transfer for both."""
        seeds_t = torch.tensor(seeds, dtype=torch.int64, device=self.device)
        positions_t = torch.tensor(positions, dtype=torch.int64, device=self.device)
        try:
            tokens, logprobs = self._choose(logits, seeds_t, positions_t, params.temperature, params.top_p)
        except Exception as exc:  # a compiler failure must not stop generation: the eager sampler is exact
            if self._choose is choose:
                raise
            log.warning("compiled sampler failed (%s); sampling eagerly from now on", exc)
            self._choose = choose
            tokens, logprobs = choose(logits, seeds_t, positions_t, params.temperature, params.top_p)
        # float64 holds token ids exactly and float32 logprobs without rounding.
        both = torch.stack([tokens.double(), logprobs.double()]).cpu()
        return [int(t) for t in both[0].tolist()], both[1].tolist()

    def copy_blocks(self, copies: Seq[BlockCopy]) -> None:
        self.pool.copy_blocks(copies)

    def hidden_states(self, table: Seq[int], start: int, stop: int) -> torch.Tensor:
        """bf16 hidden states [stop − start, H] of positions [start, stop), on the engine's device."""
        return self.pool.hidden[self.pool.slots(table, start, stop).to(self.device)]

    # --- decode inputs and graphs --------------------------------------------------------------------

    def _fill_inputs(self, sequences: Seq[Sequence]) -> int:
        """Write the step's inputs into the runner's buffers; returns the number of rows the step runs."""
        batch = len(sequences)
        rows = bucket_for(batch, self.buckets) if self.buckets else batch
        block = self.block_size
        tokens, positions, slots, lengths = [], [], [], []
        for s in sequences:
            position = s.length - 1
            tokens.append(s.completion_ids[-1])
            positions.append(position)
            slots.append(s.table[position // block] * block + position % block)
            lengths.append(s.length)
        width = max(len(s.table) for s in sequences)
        null = self.pool.null_block
        tables = torch.tensor(
            [s.table + [null] * (width - len(s.table)) for s in sequences], dtype=torch.int32
        )
        ints = torch.tensor([tokens, positions, slots, lengths], dtype=torch.int64).to(self.device)
        self._tokens[:batch], self._positions[:batch], self._slots[:batch] = ints[0], ints[1], ints[2]
        self.inputs.seq_lens[:batch] = ints[3].to(torch.int32)
        self.inputs.tables[:batch, :width] = tables.to(self.device)
        self.inputs.tables[:batch, width:] = null  # stale columns of earlier, longer steps
        if rows > batch:
            self._pad_rows(batch, rows)
        return rows

    def _pad_rows(self, start: int, stop: int) -> None:
        self._tokens[start:stop] = 0
        self._positions[start:stop] = 0
        self._slots[start:stop] = self.pool.null_slot
        self.inputs.seq_lens[start:stop] = 1
        self.inputs.tables[start:stop] = self.pool.null_block

    def _decode_body(self, rows: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        self.attention.prepare(rows, width)
        hidden = self.model.forward(
            self._tokens[:rows], self._positions[:rows], self._slots[:rows], self.pool, self.attention
        )
        return hidden, self.model.logits(hidden)

    @torch.inference_mode()
    def _capture_graphs(self) -> None:
        memory_pool = None
        for rows in sorted(self.buckets, reverse=True):
            self._pad_rows(0, rows)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._decode_body(rows)  # compiles this bucket's kernels outside the capture
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=memory_pool):
                hidden, logits = self._decode_body(rows)
            memory_pool = graph.pool() if memory_pool is None else memory_pool
            self._graphs[rows] = (graph, hidden, logits)
        torch.cuda.synchronize(self.device)

    # --- memory --------------------------------------------------------------------------------------

    def _pool_blocks(self) -> int:
        block_bytes = self.model.pool_shape.bytes_per_slot() * self.block_size
        if self.config.kv_blocks is not None:
            return self.config.kv_blocks
        if self.device.type != "cuda":
            return max(1, int(self.config.cpu_kv_cache_gib * 2**30) // block_bytes)
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(self.device)
        peak = self._activation_peak()
        budget = total * self.config.gpu_memory_fraction - (total - free) - peak
        blocks = int(budget // block_bytes)
        if blocks < 1:
            raise InferenceError(
                f"gpu_memory_fraction {self.config.gpu_memory_fraction} leaves no room for a KV cache: "
                f"{(total - free) / 2**30:.1f} GiB in use, {peak / 2**30:.1f} GiB of activations, "
                f"{total / 2**30:.1f} GiB on the device"
            )
        log.info(
            "KV cache: %d blocks of %d positions (%.1f GiB)",
            blocks,
            self.block_size,
            blocks * block_bytes / 2**30,
        )
        return blocks

    @torch.inference_mode()
    def _activation_peak(self) -> int:
        """Memory of the largest prefill plus the largest decoding step with sampling, measured on a scratch
        pool (the decode graphs keep theirs allocated while prefills run)."""
        scratch = KVPool(self.model.pool_shape, 1, self.block_size, self.device)
        peaks = []
        tokens = min(self.config.max_num_batched_tokens, self.model.parts.max_positions or 1 << 30)
        rows = self.max_batch
        for count, attention in (
            (tokens, PrefillAttention([tokens], self.model.shape)),
            (rows, self._scratch_decode_attention(scratch, rows)),
        ):
            torch.cuda.synchronize(self.device)
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            ids = torch.zeros(count, dtype=torch.int64, device=self.device)
            hidden = self.model.forward(ids, ids, ids % self.block_size, scratch, attention)
            if count == rows:
                choose(self.model.logits(hidden), ids, ids, 1.0)
            del hidden
            torch.cuda.synchronize(self.device)
            peaks.append(torch.cuda.max_memory_allocated(self.device) - base)
        del scratch
        torch.cuda.empty_cache()
        return sum(peaks)

    def _scratch_decode_attention(self, scratch: KVPool, rows: int) -> GatherDecodeAttention:
        attention = GatherDecodeAttention(scratch, self.model.shape, DecodeInputs(rows, 1, scratch))
        attention.prepare(rows, 1)
        return attention


def _eager_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention
