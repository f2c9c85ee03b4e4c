"""Wire formats for pseudo-gradients: encode fp32 rows to a compact payload and decode back to fp32.

Sums are never taken in the wire dtype: `swarmrl.diloco.reduce` decodes every peer's payload to fp32 first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import assert_never, get_args

import torch

from swarmrl.configs.diloco import CodecName
from swarmrl.diloco.errors import CodecError

INT8_LEVELS = 127  # symmetric range [-127, 127]: 255 levels, zero exactly representable


@dataclass(frozen=True)
class EncodedRows:
    """Payload of a 2-D block of rows; `scales` holds one fp32 scale per row for scaled codecs."""

    values: torch.Tensor
    scales: torch.Tensor | None


class Codec(ABC):
    name: str
    wire_dtype: torch.dtype

    @property
    def lossless(self) -> bool:
        return self.wire_dtype == torch.float32

    @abstractmethod
    def encode(self, rows: torch.Tensor) -> EncodedRows:
        """Encode a 2-D fp32 tensor row by row."""

    @abstractmethod
    def decode(self, encoded: EncodedRows) -> torch.Tensor:
        """Decode to a 2-D fp32 tensor of the encoded shape."""

    def roundtrip(self, rows: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(rows))


def _check_rows(rows: torch.Tensor) -> None:
    if rows.dim() != 2 or rows.dtype != torch.float32:
        raise CodecError(f"expected a 2-D float32 tensor, got shape {tuple(rows.shape)} dtype {rows.dtype}")
    if not bool(torch.isfinite(rows).all()):
        raise CodecError("pseudo-gradient holds NaN or Inf; refusing to put it on the wire")


class CastCodec(Codec):
    """Plain dtype cast: fp32 (identity), fp16 or bf16 on the wire."""

    def __init__(self, wire_dtype: torch.dtype) -> None:
        if wire_dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise CodecError(f"cast codec does not support {wire_dtype}")
        self.wire_dtype = wire_dtype
        self.name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[wire_dtype]

    def encode(self, rows: torch.Tensor) -> EncodedRows:
        _check_rows(rows)
        if self.wire_dtype == torch.float16 and bool((rows.abs() > torch.finfo(torch.float16).max).any()):
            raise CodecError("value exceeds the fp16 range (65504); use bf16 or fp32")
        return EncodedRows(values=rows.to(self.wire_dtype), scales=None)

    def decode(self, encoded: EncodedRows) -> torch.Tensor:
        if encoded.values.dtype != self.wire_dtype:
            raise CodecError(f"{self.name} payload has dtype {encoded.values.dtype}")
        return encoded.values.to(torch.float32)


class Int8Codec(Codec):
    """INTELLECT-1 style: clip outliers at `clip_sigmas` standard deviations, 255 symmetric levels per row.

    scale_r = min(max|x_r|, clip_sigmas * rms(x_r)) / 127;  q = round(clamp(x / scale_r, -127, 127)).
    """

    name = "int8"
    wire_dtype = torch.int8

    def __init__(self, clip_sigmas: float = 6.0) -> None:
        if clip_sigmas <= 0:
            raise CodecError(f"clip_sigmas must be positive, got {clip_sigmas}")
        self.clip_sigmas = clip_sigmas

    def encode(self, rows: torch.Tensor) -> EncodedRows:
        _check_rows(rows)
        # rms rather than std: pseudo-gradients are centred near zero and rms never under-clips a biased row.
        rms = rows.pow(2).mean(dim=1).sqrt()
        bound = torch.minimum(rows.abs().amax(dim=1), self.clip_sigmas * rms)
        scales = torch.where(bound > 0, bound / INT8_LEVELS, torch.ones_like(bound))
        quantised = torch.round(rows / scales[:, None]).clamp_(-INT8_LEVELS, INT8_LEVELS).to(torch.int8)
        return EncodedRows(values=quantised, scales=scales.to(torch.float32))

    def decode(self, encoded: EncodedRows) -> torch.Tensor:
        if encoded.values.dtype != torch.int8 or encoded.scales is None:
            raise CodecError("int8 payload needs int8 values and fp32 per-row scales")
        if encoded.scales.shape != (encoded.values.shape[0],):
            raise CodecError(
                f"int8 payload has {encoded.values.shape[0]} rows but {tuple(encoded.scales.shape)} scales"
            )
        if not bool(torch.isfinite(encoded.scales).all()) or bool((encoded.scales <= 0).any()):
            raise CodecError("int8 scales must be finite and positive")
        return encoded.values.to(torch.float32) * encoded.scales[:, None]


def make_codec(name: CodecName, int8_clip_sigmas: float = 6.0) -> Codec:
    if name not in get_args(CodecName):  # a name that did not come through a config
        raise CodecError(f"unknown codec {name!r}; expected {', '.join(get_args(CodecName))}")
    match name:
        case "fp32":
            return CastCodec(torch.float32)
        case "fp16":
            return CastCodec(torch.float16)
        case "bf16":
            return CastCodec(torch.bfloat16)
        case "int8":
            return Int8Codec(int8_clip_sigmas)
        case _:
            assert_never(name)
