"""One island's contribution to a merge round as bytes on the wire, and the checks every peer's passes.

Islands do not trust each other, so a merge cannot be a plain all-reduce (one peer's NaN or 1e30 would be
in everyone's sum) nor a reduce-scatter (each island would average one chunk for all the others, unseen).
Every island instead all-gathers every island's whole contribution and judges each one itself:

    header (6 × int64): magic, round, fragment, numel, codec, contributing (0 or 1)
    payload: the pseudo-gradient in rows of at most `ROW_VALUES`, encoded by the codec (int8: each row with
             its own fp32 scale), padded with zeros to the last row

A contribution is dropped for the round, with the reason, when its header is not this round's (another
round: a replay; another fragment, size or codec: a peer configured or lying otherwise), when its payload
does not decode (a NaN or non-positive int8 scale), when a decoded value is not finite, or when its norm is
more than `max_norm_ratio` times the round's reference norm: the lower median of the norms that decoded.
With honest islands in the majority the lower median is an honest island's norm, so a peer can move the
mean by at most that bound, never by 1e30 (norm bounding, as robust federated averaging does it; with two
islands a peer can at most make the honest one's contribution look too large and stall the round).

Every island decodes the same gathered bytes, its own contribution included, and sums the kept ones in rank
order, so islands that saw the same bytes apply bit-identical means. Traffic is (n - 1) x the contribution
per island, where the trusting reduce-scatter sent 2 (n - 1) / n x: the same for two islands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from swarmrl.diloco.codecs import Codec
from swarmrl.diloco.errors import CodecError
from swarmrl.diloco.reduce import pack_rows, unpack_rows

MAGIC = int.from_bytes(b"SRLISLv1", "little")
HEADER_FIELDS = 6
HEADER_BYTES = HEADER_FIELDS * 8
ROW_VALUES = 1 << 14  # values per codec row: an int8 scale covers at most this many
CODEC_CODES = {"fp32": 1, "fp16": 2, "bf16": 3, "int8": 4}


class ContributionError(ValueError):
    """A peer's contribution cannot be used this round; the message names why."""


@dataclass(frozen=True)
class RoundKey:
    """What every contribution of a round must claim: the round's agreed number, the fragment and its size."""

    round: int
    fragment: int
    numel: int


@dataclass
class Judged:
    """A round's contributions after the checks: the mean of the kept ones and why the others were dropped."""

    mean: torch.Tensor | None
    contributors: int
    drops: list[str] = field(default_factory=list)


def _layout(numel: int) -> tuple[int, int]:
    """(rows, values per row) of a fragment of `numel` values."""
    width = min(ROW_VALUES, max(numel, 1))
    return -(-numel // width), width


def _scaled(codec: Codec) -> bool:
    """Whether the codec's rows carry a scale (int8) after their values."""
    return codec.encode(torch.zeros(1, 1)).scales is not None


def encode_contribution(delta: torch.Tensor | None, key: RoundKey, codec: Codec) -> torch.Tensor:
    """The uint8 message of this island for the round; `delta` None: present, nothing to contribute."""
    rows, width = _layout(key.numel)
    padded = torch.zeros(rows * width, dtype=torch.float32)
    if delta is not None:
        padded[: key.numel] = delta.reshape(-1)
    payload = pack_rows(codec.encode(padded.view(rows, width))).contiguous().view(torch.uint8).reshape(-1)
    header = torch.tensor(
        [MAGIC, key.round, key.fragment, key.numel, CODEC_CODES[codec.name], int(delta is not None)],
        dtype=torch.int64,
    )
    return torch.cat([header.view(torch.uint8), payload])


def decode_contribution(message: torch.Tensor, key: RoundKey, codec: Codec) -> torch.Tensor | None:
    """The fp32 pseudo-gradient in one peer's message (None: the peer contributes nothing this round);
    raises ContributionError naming what is wrong."""
    if message.dtype != torch.uint8 or message.dim() != 1 or message.numel() < HEADER_BYTES:
        raise ContributionError(
            f"a message of {message.numel()} {message.dtype} values is not a contribution"
        )
    header = message[:HEADER_BYTES].clone().view(torch.int64).tolist()
    magic, round_, fragment, numel, codec_code, contributing = header
    if magic != MAGIC:
        raise ContributionError("not a contribution (bad magic): garbled or another protocol")
    if round_ != key.round:
        raise ContributionError(f"claims round {round_}, this round is {key.round} (a replay?)")
    if (fragment, numel) != (key.fragment, key.numel):
        raise ContributionError(
            f"claims fragment {fragment} of {numel} values; "
            f"this round merges fragment {key.fragment} of {key.numel}"
        )
    if codec_code != CODEC_CODES[codec.name]:
        raise ContributionError(f"claims codec {codec_code}, this round's is {codec.name}")
    if contributing not in (0, 1):
        raise ContributionError(f"contributing flag {contributing} is neither 0 nor 1")
    if contributing == 0:
        return None
    rows, width = _layout(key.numel)
    try:
        packed = message[HEADER_BYTES:].clone().view(codec.wire_dtype).view(rows, -1)
        values = codec.decode(unpack_rows(packed, scaled=_scaled(codec))).reshape(-1)
    except (CodecError, RuntimeError) as exc:
        raise ContributionError(f"payload does not decode: {exc}") from exc
    if values.numel() != rows * width:
        raise ContributionError(f"payload holds {values.numel()} values, expected {rows * width}")
    delta = values[: key.numel]
    if not bool(torch.isfinite(delta).all()):
        raise ContributionError("pseudo-gradient holds NaN or Inf")
    return delta


def judge_round(messages: torch.Tensor, key: RoundKey, codec: Codec, max_norm_ratio: float) -> Judged:
    """The mean over the contributions that pass every check; `messages` holds one row per rank."""
    kept: list[tuple[int, torch.Tensor, float]] = []
    drops: list[str] = []
    for rank in range(messages.shape[0]):
        try:
            delta = decode_contribution(messages[rank], key, codec)
        except ContributionError as exc:
            drops.append(f"rank {rank}: {exc}")
            continue
        if delta is not None:
            # In float64: the norm of finite fp32 values (say 1e30 each) can overflow fp32.
            kept.append((rank, delta, float(delta.double().norm())))
    if kept:
        reference = sorted(norm for _, _, norm in kept)[(len(kept) - 1) // 2]
        bound = max_norm_ratio * reference
        drops += [
            f"rank {rank}: pseudo-gradient norm {norm:.4g} exceeds {max_norm_ratio:g} x the round's "
            f"median {reference:.4g}"
            for rank, _, norm in kept
            if norm > bound
        ]
        kept = [entry for entry in kept if entry[2] <= bound]
    if not kept:
        return Judged(None, 0, drops)
    return Judged(torch.stack([delta for _, delta, _ in kept]).mean(dim=0), len(kept), drops)
