"""One completion as the server sends it: its text so far, cut at the first stop string, and the events that
carry it to the client (a text delta with its tokens' logprobs per sampled token, then the finish).

The engine thread calls `add` for every token and decodes only the newest tokens (with a little context), so
a long completion costs no more per token than a short one. The text a client has been sent never has to be
taken back, so the tail that could still be the start of a stop string (and an incomplete UTF-8 character)
waits until the next token or the finish decides it.
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
    deliver: Callable[
        [Event], None
    ]  # hands the event on to the request's event loop (from the engine thread)
    with_logprobs: bool = True  # the client asked for logprobs: each delta carries its tokens'
    ids: list[int] = field(default_factory=list)
    text: str = ""  # the decoded completion so far, less a character still incomplete
    sent: str = ""
    stopped: bool = False  # a stop string was found
    cancelled: bool = False  # the client went away: stop generating
    # Incremental decoding (as vLLM's detokenizer): ids[_prefix:_read] were decoded last time; decoding from
    # _prefix again gives the tokenizer the context a token's spacing may depend on, without the whole text.
    _prefix: int = 0
    _read: int = 0
    _searched: int = 0  # stop strings were looked for in text[:_searched]

    def add(self, sampled: SampledToken) -> bool:
        """Take one sampled token (engine thread); True asks the engine to end this completion now."""
        if self.stopped or self.cancelled:
            return True
        token = sampled.token
        self.ids.append(token)
        self.text += self._new_text()
        text = self.text
        # A stop string found now ends in the new text: look from where one could start.
        start = max(0, self._searched - max((len(s) for s in self.stop_strings), default=0))
        found = [i for i in (text.find(s, start) for s in self.stop_strings) if i >= 0]
        self._searched = len(text)
        if found:
            text, self.stopped = text[: min(found)], True
        else:
            held = max((len(s) - 1 for s in self.stop_strings), default=0)
            text = text[: len(text) - held] if held else text
        wanted = self.with_logprobs and token not in self.stop_token_ids
        logprobs = (self._logprob(sampled),) if wanted else ()
        self._send(text, logprobs)
        return self.stopped or self.cancelled

    def finish(self, engine_reason: str) -> None:
        """The engine ended this completion (engine thread): send what was held back, then the finish."""
        # Every token was checked for stop strings as it came: unless one was found, all the text is the answer.
        self._send(self.sent if self.stopped else self._text(), ())
        reason = "stop" if self.stopped else FINISH_REASONS[engine_reason]
        self.deliver(Finished(self.choice, reason, len(self.ids)))

    def _text(self) -> str:
        return self._decode(self.ids, skip_special_tokens=True)

    def _decode(self, ids: list[int], *, skip_special_tokens: bool) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        assert isinstance(text, str)  # one sequence of ids decodes to one string
        return text

    def _new_text(self) -> str:
        """The text the newest tokens add, once they make whole characters ("" while one is incomplete)."""
        decode = self._decode
        before = decode(self.ids[self._prefix : self._read], skip_special_tokens=True)
        now = decode(self.ids[self._prefix :], skip_special_tokens=True)
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return now[len(before) :]

    def _logprob(self, sampled: SampledToken) -> TokenLogprob:
        top = tuple(TokenLogprob(self._token(t), lp) for t, lp in sampled.alternatives)
        return TokenLogprob(self._token(sampled.token), sampled.logprob, top)

    def _token(self, token: int) -> str:
        return self._decode([token], skip_special_tokens=False)

    def _send(self, text: str, logprobs: tuple[TokenLogprob, ...]) -> None:
        delta = text[len(self.sent) :] if len(text) > len(self.sent) and text.startswith(self.sent) else ""
        if delta or logprobs:
            self.sent += delta
            self.deliver(Delta(self.choice, delta, logprobs))
