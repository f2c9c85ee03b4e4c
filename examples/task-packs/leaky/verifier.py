"""Reward: 1.0 when the completion's final answer is the row's answer.

The answer is the content of the last \\boxed{} when there is one, else the last non-empty line.
"""

import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def final_answer(text):
    boxed = BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def reward(prompts, completions, answer, **kwargs):
    scores = []
    for completion, expected in zip(completions, answer, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        scores.append(1.0 if final_answer(text).lower() == expected else 0.0)
    return scores
