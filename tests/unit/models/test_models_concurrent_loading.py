"""Models built by several threads of one process at once (a trainer beside a local worker or an evaluator):
transformers swaps process-wide functions while it builds, so unserialised builds can leave one swapped for
good, after which no later model ties its LM head. Each load here must come back whole, and so must the next."""

from concurrent.futures import ThreadPoolExecutor

import torch
from transformers.modeling_utils import PreTrainedModel

from swarmrl.configs.model import TinyModelSpec
from swarmrl.models import build_tiny_model, load_model, save_pretrained_atomic, train_tokenizer
from swarmrl.models.loading import model_skeleton


def _tied(model) -> bool:
    return model.lm_head.weight is model.model.embed_tokens.weight


def test_threads_loading_at_once_leave_every_model_tied_and_no_function_swapped(tmp_path):
    torch.set_num_threads(1)
    tokenizer = train_tokenizer([f"{n} plus {n} is {2 * n}" for n in range(200)], vocab_size=280)
    spec = TinyModelSpec(arch="qwen2", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, tmp_path / "ckpt")
    original = PreTrainedModel.tie_weights, PreTrainedModel.init_weights

    def load(i: int):
        return load_model(tmp_path / "ckpt") if i % 2 else model_skeleton(tmp_path / "ckpt")

    with ThreadPoolExecutor(max_workers=4) as pool:
        models = list(pool.map(load, range(48)))
    assert all(_tied(m) for m in models)
    assert (PreTrainedModel.tie_weights, PreTrainedModel.init_weights) == original
    assert _tied(load_model(tmp_path / "ckpt"))
