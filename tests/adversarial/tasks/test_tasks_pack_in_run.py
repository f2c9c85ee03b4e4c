"""A pack's verifier on the run's own rollouts (`tasks/packs/in_run.py`), as a validator and the trainer each run
it: scores by row; a hanging, crashing, miscounting or escaping verifier yields failures within its pace (the
file's rows score 0, nothing else is touched); a verifier that passed admission and turns non-deterministic on
real completions scores them differently on two judges, which the coordinator counts as a disagreement."""

from __future__ import annotations

import time

import pytest
from task_pack_kit import EXACT_VERIFIER, write_pack

from swarmrl.configs.tasks import TasksConfig
from swarmrl.coordinator.rules.pack_observations import scores_differ
from swarmrl.tasks.packs.in_run import judge_file
from swarmrl.tasks.packs.judging import Failure
from swarmrl.tasks.packs.pack import load_pack

TASKS = TasksConfig.model_validate(
    {
        "community": {
            "admission": {"verifier": {"startup_seconds": 1.0, "batch_items": 8, "max_call_seconds": 0.5}}
        }
    }
)
ROWS = [0, 0, 1, 2, 2, 2]
COMPLETIONS = ["42", "41", "123", "18", "so 18", "not it"]


def pack_with(tmp_path, verifier: str):
    return load_pack(write_pack(tmp_path / "p", verifier=verifier), TASKS.community.admission.limits)


def test_an_honest_verifier_scores_each_completion_by_its_row(tmp_path):
    judged = judge_file(pack_with(tmp_path, EXACT_VERIFIER), ROWS, COMPLETIONS, TASKS)
    assert judged.rewards == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert judged.failures == 0
    assert judged.by_row() == [(0, [1.0, 0.0]), (1, [1.0]), (2, [1.0, 0.0, 0.0])]


HOSTILE = {
    "hangs": "def reward(prompts, completions, **kw):\n    while True:\n        pass\n",
    "raises": "def reward(prompts, completions, **kw):\n    raise KeyError('nope')\n",
    "miscounts": "def reward(prompts, completions, **kw):\n    return [1.0]\n",
    "escapes": (
        "import socket\ndef reward(prompts, completions, **kw):\n"
        "    open('/etc/passwd').read()\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n"
        "    return [1.0] * len(completions)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_verifier_fails_its_completions_in_bounded_time_and_they_score_0(tmp_path, name):
    started = time.monotonic()
    judged = judge_file(pack_with(tmp_path, HOSTILE[name]), ROWS, COMPLETIONS, TASKS)
    assert time.monotonic() - started < 15  # startup 1 s + 20 ms a completion, plus the session's own start
    assert all(isinstance(outcome, Failure) for outcome in judged.outcomes), judged.outcomes
    assert judged.rewards == [0.0] * len(ROWS) and judged.failures == len(ROWS)
    assert all(score is None for _, scores in judged.by_row() for score in scores)


# Honest on anything admission sends (references, cheats: short or well-formed text), a coin flip on what a
# model writes in a run ("so 18", "not it"): each judge's session draws its own coins.
SLEEPER = EXACT_VERIFIER.replace(
    "def reward(prompts, completions, answer, **kwargs):",
    "import random\ndef reward(prompts, completions, answer, **kwargs):\n"
    "    if any(' ' in text(c) for c in completions):\n"
    "        return [float(random.random() < 0.5) for c in completions]",
)


def test_a_verifier_that_turns_random_in_the_run_is_caught_by_two_judges(tmp_path):
    pack = pack_with(tmp_path, SLEEPER)
    draws = [judge_file(pack, ROWS * 4, COMPLETIONS * 4, TASKS).by_row() for _ in range(2)]
    assert scores_differ(*draws)  # 24 coin flips each: alike by chance 1 in 2^24
    honest = [judge_file(pack, ROWS[:4], ["42", "41", "123", "18"], TASKS).by_row() for _ in range(2)]
    assert not scores_differ(*honest)
