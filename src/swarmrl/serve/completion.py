"""One completion as the server sends it: its text so far, cut at the first stop string, and the events that
carry it to the client (a text delta with its tokens' logprobs per sampled token, then the finish).

The engine thread calls `add` for every token; the text a client has been sent never has to be taken back, so
the tail that could still be the start of a stop string (and an incomplete UTF-8 character) waits until the
next token or the finish decides it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from swarmrl.inference.paged.running import SampledToken

# The engine's finish reason → OpenAI's: a stop token or a stop string is "stop", the token limit "length".
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[TokenLogprob, ...] = ()  # the most likely tokens at this position, when asked for


@dataclass(frozen=True)
class Delta:
    choice: int
    text: str
    logprobs: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Finished:
    choice: int
    finish_reason: str
    completion_tokens: int


Event = Delta | Finished


@dataclass
class Completion:
    choice: int
    tokenizer: PreTrainedTokenizerBase
    stop_strings: tuple[str, ...]
    stop_token_ids: frozenset[int]
    deliver: Callable[[Event], None]  # thread-safe: hands the event to the request's event loop
    ids: list[int] = field(default_factory=list)
    sent: str = ""
    stopped: bool = False  # a stop string was found
    cancelled: bool = False  # the client went away: stop generating

    def add(self, sampled: SampledToken) -> bool:
        """Take one sampled token (engine thread); True asks the engine to end this completion now."""
        if self.stopped or self.cancelled:
            return True
        token = sampled.token
        self.ids.append(token)
        text = self._text()
        found = [i for i in (text.find(s) for s in self.stop_strings) if i >= 0]
        if found:
            text, self.stopped = text[: min(found)], True
        else:
            held = max((len(s) - 1 for s in self.stop_strings), default=0)
            text = text[: len(text) - held] if held else text
            text = text.rstrip("\ufffd")  # the rest of a character is still to come
        logprobs = () if token in self.stop_token_ids else (self._logprob(sampled),)
        self._send(text, logprobs)
        return self.stopped or self.cancelled

    def finish(self, engine_reason: str) -> None:
        """The engine ended this completion (engine thread): send what was held back, then the finish."""
        # Every token was checked for stop strings as it came: unless one was found, all the text is the answer.
        self._send(self.sent if self.stopped else self._text(), ())
        reason = "stop" if self.stopped else FINISH_REASONS[engine_reason]
        self.deliver(Finished(self.choice, reason, len(self.ids)))

    def _text(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def _logprob(self, sampled: SampledToken) -> TokenLogprob:
        top = tuple(TokenLogprob(self._token(t), lp) for t, lp in sampled.alternatives)
        return TokenLogprob(self._token(sampled.token), sampled.logprob, top)

    def _token(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)

    def _send(self, text: str, logprobs: tuple[TokenLogprob, ...]) -> None:
        delta = text[len(self.sent) :] if text.startswith(self.sent) else ""
        if delta or logprobs:
            self.sent += delta
            self.deliver(Delta(self.choice, delta, logprobs))
