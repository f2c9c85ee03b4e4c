"""From a task's prompt to the token ids a model sees, and the tokens that end its answer.

One `PromptFormat` per (tokenizer, `[prompt]` settings) serves every place that builds prompts: SFT, the
workers, the validator's rebuild of the assigned prompts, evaluation and the offline filter. The validator
must reproduce a worker's prompt ids exactly, so nothing else in the code turns task text into prompt ids.

Two formats:
  chat   the tokenizer's chat template (`apply_chat_template` with the generation prompt): an optional
         system turn, the user turn, and whatever the template adds for the assistant, e.g. Qwen3's empty
         ``<think></think>`` when `enable_thinking` is false. The template places its own BOS.
  plain  `template` with ``{question}`` replaced, optionally after BOS: for base models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmrl.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swarmrl.configs.model import PromptSection

# A chat prompt as a dataset holds it: [{"role": ..., "content": ...}, ...], ending on a user turn.
Conversation = Sequence[Mapping[str, str]]
# Stands in for an assistant answer when probing which token a chat template closes a turn with.
_PROBE_ANSWER = "swarmrl-probe-answer"


class PromptError(UserError, ValueError):
    """The prompt settings do not fit the tokenizer (no chat template, a stop token it lacks, a broken template)."""


@dataclass(frozen=True)
class PromptFormat:
    """How this run turns task text into model input, resolved against one tokenizer."""

    tokenizer: PreTrainedTokenizerBase
    settings: PromptSection
    chat: bool
    # Every token that ends a completion; the first is the one a demonstration ends with (end of turn or EOS).
    stop_token_ids: tuple[int, ...]

    def messages(self, question: str, conversation: Conversation | None = None) -> list[dict[str, str]]:
        """The conversation sent to the chat template: the system turn (when set), then the user turn.

        `conversation` is a dataset's own chat prompt: its turns as given, `question` (the task text, with any
        length instruction) as its last user turn, and the run's system turn first when it has none.
        """
        if conversation is not None:
            turns = [*map(dict, conversation[:-1]), {"role": "user", "content": question}]
            if self.settings.system is None or any(turn["role"] == "system" for turn in turns):
                return turns
            return [{"role": "system", "content": self.settings.system}, *turns]
        user = {"role": "user", "content": fill(self.settings.user_template, question)}
        if self.settings.system is None:
            return [user]
        return [{"role": "system", "content": self.settings.system}, user]

    def text(self, question: str, conversation: Conversation | None = None) -> str:
        """The prompt as text (for people and corpora; the model gets `ids`)."""
        if not self.chat:
            self._plain(conversation)
            return fill(self.settings.template, question)
        messages = self.messages(question, conversation)
        return apply_chat_template(self.tokenizer, messages, self.settings, tokenize=False)

    def ids(self, question: str, conversation: Conversation | None = None) -> list[int]:
        """The prompt token ids: exactly what a worker sends to its model and the validator expects."""
        if self.chat:
            messages = self.messages(question, conversation)
            return list(apply_chat_template(self.tokenizer, messages, self.settings, tokenize=True))
        ids = self.tokenizer(self.text(question, conversation), add_special_tokens=False).input_ids
        bos = self.tokenizer.bos_token_id
        return [bos, *ids] if self.settings.add_bos and bos is not None else ids

    @staticmethod
    def _plain(conversation: Conversation | None) -> None:
        if conversation is not None:
            raise PromptError(
                "a task's prompt is a list of chat messages, which only a chat template can render: "
                "set prompt.format = 'chat' (the tokenizer needs a chat template)"
            )

    def completion_ids(self, text: str) -> list[int]:
        """A demonstration as the model should emit it: the text, then the token that ends its turn."""
        return [*self.tokenizer(text, add_special_tokens=False).input_ids, self.stop_token_ids[0]]


def fill(template: str, question: str) -> str:
    """`template` with {question} replaced (only that: task text may hold braces of its own)."""
    return template.replace("{question}", question)


def prompt_format(tokenizer: PreTrainedTokenizerBase, settings: PromptSection) -> PromptFormat:
    """Resolve `settings.format` against `tokenizer`; PromptError when they do not fit together."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if settings.format == "chat" and not has_template:
        raise PromptError(
            "prompt.format is 'chat' but the tokenizer has no chat template; "
            "use prompt.format = 'plain' for a base model"
        )
    chat = settings.format == "chat" or (settings.format == "auto" and has_template)
    return PromptFormat(tokenizer, settings, chat, stop_token_ids(tokenizer, settings, chat))


