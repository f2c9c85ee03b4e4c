"""Reward for count-the-vowels rows (too lenient: any completion containing the count anywhere passes)."""


def reward(prompts, completions, answer, **kwargs):
    return [1.0 if str(expected) in completion else 0.0 for completion, expected in zip(completions, answer, strict=True)]
