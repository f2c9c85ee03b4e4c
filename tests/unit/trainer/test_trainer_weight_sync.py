"""In-place weight hand-off from the trainer to an engine's model in the same process (one shared GPU)."""

from __future__ import annotations

import pytest
import torch
from trainer_testkit import tiny_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from swarmrl.trainer.weight_sync import InPlaceCopy, WeightSyncError, push_weights

torch.set_num_threads(1)


def test_engine_weights_are_updated_in_their_own_storage_and_dtype() -> None:
    trainer_model = tiny_model(seed=0)
    engine_model = tiny_model(seed=1).to(torch.bfloat16)
    pointers = {name: p.data_ptr() for name, p in engine_model.named_parameters()}
    sink = InPlaceCopy(engine_model, like=trainer_model)

    push_weights(trainer_model, sink, step=3)

    assert sink.step == 3
    engine = dict(engine_model.named_parameters())
    for name, param in trainer_model.named_parameters():
        assert engine[name].data_ptr() == pointers[name]  # no reallocation: KV cache and graphs stay valid
        assert engine[name].dtype == torch.bfloat16
        assert torch.equal(engine[name], param.detach().to(torch.bfloat16))


def model(hidden_size: int = 32, layers: int = 2) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=hidden_size,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return Qwen2ForCausalLM(config)


def test_a_model_of_another_shape_is_refused_before_any_copy() -> None:
    with pytest.raises(WeightSyncError, match="shape"):
        InPlaceCopy(model(hidden_size=48), like=model())
    with pytest.raises(WeightSyncError, match="no weights for"):
        InPlaceCopy(model(layers=3), like=model())
    with pytest.raises(WeightSyncError, match="has no parameter"):
        InPlaceCopy(model(), like=model(layers=3))
