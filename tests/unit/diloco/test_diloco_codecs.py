import threading

import pytest
import torch
from config_unions import sample_of, union_members

from swarmrl.configs.diloco import CodecName
from swarmrl.diloco.codecs import CastCodec, EncodedRows, Int8Codec, make_codec
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CodecError
from swarmrl.diloco.reduce import all_reduce_mean_encoded

torch.set_num_threads(1)


class _ThreadGroup:
    """Test double: n ranks in n threads exchange tensors through shared slots."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.slots: list[torch.Tensor | None] = [None] * world_size
        self.barrier = threading.Barrier(world_size)

    def exchange(self, rank: int, tensor: torch.Tensor) -> list[torch.Tensor]:
        self.slots[rank] = tensor.clone()
        self.barrier.wait()
        everything = [t.clone() for t in self.slots]
        self.barrier.wait()
        return everything


class _ThreadCommunicator(Communicator):
    def __init__(self, group: _ThreadGroup, rank: int) -> None:
        super().__init__(rank, group.world_size)
        self.group = group

    def _all_reduce_mean(self, tensor):
        everything = self.group.exchange(self.rank, tensor)
        tensor.copy_(torch.stack(everything).sum(0) / self.world_size)
        return tensor

    def _all_to_all(self, rows):
        everything = self.group.exchange(self.rank, rows)
        return torch.stack([peer[self.rank] for peer in everything])

    def _all_gather(self, tensor):
        return torch.stack(self.group.exchange(self.rank, tensor))


def _reduce_on_threads(inputs: list[torch.Tensor], codec) -> list[torch.Tensor]:
    group = _ThreadGroup(len(inputs))
    results: list[torch.Tensor | None] = [None] * len(inputs)

    def run(rank: int) -> None:
        results[rank] = all_reduce_mean_encoded(inputs[rank], codec, _ThreadCommunicator(group, rank))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def _gaussian_inputs(world_size: int, numel: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=generator) * 1e-3 for _ in range(world_size)]


def _relative_error(estimate: torch.Tensor, exact: torch.Tensor) -> float:
    return float((estimate - exact).norm() / exact.norm())


def test_fp32_codec_is_identity():
    rows = torch.randn(3, 5)
    assert torch.equal(make_codec("fp32").roundtrip(rows), rows)


def test_int8_quantises_hand_computed_row():
    # max |x| = 1.27, rms is large enough that clipping does not bind: scale = 0.01.
    rows = torch.tensor([[1.27, -0.635, 0.0, 0.004]])
    encoded = Int8Codec(clip_sigmas=6.0).encode(rows)
    assert encoded.values.tolist() == [[127, -64, 0, 0]]  # -63.5 rounds half to even -> -64
    assert encoded.scales.tolist() == pytest.approx([0.01])


def test_int8_clips_outliers_at_clip_sigmas():
    rows = torch.cat([torch.ones(99), torch.tensor([1000.0])])[None]
    codec = Int8Codec(clip_sigmas=2.0)
    decoded = codec.roundtrip(rows)
    rms = float(rows.pow(2).mean().sqrt())
    assert float(decoded.max()) == pytest.approx(2 * rms, rel=1e-5)
    assert float(decoded[0, 0]) == pytest.approx(1.0, abs=2 * rms / 127)


@pytest.mark.parametrize("name", union_members(CodecName))
def test_every_codec_puts_the_expected_bytes_on_the_wire(name):
    encoded = make_codec(name).encode(torch.randn(4, 1000))
    assert encoded.values.element_size() == sample_of({"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}, name)


def test_codecs_refuse_non_finite_and_wrong_payloads():
    with pytest.raises(CodecError):
        make_codec("fp16").encode(torch.tensor([[float("nan")]]))
    with pytest.raises(CodecError):
        make_codec("fp16").encode(torch.tensor([[1e6]]))
    with pytest.raises(CodecError):
        make_codec("int8").encode(torch.randn(4))
    with pytest.raises(CodecError):
        Int8Codec().decode(EncodedRows(torch.zeros(2, 3, dtype=torch.int8), torch.tensor([1.0])))
    with pytest.raises(CodecError):
        Int8Codec().decode(EncodedRows(torch.zeros(1, 3, dtype=torch.int8), torch.tensor([-1.0])))
    with pytest.raises(CodecError):
        CastCodec(torch.float16).decode(EncodedRows(torch.zeros(1, 3), None))
    with pytest.raises(CodecError):
        make_codec("int4")


@pytest.mark.parametrize(
    ("name", "bound"),
    # Measured on this data (4 workers, 100k Gaussian values each, seed 0): fp32 0, fp16 ~3e-4,
    # bf16 ~2.4e-3, int8 ~1.4e-2. Bounds leave headroom but stay tight enough to catch a broken codec.
    [("fp32", 1e-7), ("fp16", 1e-3), ("bf16", 5e-3), ("int8", 2e-2)],
)
def test_mean_over_four_workers_error_is_bounded(name, bound):
    inputs = _gaussian_inputs(4, 100_003)
    exact = torch.stack(inputs).mean(0)
    results = _reduce_on_threads(inputs, make_codec(name))
    for result in results:
        assert result.shape == exact.shape and result.dtype == torch.float32
        assert torch.equal(result, results[0]), "workers must end with bit-identical means"
    assert _relative_error(results[0], exact) <= bound
