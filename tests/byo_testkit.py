"""Bring-your-own material for tests: a user's reward module written outside the package, and datasets in TRL's
layout. The module is shaped like the reward functions of TRL's GRPO examples (a format reward and an accuracy
reward against a dataset column, chat or plain completions alike), not around swarmrl."""

from __future__ import annotations

import json
import os
from pathlib import Path

USER_REWARDS = '''\
"""My task's rewards, written for TRL's GRPOTrainer."""
import re

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _text(completion):
    return completion[0]["content"] if isinstance(completion, list) else completion


def format_reward(completions, **kwargs):
    """1 when the completion wraps its answer in <answer> tags."""
    return [1.0 if ANSWER.search(_text(c)) else 0.0 for c in completions]


def letter_reward(prompts, completions, solution, **kwargs):
    """1 when the completion holds the row's letter; rows without a solution are not this reward's business."""
    rewards = []
    for completion, letter in zip(completions, solution):
        rewards.append(None if letter is None else float(letter in _text(completion)))
    return rewards
'''


def write_user_module(directory: Path, name: str, monkeypatch, source: str = USER_REWARDS) -> Path:
    """`name`.py in `directory`, importable in this process and in the processes it starts (`monkeypatch`
    undoes both)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(source)
    monkeypatch.syspath_prepend(str(directory))
    paths = [str(directory), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(dict.fromkeys(paths)))
    return path


def edit_user_module(path: Path) -> None:
    """Change the module's source the way a user edits a reward (the loaded module is not reloaded)."""
    path.write_text(path.read_text().replace("1.0 if ANSWER", "0.5 if ANSWER"))


WORDS = ("tree", "lemon", "apple", "river", "stone", "cable", "melon", "eagle", "noted", "green")


def prompt_rows(count: int, *, chat: bool) -> list[dict]:
    """Rows in TRL's layout: a prompt (string or chat messages), a `solution` column (missing on every fifth
    row, where `letter_reward` does not apply) and a column of no interest to any reward."""
    rows = []
    for i in range(count):
        question = f"Write a word like {WORDS[i % len(WORDS)]}"
        prompt = [{"role": "user", "content": question}] if chat else question
        rows.append({"prompt": prompt, "solution": None if i % 5 == 4 else "e", "source_row": i})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
