"""The run config's [swarm] section: the local swarm that `demo --swarm` starts."""

from __future__ import annotations

from pydantic import Field

from swarmrl.configs.base import Section


class SwarmSection(Section):
    honest_workers: int = Field(3, ge=1, description="honest worker nodes `demo --swarm` starts")
    cheating_workers: int = Field(
        1, ge=0, description="cheating worker nodes (they generate with half the model's layers)"
    )
    relays: int = Field(1, ge=1, description="shardcast relays between the trainer's origin and the nodes")
    validators: int = Field(1, ge=1, description="validators judging side by side (validation leases)")
    slow_workers: int = Field(0, ge=0, description="how many of the honest workers run on a slower machine")
    slowdown: float = Field(3.0, ge=1.0, description="how many times longer a slow worker takes per unit")
    poll_seconds: float = Field(0.5, gt=0, description="how often nodes poll the coordinator when idle")
    coordinator_retry_s: float = Field(
        120.0,
        gt=0,
        description="how long a node of a swarm (worker, validator, trainer) retries one call to a coordinator "
        "that is down, overloaded or rate limiting (jittered exponential back-off, its Retry-After honoured) "
        "before it gives up with one line naming the coordinator",
    )
    submit_packs: list[str] = Field(
        default_factory=list,
        description="community task packs (directories) `demo --swarm` submits mid-run, each re-signed by an "
        "author key of its own: the run's [tasks.community] must accept them",
    )
    submit_packs_at_step: int = Field(
        5, ge=0, description="the run's step at which `demo --swarm` submits `submit_packs`"
    )
