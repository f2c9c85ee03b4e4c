"""Response bodies in OpenAI's shapes: whole responses and stream chunks, for text and chat completions.

Logprobs are those of the distribution each token was sampled from (temperature, top-k, top-p, min-p, penalties
and a response format's mask applied: vLLM's "processed" logprobs, the ones rollouts report), alternatives
included. A token that distribution excludes has logprob −inf, which JSON cannot carry: it is sent as -9999.0,
as vLLM sends it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from swarmrl.serve.completion import Delta, Event, Finished, TokenLogprob


@dataclass
class ChoiceState:
    """What one choice has produced so far."""

    choice: int
    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    completion_tokens: int = 0

    def take(self, event: Event) -> None:
        if isinstance(event, Delta):
            self.text += event.text
            self.logprobs += event.logprobs
        else:
            self.finish_reason, self.completion_tokens = event.finish_reason, event.completion_tokens


class Answer(Protocol):
    """The request being answered (app._Response)."""

    id: str
    created: int
    states: list[ChoiceState]

    @property
    def body(self) -> Any: ...

    @property
    def served(self) -> Any: ...


def _envelope(answer: Answer, kind: str) -> dict[str, Any]:
    return {"id": answer.id, "object": kind, "created": answer.created, "model": answer.served.model_name}


EXCLUDED_LOGPROB = -9999.0


def _finite(logprob: float) -> float:
    return max(logprob, EXCLUDED_LOGPROB)


def _chat_logprobs(answer: Answer, entries: list[TokenLogprob] | tuple[TokenLogprob, ...]) -> dict | None:
    if not answer.body.logprobs:
        return None

    def item(entry: TokenLogprob) -> dict[str, Any]:
        return {"token": entry.token, "logprob": _finite(entry.logprob), "bytes": list(entry.token.encode())}

    return {"content": [{**item(e), "top_logprobs": [item(t) for t in e.top]} for e in entries]}


def _text_alternatives(entry: TokenLogprob) -> dict[str, float]:
    """The most likely tokens, and the sampled one if it is not among them (as vLLM lists them)."""
    listed = {t.token: _finite(t.logprob) for t in entry.top}
    listed.setdefault(entry.token, _finite(entry.logprob))
    return listed


def _text_logprobs(
    answer: Answer, entries: list[TokenLogprob] | tuple[TokenLogprob, ...], start: int
) -> dict | None:
    if answer.body.logprobs is None:
        return None
    offsets, at = [], start
    for entry in entries:
        offsets.append(at)
        at += len(entry.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [_text_alternatives(e) for e in entries] if answer.body.logprobs else None,
        "text_offset": offsets,
    }


def chat_response(answer: Answer, usage: dict[str, int]) -> dict[str, Any]:
    choices = [
        {
            "index": s.choice,
            "message": {"role": "assistant", "content": s.text},
            "logprobs": _chat_logprobs(answer, s.logprobs),
            "finish_reason": s.finish_reason,
        }
        for s in answer.states
    ]
    return {**_envelope(answer, "chat.completion"), "choices": choices, "usage": usage}


def text_response(answer: Answer, usage: dict[str, int]) -> dict[str, Any]:
    choices = [
        {
            "index": s.choice,
            "text": s.text,
            "logprobs": _text_logprobs(answer, s.logprobs, 0),
            "finish_reason": s.finish_reason,
        }
        for s in answer.states
    ]
    return {**_envelope(answer, "text_completion"), "choices": choices, "usage": usage}


def chat_chunk(
    answer: Answer, choice: int, delta: dict[str, str], event: Event | None = None
) -> dict[str, Any]:
    entries = event.logprobs if isinstance(event, Delta) else ()
    part = {
        "index": choice,
        "delta": delta,
        "logprobs": _chat_logprobs(answer, entries) if entries else None,
        "finish_reason": event.finish_reason if isinstance(event, Finished) else None,
    }
    return {**_envelope(answer, "chat.completion.chunk"), "choices": [part]}


def text_chunk(answer: Answer, event: Event) -> dict[str, Any]:
    text = answer.states[event.choice].text
    if isinstance(event, Delta):
        start = len(text) - len(event.text)
        logprobs = _text_logprobs(answer, event.logprobs, start) if event.logprobs else None
        part = {"index": event.choice, "text": event.text, "logprobs": logprobs, "finish_reason": None}
    else:
        part = {"index": event.choice, "text": "", "logprobs": None, "finish_reason": event.finish_reason}
    return {**_envelope(answer, "text_completion"), "choices": [part]}


def usage_chunk(answer: Answer, chat: bool, usage: dict[str, int]) -> dict[str, Any]:
    kind = "chat.completion.chunk" if chat else "text_completion"
    return {**_envelope(answer, kind), "choices": [], "usage": usage}
