"""The `[wan]` section: the emulated internet `swarmrl demo --wan` spreads a swarm over (pydantic + stdlib only).

Regions are groups of machines behind one link to the internet core (its up and down rates); every pair of
regions is joined by a path with a round-trip time, jitter and a packet loss rate; every machine has its own
access link. Rates are enforced by the kernel (HTB), delay, jitter and loss by a user-space link proxy per
path (this kernel has no `netem`), see `swarmrl_lab.wan`.
"""

from __future__ import annotations

from itertools import combinations

from pydantic import BaseModel, ConfigDict, Field, model_validator

REGION_NAME = r"^[a-z][a-z0-9]{0,7}$"


class WanSection(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegionConfig(WanSection):
    name: str = Field(pattern=REGION_NAME, description="region name (lower case, at most 8 characters)")
    uplink_mbit: float = Field(gt=0, description="rate of the region's link towards the core, Mbit/s")
    downlink_mbit: float = Field(gt=0, description="rate of the region's link from the core, Mbit/s")


class PathConfig(WanSection):
    between: tuple[str, str] = Field(description="the two regions this path joins")
    rtt_ms: float = Field(ge=0, le=5000, description="round-trip time of the path, milliseconds")
    jitter_ms: float = Field(
        0.0, ge=0, description="standard deviation of each one-way delay (order is kept), milliseconds"
    )
    loss: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="probability that a packet (mss_bytes of a stream) is lost; a loss stalls the stream for a "
        "retransmission timeout, as TCP recovers it",
    )


class ChurnConfig(WanSection):
    worker_fraction: float = Field(
        0.3, ge=0, le=1, description="fraction of the workers killed (SIGKILL) and restarted during the run"
    )
    relays: int = Field(1, ge=0, description="relays killed and restarted during the run")
    first_step: int = Field(2, ge=1, description="no node is killed before the run reaches this step")
    last_step_margin: int = Field(
        3, ge=0, description="no node is killed in the last this many steps of the run"
    )
    down_s: tuple[float, float] = Field(
        (3.0, 10.0), description="a killed node stays down for a time drawn uniformly in this range, seconds"
    )
    seed: int = Field(0, description="seed of which nodes are killed, when, and for how long")

    @model_validator(mode="after")
    def _check_range(self) -> ChurnConfig:
        if not 0 <= self.down_s[0] <= self.down_s[1]:
            raise ValueError(f"churn.down_s {self.down_s} is not a range of seconds (low ≤ high)")
        return self


class WanConfig(WanSection):
    """The emulated regions, paths and machines of `swarmrl demo --wan`."""

    regions: list[RegionConfig] = Field(
        default_factory=lambda: [
            RegionConfig(name="us", uplink_mbit=200, downlink_mbit=200),
            RegionConfig(name="eu", uplink_mbit=50, downlink_mbit=50),
            RegionConfig(name="asia", uplink_mbit=20, downlink_mbit=20),
        ],
        description="the regions; the first holds the coordinator, the trainer (with its origin) and the "
        "validators; every region gets one relay",
    )
    paths: list[PathConfig] = Field(
        default_factory=lambda: [
            PathConfig(between=("us", "eu"), rtt_ms=100, jitter_ms=5, loss=0.005),
            PathConfig(between=("us", "asia"), rtt_ms=250, jitter_ms=10, loss=0.01),
            PathConfig(between=("eu", "asia"), rtt_ms=200, jitter_ms=10, loss=0.01),
        ],
        description="one path for every pair of distinct regions",
    )
    intra_rtt_ms: float = Field(2.0, ge=0, description="round-trip time between machines of one region")
    worker_regions: list[str] = Field(
        default_factory=lambda: ["us", "eu", "asia"],
        description="the region of worker i is worker_regions[i % len]",
    )
    worker_mbit: list[float] = Field(
        default_factory=lambda: [100.0, 50.0, 20.0],
        description="the access rate (up and down) of worker i is worker_mbit[i % len], Mbit/s",
    )
    server_mbit: float = Field(
        1000.0, gt=0, description="access rate of the coordinator, trainer (origin), relays and validators"
    )
    island_regions: list[str] | None = Field(
        None,
        description="`demo --islands --wan`: the region of trainer island i is island_regions[i % len] (each island "
        "a machine at server_mbit; their lighthouse sits in the first region of `regions`); unset: the first and "
        "the last region of `regions` (us and asia by default: the narrowest path)",
    )
    mss_bytes: int = Field(1448, ge=64, description="packet payload a loss probability applies to")
    rto_min_ms: float = Field(
        200.0,
        ge=0,
        description="shortest retransmission stall (Linux's minimum RTO); the stall of a path "
        "is max(rto_min_ms, rtt_ms + 4 × jitter_ms)",
    )
    window_bytes: int = Field(
        4 * 1024 * 1024,
        ge=65536,
        description="bytes a link proxy holds in flight per direction of a connection (a TCP window: it "
        "caps one connection at window / RTT)",
    )
    churn: ChurnConfig = Field(default_factory=ChurnConfig, description="nodes killed and restarted")
    baseline: bool = Field(True, description="run the same swarm on loopback first, for the comparison")

    @model_validator(mode="after")
    def _check_paths(self) -> WanConfig:
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise ValueError(f"wan.regions names repeat: {names}")
        if not names:
            raise ValueError("wan.regions is empty")
        seen: set[frozenset[str]] = set()
        for path in self.paths:
            pair = frozenset(path.between)
            unknown = pair - set(names)
            if unknown:
                raise ValueError(f"wan.paths names unknown region(s) {sorted(unknown)}")
            if len(pair) != 2 or pair in seen:
                raise ValueError(f"wan.paths: {list(path.between)} is not a new pair of distinct regions")
            seen.add(pair)
        missing = [sorted(p) for p in map(frozenset, combinations(names, 2)) if p not in seen]
        if missing:
            raise ValueError(f"wan.paths has no path between {missing}")
        unknown_workers = sorted(set(self.worker_regions) - set(names))
        if unknown_workers or not self.worker_regions:
            raise ValueError(f"wan.worker_regions names unknown region(s) {unknown_workers} or none")
        unknown_islands = sorted(set(self.island_regions or names) - set(names))
        if unknown_islands or self.island_regions == []:
            raise ValueError(f"wan.island_regions names unknown region(s) {unknown_islands} or none")
        if not self.worker_mbit or min(self.worker_mbit) <= 0:
            raise ValueError("wan.worker_mbit must list positive rates")
        return self

    def path(self, a: str, b: str) -> PathConfig:
        """The path between regions a and b (a == b: the intra-region one, no loss)."""
        if a == b:
            return PathConfig(between=(a, b), rtt_ms=self.intra_rtt_ms)
        return next(p for p in self.paths if set(p.between) == {a, b})

    def island_region(self, island: int) -> str:
        chosen = self.island_regions or [self.regions[0].name, self.regions[-1].name]
        return chosen[island % len(chosen)]

    def region(self, name: str) -> RegionConfig:
        return next(r for r in self.regions if r.name == name)
