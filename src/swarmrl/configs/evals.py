"""The run config's [eval] section: held-out evaluation before and after RL, and online evals."""

from __future__ import annotations

from pydantic import Field

from swarmrl.configs.base import Section


class EvalSection(Section):
    num_tasks: int = Field(200, ge=1, description="held-out tasks evaluated before and after RL")
    temperature: float = Field(1.0, ge=0, description="sampling temperature of the evaluation (0 = greedy)")
    samples_per_task: int = Field(
        1, ge=1, description="completions per held-out task: the k of the reported avg@k and pass@k"
    )
    every_steps: int = Field(
        0,
        ge=0,
        description="online evals: the trainer evaluates the policy of every step that is a multiple of this "
        "(step 0 included) on held-out tasks, into metrics.jsonl and the metric sinks; 0: off",
    )
    online_num_tasks: int = Field(
        32, ge=1, description="held-out tasks of each online eval (the first ones of the held-out split)"
    )
