"""The Python tool: the model writes code in a fenced block, the code sandbox runs it, the output is the
next turn. A turn with an answer (<answer>...</answer>, or no code block) ends the episode and is scored.

The code runs in the project's code sandbox (`tasks.sandbox`: bubblewrap, no network, rlimits, fail closed)
as a fresh program per call with empty stdin. The validator repeats each run in its own sandbox, so the
output must be a function of the code alone: the sandbox gives no network and a fresh /tmp, and the turn
shows stdout then stderr's tail, cut to `max_output_chars`.
"""

from __future__ import annotations

import functools
import signal
from typing import Protocol

from swarmrl.configs.tasks import AnswerExtractionConfig
from swarmrl.envs.base import EnvStep
from swarmrl.envs.errors import EnvError
from swarmrl.tasks.errors import SandboxError
from swarmrl.tasks.extraction import last_python_block, last_tag_content
from swarmrl.tasks.sandbox import SandboxLimits, SandboxPlan, SandboxSession, SessionBroken
from swarmrl.tasks.task import Task

# The tool's rules, for the run's system prompt (`[prompt] system`): the first turn is the task's prompt
# unchanged, so it is the prompt the coordinator's assignment gives and the validator rebuilds.
TOOL_INSTRUCTIONS = (
    "You can run Python: write a ```python code block and its printed output comes back to you. "
    "When you know the answer, write it as <answer>...</answer>."
)


class Verifier(Protocol):
    def score(self, task: Task, completion: str) -> float: ...


# The output is a function of the code alone (above), and the G rollouts of one prompt mostly write the same
# code: each process runs a given program once (a sandbox start costs tens of milliseconds, far more than the
# generation of a tool call by a small model). Replays in other processes still run it themselves.
@functools.lru_cache(maxsize=4096)
def run_tool(code: str, plan: SandboxPlan, limits: SandboxLimits, max_output_chars: int) -> str:
    """The tool turn for `code`: its output as the sandbox returned it, or why it failed, fenced."""
    try:
        with SandboxSession(plan, limits, code) as session:
            outcome = session.run("")
    except SessionBroken as exc:  # timeout, killed by a limit: the model sees that, the run goes on
        return _fence(f"error: {exc}", max_output_chars)
    text = outcome.stdout
    if outcome.exit_status != 0:
        text += f"\n({_exit_reason(outcome.exit_status)})\n{outcome.stderr[-max_output_chars:]}"
    return _fence(text, max_output_chars)


def _exit_reason(status: int) -> str:
    """A negative status is the signal that ended the program, which names the limit it hit (SIGXCPU: CPU time)."""
    if status < 0:
        try:
            return f"exit status {status}: killed by {signal.Signals(-status).name}"
        except ValueError:
            pass
    return f"exit status {status}"


def _fence(text: str, max_chars: int) -> str:
    if len(text) > max_chars:
        text = text[:max_chars] + "\n[output cut]"
    return f"<output>\n{text.rstrip()}\n</output>"


class PythonToolEnv:
    """Python tool use on one task; the reward is the verifier's score of the final answer."""

    def __init__(
        self,
        verifier: Verifier,
        plan: SandboxPlan,
        limits: SandboxLimits,
        *,
        max_tool_calls: int = 3,
        max_output_chars: int = 1000,
        extraction: AnswerExtractionConfig | None = None,
    ) -> None:
        if plan.mode == "none":  # model-written code: refuse the unisolated mode outright
            raise SandboxError("the Python tool environment needs an isolated sandbox, not isolation 'none'")
        self.verifier = verifier
        self.plan = plan
        self.limits = limits
        self.max_tool_calls = max_tool_calls
        self.max_output_chars = max_output_chars
        self.extraction = extraction or AnswerExtractionConfig()
        self._task: Task | None = None
        self._calls = 0
        self._done = True

    def reset(self, task: Task, seed: int) -> str:
        del seed  # the tool is deterministic; the seed is part of the interface for environments that draw
        self._task, self._calls, self._done = task, 0, False
        return task.prompt

    def step(self, model_turn: str) -> EnvStep:
        if self._task is None or self._done:
            raise EnvError("step() on an environment that is not running: call reset() first")
        code = last_python_block(model_turn)
        answered = last_tag_content(model_turn, self.extraction.answer_tag) is not None
        if code is not None and not answered and self._calls < self.max_tool_calls:
            self._calls += 1
            return EnvStep(run_tool(code, self.plan, self.limits, self.max_output_chars), 0.0, False)
        self._done = True
        return EnvStep(None, self.verifier.score(self._task, model_turn), True)
