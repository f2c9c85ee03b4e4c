"""Code reward: the last fenced python block, judged against the task's tests; 1 iff all pass.

The verdict comes from the trusted judge (`code_judge`), which runs in this verifier's process pool with a
wall-clock deadline of its own and talks to one sandbox session per solution (`sandbox`). Building the
verifier resolves the sandbox's isolation once (refusing to run without OS isolation unless the config says
`unsafe_no_os_isolation`), logs it and exports it as a metric.
"""

from __future__ import annotations

import logging

from swarmrl.configs.tasks import AnswerExtractionConfig, CodeRewardConfig
from swarmrl.tasks.code_judge import CodeTestReport, judge
from swarmrl.tasks.code_tests import CodeTests, parse_code_tests
from swarmrl.tasks.errors import SandboxError, VerifierCrash, VerifierTimeout
from swarmrl.tasks.extraction import accepts_unclosed_think, answer_region, last_python_block
from swarmrl.tasks.output_compare import OutputRule
from swarmrl.tasks.process_pool import WallClockPool
from swarmrl.tasks.sandbox import SandboxLimits, announce_isolation, sandbox_plan
from swarmrl.tasks.task import Task

logger = logging.getLogger(__name__)

# Beyond the sandbox's own deadline: starting it, and the dataset's test code running on the trusted side.
JUDGE_SLACK_SECONDS = 10.0


class CodeVerifier:
    """Scores code completions 1/0 by judging their last python block against the task's tests."""

    task_type = "code"

    def __init__(
        self, config: CodeRewardConfig | None = None, extraction: AnswerExtractionConfig | None = None
    ) -> None:
        self.config = config or CodeRewardConfig()
        self.extraction = extraction or AnswerExtractionConfig(mode="think")
        self.limits = SandboxLimits.from_config(self.config)
        self.rule = OutputRule(self.config.stdout_compare, self.config.stdout_float_tolerance)
        self.plan = sandbox_plan(self.config)
        announce_isolation(self.plan)
        self._pool = WallClockPool(self.config.num_workers)

    def score(self, task: Task, completion: str) -> float:
        tests = parse_code_tests(task)
        region = answer_region(completion, self.extraction, accepts_unclosed_think(task.verification_info))
        code = last_python_block(region) if region is not None else None
        if code is None:
            return 0.0
        return 1.0 if self.run_tests(tests, code).all_passed else 0.0

    def run_tests(self, tests: CodeTests, code: str) -> CodeTestReport:
        try:
            return self._pool.call(
                judge,
                tests,
                code,
                self.plan,
                self.limits,
                self.rule,
                timeout=self.limits.wall_seconds + JUDGE_SLACK_SECONDS,
            )
        except VerifierTimeout as exc:
            # The sandbox has its own deadline, so this is the task's test code hanging: no reward.
            logger.warning("code judge timed out (%s); scoring 0", exc)
            return CodeTestReport(0, tests.total, f"judge timed out: {exc}")
        except VerifierCrash as exc:
            raise SandboxError(f"the code judge failed: {exc}") from exc

    def close(self) -> None:
        self._pool.close()
