"""Every test format users bring is run as its own harness would run it, or refused by name (issue 58).

The rows and labels are in code_format_cases.py (hand-labelled before the judge ran them). Each row goes
through the dataset loader exactly as a file holds it, then the reward; all cases of a run share one batch,
so the sandboxes run two at a time.
"""

import pytest
from code_format_cases import CASES, REFUSED_ROWS

from swarmrl.configs.tasks import CodeRewardConfig, TasksConfig
from swarmrl.tasks.dataset_source import row_to_task
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reward import RewardRequest, reward_computer


def task_of(name: str, row: dict):
    return row_to_task(row, where=f"case {name!r}", default_id=name, default_task_type=None)


# One right and one wrong completion of each format, and the cheats on the pytest layout: seconds, not minutes.
QUICK = {
    "kodcode palindrome right",
    "kodcode palindrome truthy string",
    "kodcode class right",
    "kodcode raises plain Exception",
    "pytest tests that never call the solution",
    "pytest assert failure swallowed",
    "unittest bare main right",
    "unittest main argv exit wrong",
    "mbpp full right",
    "mbpp full shadows sorted",
    "apps call right",
    "apps call wraps its answer in a list",
    "lcb functional right",
    "leetcodedataset right (List from the prompt's imports)",
    "intellect2 string result as a list",
    "mutation empties the caller's list",
    "checker any valid pair",
    *(f"kodcode exit cheat {index}" for index in range(4)),
}


@pytest.fixture(scope="module")
def computer():
    # The process's shared computer (its judge pool started once for every module that uses this config).
    return reward_computer(TasksConfig(code=CodeRewardConfig(num_workers=2, timeout_seconds=20)))


def mismatches(computer, cases) -> tuple[list[str], list[str]]:
    """(false passes, false fails) of the reward on `cases`, judged in one batch."""
    requests = [
        RewardRequest(task_of(name, row), f"<think>solve</think>\n```python\n{code}\n```", 10)
        for name, row, code, _ in cases
    ]
    rewards = [breakdown.task_reward for breakdown in computer.compute_batch(requests)]
    false_passes = [
        case[0] for case, reward in zip(cases, rewards, strict=True) if case[3] == 0 and reward != 0
    ]
    false_fails = [
        case[0] for case, reward in zip(cases, rewards, strict=True) if case[3] == 1 and reward != 1
    ]
    return false_passes, false_fails


def test_a_sample_of_every_format_quickly(computer):
    sample = [case for case in CASES if case[0] in QUICK]
    assert len(sample) == len(QUICK)
    assert mismatches(computer, sample) == ([], [])


@pytest.mark.slow
def test_no_false_pass_and_no_false_fail_on_every_other_case(computer):
    assert mismatches(computer, [case for case in CASES if case[0] not in QUICK]) == ([], [])


def test_the_cases_cover_every_format_with_both_labels():
    assert len(CASES) >= 80
    assert sum(label for *_, label in CASES) >= 25


@pytest.mark.parametrize(("name", "row", "named"), REFUSED_ROWS, ids=[case[0] for case in REFUSED_ROWS])
def test_rows_no_harness_can_run_are_refused_at_load_naming_what(name, row, named):
    with pytest.raises(TaskError, match=f"case '{name}'.*{named}") as refused:
        task_of(name, row)
    assert "\n" not in str(refused.value)
