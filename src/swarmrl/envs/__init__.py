"""Multi-turn and tool-use environments: the interface, the rollout loop, the validator's replay."""

from swarmrl.envs.base import Environment, EnvStep
from swarmrl.envs.errors import EnvError, ReplayMismatch
from swarmrl.envs.replay import REPLAY_CHECKS, ReplayResult, replay
from swarmrl.envs.trajectory import (
    Generation,
    RolloutLimits,
    Segment,
    Trajectory,
    run_episodes,
    segments_from_mask,
)

__all__ = [
    "REPLAY_CHECKS",
    "EnvError",
    "EnvStep",
    "Environment",
    "Generation",
    "ReplayMismatch",
    "ReplayResult",
    "RolloutLimits",
    "Segment",
    "Trajectory",
    "replay",
    "run_episodes",
    "segments_from_mask",
]
