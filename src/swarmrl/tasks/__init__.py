"""Task sources (reasoning-gym, INTELLECT-2 layout datasets) and verifiable rewards (math, code, length)."""

from swarmrl.tasks.config import (
    AnswerExtractionConfig,
    CodeRewardConfig,
    DatasetSourceConfig,
    LengthRewardConfig,
    MathRewardConfig,
    ReasoningGymSourceConfig,
    TasksConfig,
)
from swarmrl.tasks.errors import RewardError, SandboxError, TaskError, VerifierCrash, VerifierTimeout
from swarmrl.tasks.length_reward import (
    add_length_instruction,
    clip_length_reward,
    exact_length_reward,
    length_shaped_reward,
    max_length_reward,
    sample_target_length,
)
from swarmrl.tasks.registry import (
    MixedTaskSource,
    build_source,
    build_tasks,
    filter_by_solve_rate,
    heldout_sources,
)
from swarmrl.tasks.reward import (
    RewardBreakdown,
    RewardComputer,
    RewardRequest,
    Verifier,
    compute_reward,
    compute_rewards,
    register_verifier,
)
from swarmrl.tasks.solve_rate import annotate_solve_rates, solve_rate
from swarmrl.tasks.task import ListTaskSource, Task, TaskSource

__all__ = [
    "AnswerExtractionConfig",
    "CodeRewardConfig",
    "DatasetSourceConfig",
    "LengthRewardConfig",
    "ListTaskSource",
    "MathRewardConfig",
    "MixedTaskSource",
    "ReasoningGymSourceConfig",
    "RewardBreakdown",
    "RewardComputer",
    "RewardError",
    "RewardRequest",
    "SandboxError",
    "Task",
    "TaskError",
    "TaskSource",
    "TasksConfig",
    "Verifier",
    "VerifierCrash",
    "VerifierTimeout",
    "add_length_instruction",
    "build_source",
    "build_tasks",
    "clip_length_reward",
    "compute_reward",
    "compute_rewards",
    "exact_length_reward",
    "filter_by_solve_rate",
    "annotate_solve_rates",
    "heldout_sources",
    "solve_rate",
    "length_shaped_reward",
    "max_length_reward",
    "register_verifier",
    "sample_target_length",
]
