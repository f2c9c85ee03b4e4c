import time

import pytest
import torch

from swarmrl.configs.diloco import ByteCorpusConfig, DiLoCoConfig
from swarmrl.diloco.codecs import EncodedRows
from swarmrl.diloco.communicators.base import all_gather_bytes, all_to_all_bytes, ring_all_reduce_bytes
from swarmrl.diloco.communicators.throttled import SimulatedLink
from swarmrl.diloco.config_file import load_diloco_config
from swarmrl.diloco.data import BatchSampler, fixed_eval_batches, load_corpus_split
from swarmrl.diloco.errors import CorpusError, DiLoCoConfigError
from swarmrl.diloco.reduce import pack_rows, unpack_rows

torch.set_num_threads(1)


def _write_corpus(root, n_files=40):
    for i in range(n_files):
        (root / f"mod_{i:02d}.py").write_text(f"# module {i}\n" + f"def f_{i}(x):\n    return x * {i}\n" * 20)


def test_split_is_deterministic_disjoint_and_sharded(tmp_path):
    _write_corpus(tmp_path)
    config = ByteCorpusConfig(root=tmp_path, eval_fraction=0.2, seq_len=16)
    shards = [load_corpus_split(config, rank, 2) for rank in range(2)]
    again = load_corpus_split(config, 0, 2)
    assert torch.equal(shards[0].train_tokens, again.train_tokens)
    assert torch.equal(shards[0].eval_tokens, shards[1].eval_tokens)
    total = sum(p.stat().st_size + 1 for p in tmp_path.glob("*.py"))
    covered = shards[0].train_tokens.numel() + shards[1].train_tokens.numel() + shards[0].eval_tokens.numel()
    assert covered == total  # every file lands in exactly one place
    assert int(shards[0].train_tokens.max()) < 258


def test_tiny_corpus_is_refused_with_a_named_error(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(CorpusError, match="too small"):
        load_corpus_split(ByteCorpusConfig(root=tmp_path, seq_len=64), 0, 1)
    with pytest.raises(CorpusError, match="no .py files"):
        load_corpus_split(ByteCorpusConfig(root=tmp_path / "missing"), 0, 1)


def test_sampler_resumes_from_its_state_and_eval_batches_are_fixed():
    tokens = torch.arange(1000)
    sampler = BatchSampler(tokens, seq_len=8, batch_size=3, seed=5)
    sampler.next_batch()
    state = sampler.state_dict()
    expected = sampler.next_batch()
    resumed = BatchSampler(tokens, seq_len=8, batch_size=3, seed=99)
    resumed.load_state_dict(state)
    assert torch.equal(resumed.next_batch(), expected)
    assert expected.shape == (3, 9)
    first, again = fixed_eval_batches(tokens, 8, 2, 3), fixed_eval_batches(tokens, 8, 2, 3)
    assert len(first) == 3 and all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_config_file_loading_overrides_and_errors(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[diloco]\nworkers = 3\ninner_steps = 10\ncodec = "int8"\n[diloco.outer]\nlr = 0.5\n')
    config = load_diloco_config(path, {"inner_steps": 20, "codec": None})
    assert (config.workers, config.inner_steps, config.codec, config.outer.lr) == (3, 20, "int8", 0.5)
    path.write_text("[diloco]\ncodec = 'int4'\n")
    with pytest.raises(DiLoCoConfigError, match="codec"):
        load_diloco_config(path)
    path.write_text("[diloco\n")
    with pytest.raises(DiLoCoConfigError):
        load_diloco_config(path)
    with pytest.raises(DiLoCoConfigError):
        load_diloco_config(tmp_path / "absent.toml")
    with pytest.raises(ValueError, match="fragments"):
        DiLoCoConfig(inner_steps=4, fragments=5)


def test_wire_byte_model_matches_ring_algorithms():
    # 4 workers, 1000-byte payload: ring all-reduce sends 2·3/4·1000; all-to-all keeps 1/4; all-gather of a
    # 250-byte piece forwards 3 pieces.
    assert ring_all_reduce_bytes(1000, 4) == 1500
    assert all_to_all_bytes(1000, 4) == 750
    assert all_gather_bytes(250, 4) == 750
    assert ring_all_reduce_bytes(1000, 1) == 0


def test_simulated_link_charges_latency_plus_bandwidth_and_queues_transfers():
    link = SimulatedLink(bandwidth_bps=8e6, latency_s=0.01)  # 1 MB/s
    assert link.transfer_seconds(10_000) == pytest.approx(0.02)
    started = time.perf_counter()
    link.transmit(10_000)
    link.transmit(10_000)
    assert time.perf_counter() - started >= 0.04 - 1e-3


def test_scales_travel_inside_the_row_payload():
    encoded = EncodedRows(torch.tensor([[1, -2], [3, 4]], dtype=torch.int8), torch.tensor([0.5, 2.0]))
    packed = pack_rows(encoded)
    assert packed.shape == (2, 6) and packed.dtype == torch.int8
    unpacked = unpack_rows(packed, scaled=True)
    assert torch.equal(unpacked.values, encoded.values) and torch.equal(unpacked.scales, encoded.scales)
