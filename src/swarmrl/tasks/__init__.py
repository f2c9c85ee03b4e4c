"""Task sources (reasoning-gym, INTELLECT-2 layout datasets) and verifiable rewards (math, code, length).

Names are imported on first use (`swarmrl.lazy_exports`): importing the
package must not load the rest of it. `solve_rate` is the submodule
(`swarmrl.tasks.solve_rate.solve_rate` the function), as a lazy name could not shadow it reliably.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "RewardError": "swarmrl.tasks.errors",
    "SandboxError": "swarmrl.tasks.errors",
    "TaskError": "swarmrl.tasks.errors",
    "VerifierCrash": "swarmrl.tasks.errors",
    "VerifierTimeout": "swarmrl.tasks.errors",
    "add_length_instruction": "swarmrl.tasks.length_reward",
    "clip_length_reward": "swarmrl.tasks.length_reward",
    "exact_length_reward": "swarmrl.tasks.length_reward",
    "length_shaped_reward": "swarmrl.tasks.length_reward",
    "max_length_reward": "swarmrl.tasks.length_reward",
    "sample_target_length": "swarmrl.tasks.length_reward",
    "MixedTaskSource": "swarmrl.tasks.registry",
    "build_source": "swarmrl.tasks.registry",
    "build_tasks": "swarmrl.tasks.registry",
    "filter_by_solve_rate": "swarmrl.tasks.registry",
    "heldout_sources": "swarmrl.tasks.registry",
    "RewardBreakdown": "swarmrl.tasks.reward",
    "RewardComputer": "swarmrl.tasks.reward",
    "RewardRequest": "swarmrl.tasks.reward",
    "Verifier": "swarmrl.tasks.reward",
    "compute_reward": "swarmrl.tasks.reward",
    "compute_rewards": "swarmrl.tasks.reward",
    "verifier_registry": "swarmrl.tasks.reward",
    "annotate_solve_rates": "swarmrl.tasks.solve_rate",
    "ListTaskSource": "swarmrl.tasks.task",
    "Task": "swarmrl.tasks.task",
    "TaskSource": "swarmrl.tasks.task",
}

__all__ = [
    "ListTaskSource",
    "MixedTaskSource",
    "RewardBreakdown",
    "RewardComputer",
    "RewardError",
    "RewardRequest",
    "SandboxError",
    "Task",
    "TaskError",
    "TaskSource",
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
    "length_shaped_reward",
    "max_length_reward",
    "sample_target_length",
    "verifier_registry",
]

if TYPE_CHECKING:
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
        verifier_registry,
    )
    from swarmrl.tasks.solve_rate import annotate_solve_rates
    from swarmrl.tasks.task import ListTaskSource, Task, TaskSource


__getattr__ = lazy_exports(__name__, _EXPORTS)
