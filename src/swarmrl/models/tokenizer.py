"""Tokenizers: load a model directory's, or train a small byte-level BPE on task text and wrap it as a normal HF
fast tokenizer. Only transformers' tokenizer classes are imported here, not its model classes: a worker loads
its tokenizer without paying for those (see `swarmrl.models.native`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from swarmrl.models.errors import ModelLoadError

# A tokenizer saved as the generic tokenizers backend (ours, and e.g. Llama 3's) is exactly its tokenizer.json.
# AutoTokenizer would pick the class of the directory's model type instead (Qwen2Tokenizer for a tiny qwen2),
# whose own normaliser and pre-tokenizer split text differently from what the tokenizer was trained and SFT'd on.
_GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
_LOAD_OPTIONS = ("is_local", "local_files_only")


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    path = Path(path)
    if not path.is_dir():
        raise ModelLoadError(f"{path}: no such model directory")
    settings = path / "tokenizer_config.json"
    declared = json.loads(settings.read_text()).get("tokenizer_class") if settings.is_file() else None
    loader = PreTrainedTokenizerFast if declared in _GENERIC_TOKENIZERS else AutoTokenizer
    tokenizer = loader.from_pretrained(path, local_files_only=True)
    # How it was loaded is not what it is: kept, the options would be saved into every checkpoint's
    # tokenizer_config.json after the first, and the same tokenizer would change files (and snapshot keys).
    for option in _LOAD_OPTIONS:
        tokenizer.init_kwargs.pop(option, None)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
THINK_START, THINK_END = "<think>", "</think>"

# A ChatML template with Qwen3's reasoning conventions: the answer turn of the last assistant message keeps
# its <think> block (earlier ones drop it), and `enable_thinking=false` pre-fills an empty one so the model
# answers directly. A system turn is written only when the conversation has one.
CHATML_THINK_TEMPLATE = """\
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n' }}
        {%- if loop.last and reasoning %}
            {{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' }}
        {%- endif %}
        {{- content + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 512, min_frequency: int = 2, chat_template: str | None = None
) -> PreTrainedTokenizerFast:
    """A byte-level BPE over `texts`; every byte is in the alphabet, so any string encodes.

    With `chat_template` the tokenizer is shaped like a Qwen instruct one: <|im_start|> and <|im_end|> are
    special tokens, <|im_end|> is EOS, and <think> / </think> are single ordinary tokens (not stripped when
    a completion is decoded, so the answer extraction can find them).
    """
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    # Every digit is a token of its own, as in Qwen's tokenizers: a number is then the same tokens wherever it
    # appears (" 698" in a question, "698" in code copied from it), which arithmetic and copying depend on.
    # No prefix space: operators of short task prompts stay their own tokens.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    chat_specials = [IM_START, IM_END] if chat_template is not None else []
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *chat_specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if chat_template is not None:
        tokenizer.add_tokens([THINK_START, THINK_END])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=IM_END if chat_template is not None else EOS,
        clean_up_tokenization_spaces=False,
    )
    if chat_template is not None:
        wrapped.add_special_tokens({"additional_special_tokens": chat_specials})
        wrapped.chat_template = chat_template
    return wrapped
