"""LoRA: only adapters train, adapter checkpoints merge to peft's own merged model, and they are small."""

from __future__ import annotations

import copy

import pytest
import torch
from trainer_testkit import random_examples, scored_rows, tiny_model

from swarmrl.configs import RunConfig
from swarmrl.configs.trainer import LoraSection
from swarmrl.models import load_model, save_pretrained_atomic
from swarmrl.models.adapter import ADAPTER_CONFIG, ADAPTER_WEIGHTS, AdapterError, read_adapter_config
from swarmrl.models.checkpoint import WeightLoadError, read_checkpoint
from swarmrl.models.optim import build_optimizer
from swarmrl.trainer.batch import plan_step
from swarmrl.trainer.checkpoint import checkpoint_dir, list_checkpoints, save_checkpoint
from swarmrl.trainer.lora import LoraRunError, load_lora_policy, save_adapter_checkpoint, wrap_lora
from swarmrl.trainer.policy import PackedPolicy
from swarmrl.trainer.train import run_trainer, train_step

torch.set_num_threads(1)


def lora(**overrides) -> LoraSection:
    return LoraSection(enabled=True, **overrides)


def randomise_adapters(peft_model, seed: int = 1) -> None:
    """peft starts B at zero (the adapter is a no-op); give it weights so the merge has work to do."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))


@pytest.fixture()
def base_run(tmp_path):
    """A checkpoint root whose step_0 is a tiny model's full weights."""
    save_pretrained_atomic(tiny_model(), None, checkpoint_dir(tmp_path, 0))
    return tmp_path


def test_a_lora_step_changes_only_the_adapters():
    model = tiny_model()
    peft_model = wrap_lora(model, lora(r=4))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    policy = PackedPolicy(model, attention="eager")
    optimizer, scheduler = build_optimizer(model, 1e-2, 0.0, (0.9, 0.99), 0)
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    adapters = {id(p) for name, p in model.named_parameters() if "lora_" in name}
    assert trained == adapters and adapters
    step = plan_step(
        scored_rows(random_examples(8)), pad_token_id=0, minibatches=1, micro_batch_tokens=64, pack_length=32
    )
    metrics = train_step(policy, optimizer, scheduler, step, RunConfig(), device=torch.device("cpu"))
    assert metrics["grad_norm"] > 0
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed, "the step changed nothing"
    assert all("lora_B" in name for name in changed), sorted(changed)[:5]  # A's gradient is 0 while B is 0
    assert len(changed) == sum("lora_B" in name for name in before)
    assert peft_model.peft_config["default"].r == 4


def test_merged_checkpoint_equals_peft_merge_and_unload(base_run):
    peft_model = load_lora_policy(base_run, 0, lora(r=4, alpha=8.0))
    randomise_adapters(peft_model)
    path = save_adapter_checkpoint(base_run, 1, peft_model)
    assert read_adapter_config(path)["base_model_name_or_path"] == "step_0"
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    reference = copy.deepcopy(peft_model).merge_and_unload().eval()
    merged = load_model(path, "float32", attn_implementation="eager").eval()
    merged_state, reference_state = merged.state_dict(), reference.state_dict()
    assert merged_state.keys() == reference_state.keys()
    for name, tensor in reference_state.items():
        torch.testing.assert_close(merged_state[name], tensor, rtol=1e-6, atol=1e-6, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, reference(ids).logits, rtol=1e-5, atol=1e-5)
        # The adapter moved the model: the comparison is not between two copies of the base.
        base = load_model(checkpoint_dir(base_run, 0), "float32", attn_implementation="eager").eval()
        assert (base(ids).logits - merged(ids).logits).abs().max() > 1e-2


def test_the_merge_gives_the_same_bits_whatever_the_thread_count(base_run):
    peft_model = load_lora_policy(base_run, 0, lora(r=8))
    randomise_adapters(peft_model, seed=5)
    path = save_adapter_checkpoint(base_run, 1, peft_model)
    first = read_checkpoint(path)
    torch.set_num_threads(2)
    try:
        second = read_checkpoint(path)
    finally:
        torch.set_num_threads(1)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_the_adapter_checkpoint_is_under_5_percent_of_the_full_one(tmp_path):
    # A small config of the published shape family: a 256-wide, 1024-MLP model, adapters on every linear.
    from transformers import Qwen2Config, Qwen2ForCausalLM

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
    save_pretrained_atomic(Qwen2ForCausalLM(config), None, checkpoint_dir(tmp_path, 0))
    path = save_adapter_checkpoint(tmp_path, 1, load_lora_policy(tmp_path, 0, lora(r=4)))
    full = sum(f.stat().st_size for f in checkpoint_dir(tmp_path, 0).iterdir())
    adapter = sum(f.stat().st_size for f in path.iterdir())
    ratio = adapter / full
    print(f"full checkpoint {full} bytes, adapter checkpoint {adapter} bytes, ratio {ratio:.4f}")
    assert ratio < 0.05
    assert not list(path.glob("model*.safetensors")), "an adapter checkpoint carries no base weights"


def test_pruning_keeps_the_base_and_resume_loads_the_adapter(base_run):
    peft_model = load_lora_policy(base_run, 0, lora(r=4))
    for step in (1, 2, 3):
        randomise_adapters(peft_model, seed=step)
        save_adapter_checkpoint(base_run, step, peft_model, keep=2)
    assert list_checkpoints(base_run) == [0, 2, 3]
    resumed = load_lora_policy(base_run, 3, lora(r=4))
    for (name, want), (_, got) in zip(peft_model.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(want, got), name


def test_full_weights_where_an_adapter_belongs_are_refused(base_run):
    save_checkpoint(base_run, 1, tiny_model(), None)
    with pytest.raises(LoraRunError, match="not trained with"):
        load_lora_policy(base_run, 1, lora())


def test_an_adapter_without_its_base_is_named(base_run, tmp_path):
    path = save_adapter_checkpoint(base_run, 1, load_lora_policy(base_run, 0, lora()))
    alone = tmp_path / "elsewhere" / "step_1"
    alone.parent.mkdir()
    path.rename(alone)
    with pytest.raises(WeightLoadError, match="step_0, which is not here"):
        read_checkpoint(alone)


def test_lora_features_the_merge_lacks_are_refused(base_run):
    path = save_adapter_checkpoint(base_run, 1, load_lora_policy(base_run, 0, lora()))
    config_file = path / ADAPTER_CONFIG
    config_file.write_text(config_file.read_text().replace('"use_dora": false', '"use_dora": true'))
    with pytest.raises(AdapterError, match="use_dora"):
        read_adapter_config(path)
    assert (path / ADAPTER_WEIGHTS).is_file()


def test_head_and_embedding_adapters_are_refused():
    with pytest.raises(ValueError, match="lm_head"):
        LoraSection(enabled=True, target_modules=["q_proj", "lm_head"])


def test_lora_with_an_island_merge_or_an_in_process_engine_is_refused(tmp_path):
    config = RunConfig.model_validate(
        {"run": {"root": str(tmp_path)}, "trainer": {"lora": {"enabled": True}}}
    )
    with pytest.raises(ValueError, match="merged full weights"):
        run_trainer(config, collect=lambda step: ([], None), after_step=lambda step, model: None)
