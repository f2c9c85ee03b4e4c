import threading

import pytest

from swarmrl.configs.tasks import LengthRewardConfig, MathRewardConfig, TasksConfig
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reward import (
    VERIFIERS,
    RewardBreakdown,
    RewardComputer,
    RewardRequest,
    compute_reward,
    compute_rewards,
    verifier_registry,
)
from swarmrl.tasks.task import Task

MATH = Task("m", "1+1?", "math", {"ground_truth": "2"})
CODE = Task("c", "print 3", "code", {"test_cases": [{"type": "stdin_stdout", "input": "", "output": "3"}]})
RG = Task(
    "r",
    "Calculate 5 - 3.",
    "reasoning_gym",
    {"generator": "basic_arithmetic", "seed": 1, "size": 3, "kwargs": {}, "index": 0},
)
CONFIG = TasksConfig(
    math=MathRewardConfig(num_workers=1), length=LengthRewardConfig(mode="exact", targets=[1000, 2000])
)


@pytest.fixture(scope="module")
def computer():
    c = RewardComputer(CONFIG)
    yield c
    c.close()


def test_dispatch_by_task_type_with_exact_length_term(computer):
    assert computer.compute(
        MATH, r"</think>\boxed{2}", num_completion_tokens=1500, target_length=1000
    ) == RewardBreakdown(1.0, pytest.approx(-0.15), pytest.approx(0.85))
    assert computer.compute(
        CODE, "```python\nprint(3)\n```", num_completion_tokens=10, target_length=None
    ) == RewardBreakdown(1.0, 0.0, 1.0)
    rg = computer.compute(RG, "</think>-4", num_completion_tokens=1000, target_length=1000)
    assert rg == RewardBreakdown(1.0, 0.0, 1.0)
    wrong = computer.compute(MATH, r"\boxed{3}", num_completion_tokens=2000, target_length=1000)
    assert wrong.task_reward == 0.0 and wrong.total == pytest.approx(-0.3)


def test_batch_keeps_request_order(computer):
    requests = [
        RewardRequest(MATH, r"\boxed{2}", 1000, 1000),
        RewardRequest(CODE, "```python\nprint(4)\n```", 5),
        RewardRequest(RG, "-4", 5),
        RewardRequest(MATH, r"\boxed{5}", 1000, 1000),
    ]
    assert [b.task_reward for b in computer.compute_batch(requests)] == [1.0, 0.0, 1.0, 0.0]


def test_module_level_entry_points_from_a_thread():
    config = TasksConfig(math=MathRewardConfig(num_workers=1), length=LengthRewardConfig(mode="clip"))
    out = []
    thread = threading.Thread(
        target=lambda: out.append(
            compute_reward(MATH, r"\boxed{2}", num_completion_tokens=3000, target_length=2000, config=config)
        )
    )
    thread.start()
    thread.join(timeout=120)
    assert out == [RewardBreakdown(1.0, -1.0, 0.0)]
    assert [b.total for b in compute_rewards([RewardRequest(MATH, "2", 10, 2000)], config=config)] == [1.0]


def test_unknown_type_and_custom_verifier(computer):
    with pytest.raises(TaskError, match="no verifier"):
        computer.compute(Task("x", "p", "poetry", {}), "roses", num_completion_tokens=1, target_length=None)

    class Exact:
        task_type = "exact_text"

        def score(self, task, completion):
            return 1.0 if completion.strip() == task.verification_info["text"] else 0.0

    verifiers = verifier_registry({"exact_text": lambda config: Exact()})
    task = Task("e", "say hi", "exact_text", {"text": "hi"})
    fresh = RewardComputer(CONFIG, verifiers)
    assert fresh.compute(task, " hi ", num_completion_tokens=1, target_length=None).task_reward == 1.0
    assert fresh.compute(MATH, r"\boxed{2}", num_completion_tokens=1, target_length=None).task_reward == 1.0


def test_the_registry_is_read_only():
    # No import can change how a run's nodes judge: the registry they build verifiers from cannot be written.
    with pytest.raises(TypeError):
        VERIFIERS["math"] = lambda config: None  # type: ignore[index]
    with pytest.raises(TypeError):
        verifier_registry()["exact_text"] = lambda config: None  # type: ignore[index]
    assert set(VERIFIERS) == {"math", "code", "reasoning_gym"}
    with pytest.raises(TaskError, match="no verifier registered for task_type 'exact_text'"):
        RewardComputer(CONFIG).verifier("exact_text")