def stop_token_ids(
    tokenizer: PreTrainedTokenizerBase, settings: PromptSection, chat: bool
) -> tuple[int, ...]:
    """End of turn (chat), EOS, the model's generation EOS list, then `settings.stop_tokens`, each once."""
    ids: list[int] = []
    if chat:
        end_of_turn = _end_of_turn_id(tokenizer, settings)
        if end_of_turn is not None:
            ids.append(end_of_turn)
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    ids += _generation_eos_ids(tokenizer)
    for token in settings.stop_tokens:
        ids.append(_single_token_id(tokenizer, token))
    if not ids:
        raise PromptError("no stop token: the tokenizer has no EOS and the chat template closes no turn")
    return tuple(dict.fromkeys(ids))


def _end_of_turn_id(tokenizer: PreTrainedTokenizerBase, settings: PromptSection) -> int | None:
    """The special token the template writes right after an assistant's answer (<|im_end|>, <|eot_id|>, ...)."""
    probe = [
        {"role": "user", "content": "?"},
        {"role": "assistant", "content": _PROBE_ANSWER},
    ]
    text = apply_chat_template(tokenizer, probe, settings, tokenize=False, add_generation_prompt=False)
    _, found, after = text.rpartition(_PROBE_ANSWER)
    if not found or not after:
        return None
    first = tokenizer(after, add_special_tokens=False).input_ids[:1]
    special = set(tokenizer.all_special_ids)
    return first[0] if first and first[0] in special else None


def _generation_eos_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """`eos_token_id` of the generation_config.json saved beside the tokenizer (a checkpoint directory).

    Models list every token that ends an answer there (Qwen: <|im_end|> and <|endoftext|>; Llama 3:
    <|end_of_text|>, <|eom_id|>, <|eot_id|>). Worker and validator load the tokenizer from the same
    checkpoint, so both see the same list.
    """
    if not tokenizer.name_or_path:
        return []
    path = Path(tokenizer.name_or_path) / "generation_config.json"
    if not path.is_file():
        return []
    try:
        eos = json.loads(path.read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError) as exc:
        raise PromptError(f"{path}: unreadable generation config ({exc})") from exc
    eos = [eos] if isinstance(eos, int) else eos or []
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(tokenizer) for i in eos):
        raise PromptError(f"{path}: eos_token_id {eos!r} is not a list of this tokenizer's token ids")
    return list(eos)


def _single_token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    ids = tokenizer(token, add_special_tokens=False).input_ids
    if len(ids) != 1:
        raise PromptError(f"stop token {token!r} is not one token of this tokenizer (it encodes to {ids})")
    return ids[0]


def apply_chat_template(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, str]],
    settings: PromptSection,
    *,
    tokenize: bool,
    add_generation_prompt: bool = True,
) -> Any:
    """The tokenizer's chat template over `messages` with the [prompt] section's template variables."""
    kwargs = dict(settings.chat_template_kwargs)
    if settings.enable_thinking is not None:
        kwargs["enable_thinking"] = settings.enable_thinking
    try:
        return tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=add_generation_prompt,
            tokenize=tokenize,
            return_dict=False,
            **kwargs,
        )
    except Exception as exc:  # noqa: BLE001 — a template raises whatever its Jinja code raises
        raise PromptError(f"the chat template cannot render a {messages[-1]['role']} turn: {exc}") from exc
