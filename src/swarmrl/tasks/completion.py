"""The text of a completion as every verifier reads it (trainer, validator, evaluations and filters alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def completion_text(tokenizer: PreTrainedTokenizerBase, completion_ids: list[int]) -> str:
    """The answer text a verifier sees: special tokens dropped, and the space after the prompt's colon too."""
    text = tokenizer.decode(completion_ids, skip_special_tokens=True)
    assert isinstance(text, str)  # one sequence of ids decodes to one string
    return text.strip()
