"""A LoRA run over shardcast: the base goes out once, each later version is the adapter alone (a delta of a few
percent of the full checkpoint), workers keep the base pinned and merge to the trainer's exact weights."""

from __future__ import annotations

import asyncio

import pytest
import torch
from shardcast_testkit import TRAINER, relay_holds, start_origin, wait_until
from transformers import Qwen2Config, Qwen2ForCausalLM

from swarmrl.configs.shardcast import ClientConfig, RelayConfig
from swarmrl.configs.trainer import LoraSection
from swarmrl.models import save_pretrained_atomic
from swarmrl.models.adapter import fetch_base
from swarmrl.models.checkpoint import read_checkpoint
from swarmrl.shardcast import local_versions
from swarmrl.shardcast.client import CheckpointFetcher
from swarmrl.shardcast.relay import Relay
from swarmrl.steps import BASE_STEP, checkpoint_dir
from swarmrl.trainer.lora import load_lora_policy, save_adapter_checkpoint


def sent_bytes(manifest) -> int:
    """What a client holding the parent downloads: the delta payloads, or every file without a parent."""
    if manifest.delta is None:
        return manifest.total_size
    return sum(entry.payload_size for entry in manifest.delta.entries)


@pytest.mark.slow
def test_adapter_versions_are_small_deltas_and_workers_merge_exactly(tmp_path):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=384,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    root = tmp_path / "trainer"
    save_pretrained_atomic(Qwen2ForCausalLM(config), None, checkpoint_dir(root, BASE_STEP))
    origin, server = start_origin(root, delta=True)
    try:
        full = origin.publish(None, BASE_STEP)
        worker = CheckpointFetcher(
            [server.url],
            TRAINER.node_id,
            tmp_path / "worker",
            ClientConfig(keep_versions=1, pinned_versions=[BASE_STEP]),
            run_id="test-run",
        )
        assert worker.refresh()[0] == BASE_STEP
        adapter = load_lora_policy(root, BASE_STEP, LoraSection(enabled=True, r=4))
        generator = torch.Generator().manual_seed(1)
        for step in (1, 2, 3):
            with torch.no_grad():  # what an optimizer step does to the adapters
                for name, param in adapter.named_parameters():
                    if "lora_" in name:
                        param.add_(1e-3 * torch.randn(param.shape, generator=generator))
            save_adapter_checkpoint(root, step, adapter)
            manifest = origin.publish(None, step)
            ratio = sent_bytes(manifest) / full.total_size
            print(
                f"step {step}: sent {sent_bytes(manifest)} of a {full.total_size}-byte full checkpoint ({ratio:.4f})"
            )
            assert manifest.delta is not None and ratio < 0.05
            newest, path = worker.refresh()
            assert newest == step
            fetch_base(path, worker.fetch, worker.config.pinned_versions)
        # keep_versions=1 dropped steps 1 and 2, never the pinned base.
        assert local_versions(tmp_path / "worker") == [BASE_STEP, 3]
        mine, theirs = read_checkpoint(path), read_checkpoint(checkpoint_dir(root, 3))
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[name], theirs[name]) for name in mine)

        # A relay started late, keeping one version, still mirrors the pinned base and never collects it;
        # a worker joining late through it gets the newest adapter, then its base.
        relay = Relay(
            RelayConfig(
                upstreams=[server.url],
                data_dir=tmp_path / "relay",
                keep_versions=1,
                gc_grace_s=0,
                pinned_versions=[BASE_STEP],
            ),
            TRAINER.node_id,
        )
        relay_server = relay.serve_in_thread()
        try:
            wait_until(lambda: relay_holds(relay, 3) and relay_holds(relay, BASE_STEP), timeout=60)
            late = CheckpointFetcher(
                [relay_server.url], TRAINER.node_id, tmp_path / "late", ClientConfig(), run_id="test-run"
            )
            newest, path = late.refresh()
            assert newest == 3 and local_versions(tmp_path / "late") == [3]
            fetch_base(path, late.fetch, late.config.pinned_versions)
            assert local_versions(tmp_path / "late") == [BASE_STEP, 3]
            assert late.config.pinned_versions == [BASE_STEP]
            assert all(torch.equal(read_checkpoint(path)[name], theirs[name]) for name in theirs)
            assert (
                asyncio.run_coroutine_threadsafe(relay.collect_garbage(), relay_server.loop).result(10) == []
            )
            assert relay.store.versions() == [BASE_STEP, 3]
        finally:
            relay_server.stop()
    finally:
        server.stop()
