"""Turn text into token ids the way the run's prompt format does, so workers and validators agree.

The first turn is `PromptFormat.ids` (the same prompt ids single-turn work uses). An environment turn is
what the chat template writes between the end of an assistant answer (the model's stop token, which the
model sampled itself) and the start of the next assistant answer: the template rendered with and without
the new user turn, the common prefix cut off. With a plain (template-less) format the turn is its text on
lines of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from swarmrl.envs.errors import EnvError
from swarmrl.models.prompting import PromptFormat, apply_chat_template

_PROBE_ANSWER = "swarmrl-env-probe"


class PromptTurnCodec:
    def __init__(self, fmt: PromptFormat) -> None:
        self.fmt = fmt
        self.stop_token_ids = fmt.stop_token_ids

    def first_ids(self, question: str) -> list[int]:
        return self.fmt.ids(question)

    def env_ids(self, message: str) -> list[int]:
        return self.fmt.tokenizer(self._env_text(message), add_special_tokens=False).input_ids

    def model_text(self, ids: Sequence[int]) -> str:
        body = list(ids)
        if body and body[-1] in self.stop_token_ids:
            body = body[:-1]
        text = self.fmt.tokenizer.decode(body, skip_special_tokens=False)
        assert isinstance(text, str)  # one sequence of ids decodes to one string
        return text

    def _env_text(self, message: str) -> str:
        if not self.fmt.chat:
            return f"\n{message}\n"
        tokenizer, settings = self.fmt.tokenizer, self.fmt.settings
        before = [*self.fmt.messages("?"), {"role": "assistant", "content": _PROBE_ANSWER}]
        after = [*before, {"role": "user", "content": message}]
        text = apply_chat_template(tokenizer, after, settings, tokenize=False, add_generation_prompt=True)
        cut = text.rfind(_PROBE_ANSWER)
        stop = tokenizer.decode([self.stop_token_ids[0]])
        if cut < 0 or not text[cut + len(_PROBE_ANSWER) :].startswith(stop):
            raise EnvError("the chat template does not close an assistant turn with the stop token")
        return text[cut + len(_PROBE_ANSWER) + len(stop) :]
