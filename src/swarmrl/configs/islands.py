"""The `[islands]` section: how many trainer islands, how often they merge and how the merge travels."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmrl.configs.diloco import CodecName


class IslandsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(2, ge=1, description="trainer islands, each with worker.num_workers workers")
    workers: Literal["local", "swarm"] = Field(
        "local",
        description="local: an island's workers read and write its run directory; swarm: each island is a swarm "
        "of its own (coordinator, SHARDCAST relays, validators, worker nodes as [swarm] sizes it) whose origin "
        "publishes every merged policy",
    )
    merge_every: int = Field(10, ge=1, description="policy steps between merges (H)")
    fragments: int = Field(
        1,
        ge=1,
        description="F: streaming fragments; each window of H steps merges 1/F of the parameters F times, "
        "staggered (1: the whole policy every H steps)",
    )
    overlap_steps: int = Field(
        0,
        ge=0,
        description="0: a merge blocks the trainer. k ≥ 1: its communication runs in the background while the "
        "trainer goes on, and it lands after the first policy step that finds it done, at the latest k steps after "
        "its launch (the trainer waits then), with the local progress since its launch kept; the last step's "
        "merge always blocks, so the run ends on the merged policy",
    )
    codec: CodecName = Field("int8", description="wire format of the pseudo-gradients between islands")
    int8_clip_sigmas: float = Field(6.0, gt=0, description="int8 codec: clip outliers at this many rms")
    outer_lr: float = Field(0.7, gt=0, description="outer Nesterov learning rate (DiLoCo's 0.7)")
    outer_momentum: float = Field(0.9, ge=0, lt=1, description="outer Nesterov momentum (0: plain SGD)")
    join_timeout_s: float = Field(
        60.0, gt=0, description="how long a merge waits for a live (heartbeating) island that is behind"
    )
    heartbeat_timeout_s: float = Field(
        5.0, gt=0, description="an island silent this long is dead and dropped from the next merge"
    )
    collective_timeout_s: float = Field(
        30.0, gt=0, description="a merge collective that takes longer fails and the round is discarded"
    )
    max_norm_ratio: float = Field(
        4.0,
        gt=1,
        description="a peer's pseudo-gradient whose L2 norm exceeds this multiple of the round's reference norm "
        "(the lower median of the norms of the contributions that decoded) is dropped from the round; honest "
        "islands of the demo differ by at most 1.32x (tests/integration/islands)",
    )
    heal_max_change: float = Field(
        0.5,
        gt=0,
        description="a (re)joining island adopts a peer's merged state only if it moves the policy by at most "
        "this fraction of its own norm (and its momentum is as bounded); an island that has merged since it "
        "started never adopts a peer's state",
    )
    process_group: Literal["baby_gloo", "gloo"] = Field(
        "baby_gloo",
        description="baby_gloo: the gloo collectives run in a child process (torchft's ProcessGroupBabyGloo), so a "
        "peer that breaks a collective's framing (gloo aborts the process on a size mismatch) fails the round, "
        "not the island; gloo: in this process, quicker to reconfigure, for islands that trust each other",
    )
    process_group_start_s: float = Field(
        120.0,
        gt=0,
        description="baby_gloo: how long the child process of a reconfigured group may take to start (it imports "
        "torch, tens of seconds on a busy machine); collectives themselves still get collective_timeout_s",
    )

    @model_validator(mode="after")
    def _fragments_fit_the_window(self) -> IslandsConfig:
        if self.fragments > self.merge_every:
            raise ValueError(f"fragments ({self.fragments}) must not exceed merge_every ({self.merge_every})")
        if self.overlap_steps >= self.merge_every:
            raise ValueError(
                f"overlap_steps ({self.overlap_steps}) must be below merge_every ({self.merge_every}): a merge lands "
                "before the next one is launched"
            )
        return self
