"""Rewards for sums, written as for TRL's GRPOTrainer: f(prompts, completions, **columns) -> list[float | None]."""

import re


def _text(completion):  # chat prompts get chat completions: [{"role": "assistant", "content": ...}]
    return completion[0]["content"] if isinstance(completion, list) else completion


def correct(completions, answer, **kwargs):
    """1 when the last number of the completion is the `answer` column; rows without one: None."""
    last = [(re.findall(r"-?\d+", _text(c)) or [None])[-1] for c in completions]
    return [None if a is None else float(n == str(a)) for n, a in zip(last, answer, strict=True)]


def brief(completions, **kwargs):
    """A little for answering in few words."""
    return [0.2 if len(_text(c).split()) <= 3 else 0.0 for c in completions]
