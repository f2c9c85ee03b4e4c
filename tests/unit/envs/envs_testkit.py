"""A character-level codec, scripted environments and a scripted generator for the pure envs tests."""

from __future__ import annotations

from collections.abc import Sequence

from swarmrl.envs.base import EnvStep
from swarmrl.envs.trajectory import Generation
from swarmrl.tasks.task import Task

STOP = 0
ENV_MARK = 1


class CharCodec:
    """Token = code point; the model's turn ends with token 0; an environment turn starts with token 1."""

    stop_token_ids = (STOP,)

    def first_ids(self, question: str) -> list[int]:
        return [ord(c) for c in question]

    def env_ids(self, message: str) -> list[int]:
        return [ENV_MARK, *(ord(c) for c in message)]

    def model_text(self, ids: Sequence[int]) -> str:
        return "".join(chr(t) for t in ids if t != STOP)


def encode_turn(text: str, stop: bool = True) -> list[int]:
    return [ord(c) for c in text] + ([STOP] if stop else [])


class CountdownEnv:
    """Done when the model says "yes"; otherwise answers "again N" (N = turns so far)."""

    def __init__(self) -> None:
        self.turns = 0

    def reset(self, task: Task, seed: int) -> str:
        self.turns = 0
        return f"Q{seed}"

    def step(self, model_turn: str) -> EnvStep:
        self.turns += 1
        if model_turn == "yes":
            return EnvStep(None, 1.0, True)
        return EnvStep(f"again {self.turns}", 0.0, False)


class ScriptedGenerator:
    """Replies per row from a script of turn texts; records each call's prefixes and budgets."""

    def __init__(self, scripts: list[list[str]]) -> None:
        self.scripts = [list(s) for s in scripts]
        self.calls: list[tuple[list[list[int]], list[int]]] = []

    def __call__(self, rows: list[int], prefixes: list[list[int]], budgets: list[int]) -> list[Generation]:
        self.calls.append((prefixes, budgets))
        out = []
        for row, prefix, budget in zip(rows, prefixes, budgets, strict=True):
            assert row == int(chr(prefix[1]))  # prompts are "Q<row>"
            ids = encode_turn(self.scripts[row].pop(0))
            finish = "eos"
            if len(ids) > budget:
                ids, finish = ids[:budget], "length"
            out.append(Generation(ids, [-0.5] * len(ids), finish))
        return out


def task(index: int = 0) -> Task:
    return Task(
        task_id=f"t{index}", prompt="unused", task_type="math", verification_info={"ground_truth": "1"}
    )
