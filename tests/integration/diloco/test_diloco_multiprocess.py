"""Real worker processes on 127.0.0.1 over gloo (tiny model, few steps)."""

import math

import pytest
import torch

from swarmrl.configs.diloco import ByteCorpusConfig, DiLoCoConfig, ThrottleConfig, TinyModelConfig
from swarmrl.diloco.launcher import launch

torch.set_num_threads(1)

TINY = dict(
    workers=2,
    total_steps=12,
    inner_steps=4,
    model=TinyModelConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1),
    data=ByteCorpusConfig(max_bytes=1_000_000, seq_len=32, batch_size=2, eval_batches=2),
)


@pytest.mark.slow
@pytest.mark.swarm
@pytest.mark.timeout(120)
def test_two_workers_diloco_int8_agree_after_the_last_sync():
    report = launch(DiLoCoConfig(codec="int8", **TINY))
    first, second = report.workers
    assert math.isfinite(first.eval_loss) and first.eval_loss < math.log(258)
    # Both workers hold the same global weights after the final outer step.
    assert first.eval_loss == second.eval_loss
    # 3 syncs of reduce-scatter + all-gather at 1 byte/param (+ 4-byte scale per row), n = 2.
    chunk = math.ceil(report.parameters / 2)
    per_sync = 2 * (chunk + 4) // 2 + (chunk + 4)
    assert first.sync_events == 3 and first.bytes_sent == 3 * per_sync
    assert 0 < first.compute_utilisation <= 1


@pytest.mark.slow
@pytest.mark.swarm
@pytest.mark.timeout(120)
def test_two_workers_ddp_baseline_counts_every_step():
    report = launch(DiLoCoConfig(mode="ddp", **TINY))
    first, second = report.workers
    assert first.eval_loss == second.eval_loss
    # Ring all-reduce of fp32 gradients every step: 2 (n - 1) / n x 4 bytes x params, n = 2.
    assert first.bytes_sent == 12 * 4 * report.parameters


@pytest.mark.slow
@pytest.mark.swarm
@pytest.mark.timeout(180)
def test_streaming_fragments_lower_peak_traffic_on_a_throttled_link():
    throttle = ThrottleConfig(enabled=True, bandwidth_mbit=100.0, latency_ms=5.0)
    plain = launch(DiLoCoConfig(codec="fp16", throttle=throttle, **TINY))
    streaming = launch(DiLoCoConfig(codec="fp16", fragments=4, overlap_steps=1, throttle=throttle, **TINY))
    assert streaming.bytes_sent_per_worker == pytest.approx(plain.bytes_sent_per_worker, rel=0.01)
    assert streaming.peak_bytes_per_sync < plain.peak_bytes_per_sync / 2
    assert all(math.isfinite(w.eval_loss) for w in streaming.workers)
