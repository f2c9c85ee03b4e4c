"""A trained tiny tokenizer reloads from a checkpoint as the same tokenizer: the ids SFT trained on are the
ids workers, validators and the trainer use (the directory's model type must not swap in its own class)."""

import pytest

from swarmrl.configs.model import TinyModelSpec
from swarmrl.models import build_tiny_model, load_tokenizer, save_pretrained_atomic, train_tokenizer
from swarmrl.models.tokenizer import CHATML_THINK_TEMPLATE

TEXT = "What is 698 * 791?\n```python\nprint(698 * 791)\n```\n<output>\n552118\n</output>\n<answer>552118</answer>"


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama"])
@pytest.mark.parametrize("chat_template", [None, CHATML_THINK_TEMPLATE])
def test_a_checkpoint_tokenizes_like_the_tokenizer_it_was_saved_with(tmp_path, arch, chat_template):
    tokenizer = train_tokenizer(
        [TEXT.replace("698", str(n)) for n in range(100, 160)], vocab_size=300, chat_template=chat_template
    )
    spec = TinyModelSpec(arch=arch, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, tmp_path / "ckpt")
    loaded = load_tokenizer(tmp_path / "ckpt")
    for text in (TEXT, "What is 12 * 3456?", " spaced  out\n\nlines 0042"):
        assert (
            loaded(text, add_special_tokens=False).input_ids
            == tokenizer(text, add_special_tokens=False).input_ids
        )
    assert len(loaded) == len(tokenizer) and loaded.all_special_tokens == tokenizer.all_special_tokens
    assert loaded.chat_template == tokenizer.chat_template
