"""`response_format` as constrained decoding: llguidance (the grammar engine vLLM and SGLang use) compiles a
JSON schema — `{"type": "object"}` for `json_object` — into a matcher that says, before every token, which
tokens keep the output a prefix of an accepted document. The engine removes the others before its seeded
choice (`inference.processing`), so every completion that ends with a stop token is valid JSON; one cut by
`max_tokens` ends with finish reason "length", as OpenAI's does. Documents are compact (no whitespace between
their tokens; strings may hold any).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from swarmrl.serve.schema import ResponseFormat

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # declared in its stub only

_BITS = torch.arange(32, dtype=torch.int32)
# No whitespace between tokens of the document: free whitespace lets a model pad a document without end.
_COMPACT: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


class FormatError(ValueError):
    """A response_format the grammar engine cannot compile (a malformed or unsupported JSON schema)."""


class GrammarConstraint:
    """One completion's matcher as the engine's `TokenConstraint`."""

    def __init__(self, matcher: Any, stop_token_ids: Sequence[int]) -> None:
        self.matcher = matcher
        self.stop_token_ids = list(stop_token_ids)

    def allowed(self, vocab_size: int) -> torch.Tensor:
        mask = torch.zeros(vocab_size, dtype=torch.bool)
        if not self.matcher.is_error():
            words = torch.frombuffer(bytearray(self.matcher.compute_bitmask()), dtype=torch.int32)
            bits = ((words[:, None] >> _BITS) & 1).flatten().bool()[:vocab_size]
            mask[: bits.numel()] = bits
        if self.matcher.is_accepting() or self.matcher.is_error() or not mask.any():
            # A whole document (or a matcher that can go no further) may end here, and only with a stop token.
            mask[self.stop_token_ids] = True
        return mask

    def advance(self, token: int) -> None:
        if token not in self.stop_token_ids:
            self.matcher.consume_token(token)


class Grammars:
    """Compiles response formats against the served tokenizer (its llguidance view built once, on first use)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, vocab_size: int, stop_token_ids: Sequence[int]
    ) -> None:
        self.tokenizer, self.vocab_size, self.stop_token_ids = tokenizer, vocab_size, list(stop_token_ids)
        self._lock = threading.Lock()
        self._ll_tokenizer: Any = None

    def constraints(
        self, response_format: ResponseFormat | None, count: int
    ) -> list[GrammarConstraint] | None:
        """`count` fresh constraints (one per completion) for the format, or None for plain text. Blocks for as
        long as the schema takes to compile: call it off the event loop."""
        if response_format is None or response_format.type == "text":
            return None
        try:
            import llguidance
        except ImportError as exc:
            raise FormatError("response_format needs llguidance: pip install 'swarmrl[serve]'") from exc

        schema = {"type": "object"} if response_format.type == "json_object" else None
        if schema is None:
            assert response_format.json_schema is not None  # the schema model checks it
            schema = response_format.json_schema.json_schema
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=_COMPACT)
        except ValueError as exc:
            raise FormatError(f"response_format: {exc}") from exc
        tokenizer = self._tokenizer()
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
        if is_error:
            raise FormatError(f"response_format: the JSON schema is not supported: {messages[0]}")
        return [
            GrammarConstraint(llguidance.LLMatcher(tokenizer, grammar), self.stop_token_ids)
            for _ in range(count)
        ]

    def _tokenizer(self) -> Any:
        with self._lock:
            if self._ll_tokenizer is None:
                import llguidance.hf

                tokenizer = self.tokenizer
                if not isinstance(tokenizer, PreTrainedTokenizerFast):
                    raise FormatError(
                        f"response_format needs a fast tokenizer, not {type(tokenizer).__name__}"
                    )
                try:
                    self._ll_tokenizer = llguidance.hf.from_tokenizer(
                        tokenizer, n_vocab=self.vocab_size, eos_token=self.stop_token_ids
                    )
                except ValueError as exc:
                    raise FormatError(f"response_format needs a fast tokenizer: {exc}") from exc
            return self._ll_tokenizer
