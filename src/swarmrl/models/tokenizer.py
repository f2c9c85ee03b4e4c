"""Train a small byte-level BPE tokenizer on task text and wrap it as a normal HF fast tokenizer."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 512, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """A byte-level BPE over `texts`; every byte is in the alphabet, so any string encodes."""
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    # No prefix space: digits and operators of short task prompts stay their own tokens.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        clean_up_tokenization_spaces=False,
    )
