"""From a task's prompt to the token ids a model sees: one template, shared by SFT, workers and checks."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


def render_prompt(template: str, question: str) -> str:
    return template.replace("{question}", question)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, add_bos: bool) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False).input_ids
    return [tokenizer.bos_token_id, *ids] if add_bos and tokenizer.bos_token_id is not None else ids


def encode_completion(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """A demonstration as the model should emit it: the text then EOS."""
    return [*tokenizer(text, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
