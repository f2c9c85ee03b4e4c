import pytest

from swarmrl.configs.tasks import CodeRewardConfig, ReasoningGymSourceConfig
from swarmrl.envs.errors import EnvError
from swarmrl.envs.feedback import RETRY_MESSAGE, FeedbackEnv, feedback_message
from swarmrl.envs.python_tool import PythonToolEnv
from swarmrl.tasks.arithmetic import ArithmeticSource
from swarmrl.tasks.errors import SandboxError
from swarmrl.tasks.reasoning_gym_source import ReasoningGymSource, ReasoningGymVerifier
from swarmrl.tasks.sandbox import SandboxLimits, sandbox_plan

LIMITS = SandboxLimits(wall_seconds=10, cpu_seconds=5)


@pytest.fixture(scope="module")
def plan():
    return sandbox_plan(CodeRewardConfig())


def test_arithmetic_tasks_are_deterministic_multi_digit_products():
    source = ArithmeticSource(seed=7, size=5, digits=4)
    again = ArithmeticSource(seed=7, size=5, digits=4)
    task = source[3]
    a, b = (int(x) for x in task.prompt.removeprefix("What is ").removesuffix("?").split(" * "))
    assert 1000 <= a <= 9999 and 1000 <= b <= 9999
    assert task.verification_info == {"ground_truth": str(a * b)} and task == again[3]
    assert source[3].prompt != ArithmeticSource(seed=8, size=5)[3].prompt
    with pytest.raises(IndexError):
        source[5]


def test_tool_output_comes_back_and_the_answer_is_scored(plan, math_verifier):
    task = ArithmeticSource(seed=1, size=1)[0]
    env = PythonToolEnv(math_verifier, plan, LIMITS)
    assert env.reset(task, 0) == task.prompt
    step = env.step(f"Let me compute.\n{task.demonstration}")
    truth = task.verification_info["ground_truth"]
    assert step == type(step)(f"<output>\n{truth}\n</output>", 0.0, False)
    final = env.step(f"<answer>{truth}</answer>")
    assert final.done and final.reward == 1.0
    with pytest.raises(EnvError):
        env.step("again")


def test_a_wrong_answer_scores_zero_and_errors_reach_the_model(plan, math_verifier):
    env = PythonToolEnv(math_verifier, plan, LIMITS, max_tool_calls=1)
    env.reset(ArithmeticSource(seed=1, size=1)[0], 0)
    step = env.step("```python\nraise ValueError('boom')\n```")
    assert not step.done and "(exit status 1)" in step.message and "ValueError: boom" in step.message
    # Out of tool calls: a further code block is the final turn and has no answer.
    assert env.step("```python\nprint(1)\n```") == type(step)(None, 0.0, True)


def test_unisolated_sandbox_is_refused_for_model_code(math_verifier):
    unsafe = sandbox_plan(CodeRewardConfig(isolation="none", unsafe_no_os_isolation=True))
    with pytest.raises(SandboxError):
        PythonToolEnv(math_verifier, unsafe, LIMITS)


def test_feedback_env_gives_a_second_chance_on_a_reasoning_gym_puzzle():
    source = ReasoningGymSource(ReasoningGymSourceConfig(generator="basic_arithmetic", size=4, seed=3))
    task = source[0]
    env = FeedbackEnv(ReasoningGymVerifier(), max_attempts=3, retry_discount=0.5)
    assert env.reset(task, 0) == task.prompt
    wrong = env.step("<answer>definitely not it</answer>")
    assert wrong == type(wrong)(RETRY_MESSAGE, 0.0, False)
    answer = task.demonstration
    right = env.step(answer)
    assert right.done and right.reward == 0.5


def test_a_partly_right_guess_at_a_reasoning_gym_puzzle_comes_back_with_its_score():
    """mini_sudoku scores the cells a grid gets right: the feedback turn tells the model how close it was."""
    source = ReasoningGymSource(ReasoningGymSourceConfig(generator="mini_sudoku", size=2, seed=1))
    task = source[0]
    env = FeedbackEnv(ReasoningGymVerifier(), max_attempts=2, retry_discount=0.5)
    env.reset(task, 0)
    grid = task.demonstration.splitlines()
    grid[0] = " ".join(reversed(grid[0].split()))  # one row wrong, the rest right
    partial = env.step("<answer>" + "\n".join(grid) + "</answer>")
    assert not partial.done and partial.reward == 0.0
    assert partial.message != RETRY_MESSAGE and "partly right (it scores 0." in partial.message
    assert partial.message == feedback_message(float(partial.message.split("scores ")[1].split(" ")[0]))
    final = env.step(f"<answer>{task.demonstration}</answer>")
    assert final.done and final.reward == 0.5
