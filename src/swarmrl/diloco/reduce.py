"""Average a flat fp32 tensor across workers with a codec on the wire and fp32 accumulation.

Lossy codecs cannot use a plain all-reduce (it would sum in the wire dtype), so the reduction is done as
reduce-scatter + all-gather on top of the communicator's collectives:
  1. split the vector into n chunks, encode each, all-to-all: worker i receives every peer's chunk i;
  2. decode to fp32 and average chunk i;
  3. encode the averaged chunk and all-gather it; every worker decodes the same bytes, so all workers end
     with bit-identical results.
Traffic per worker is 2 (n - 1) / n x (payload bytes), the ring all-reduce cost at the wire dtype's width.
Per-row scales ride in the same message as their row (4 extra bytes), so a sync costs two collectives.
"""

from __future__ import annotations

import torch

from swarmrl.diloco.codecs import Codec, EncodedRows
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CodecError, CommunicatorError

_SCALE_BYTES = 4


def pack_rows(encoded: EncodedRows) -> torch.Tensor:
    """One contiguous tensor per row: the values, then the row's fp32 scale reinterpreted as wire dtype."""
    if encoded.scales is None:
        return encoded.values
    if encoded.values.element_size() != 1:
        raise CodecError("scaled payloads must use a 1-byte wire dtype")
    scale_bytes = encoded.scales.contiguous().view(encoded.values.dtype).view(-1, _SCALE_BYTES)
    return torch.cat([encoded.values, scale_bytes], dim=1)


def unpack_rows(packed: torch.Tensor, scaled: bool) -> EncodedRows:
    if not scaled:
        return EncodedRows(packed, None)
    if packed.dim() != 2 or packed.shape[1] <= _SCALE_BYTES:
        raise CodecError(f"scaled payload of shape {tuple(packed.shape)} is too short to hold its scale")
    values = packed[:, :-_SCALE_BYTES].contiguous()
    # A fresh copy, not contiguous(): a one-row slice counts as contiguous but keeps a storage offset and
    # row stride that view(float32) refuses unless they are multiples of 4.
    scales = packed[:, -_SCALE_BYTES:].reshape(-1).clone().view(torch.float32)
    return EncodedRows(values, scales)


def all_reduce_mean_encoded(flat: torch.Tensor, codec: Codec, comm: Communicator) -> torch.Tensor:
    """Mean over workers of a 1-D fp32 tensor; returns a new tensor, `flat` is left untouched."""
    if flat.dim() != 1 or flat.dtype != torch.float32:
        raise CommunicatorError(f"expected a 1-D fp32 tensor, got {tuple(flat.shape)} {flat.dtype}")
    if codec.lossless:
        return comm.all_reduce_mean(flat.clone())
    world = comm.world_size
    numel = flat.numel()
    chunk = -(-numel // world)
    padded = torch.zeros(world * chunk, dtype=torch.float32)
    padded[:numel] = flat
    encoded = codec.encode(padded.view(world, chunk))
    scaled = encoded.scales is not None

    received = unpack_rows(comm.all_to_all(pack_rows(encoded)), scaled)
    own_chunk_mean = codec.decode(received).mean(dim=0)

    gathered = comm.all_gather(pack_rows(codec.encode(own_chunk_mean[None, :]))[0])
    return codec.decode(unpack_rows(gathered, scaled)).reshape(-1)[:numel]
