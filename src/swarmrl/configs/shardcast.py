"""Typed, documented knobs of the origin, the relays and the client, and the run config's [shardcast] section."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swarmrl.configs.connections import ConnectionLimits

HashAlgorithm = Literal["sha256", "blake3"]

CONNECTIONS_DESCRIPTION = (
    "slow-client limits of the server: request head deadline, open-connection caps (512 per address: one "
    "client holds up to ~20 connections, and a local run puts every worker on 127.0.0.1)"
)


def server_limits() -> ConnectionLimits:
    return ConnectionLimits(max_per_address=512)


DEFAULT_SHARD_SIZE = 50 * 1024 * 1024


class OriginConfig(BaseModel):
    host: str = Field("127.0.0.1", description="interface the origin server binds")
    port: int = Field(0, ge=0, le=65535, description="TCP port; 0 lets the OS choose")
    shard_size: int = Field(DEFAULT_SHARD_SIZE, ge=4096, description="bytes per shard (INTELLECT-2: ~50 MB)")
    hash_algorithm: HashAlgorithm = Field(
        "blake3", description="digest for files and shards: blake3 (fast, default) or sha256"
    )
    delta: bool = Field(True, description="also publish each version as a delta against the previous one")
    delta_chunk_size: int = Field(16 * 1024 * 1024, ge=4096, description="bytes per delta coding chunk")
    delta_zstd_level: int = Field(3, ge=1, le=22, description="zstd level of delta payloads")
    scan_interval_s: float = Field(
        0.5,
        gt=0,
        description="how often the server rescans the checkpoint root for versions published by others",
    )
    connections: ConnectionLimits = Field(default_factory=server_limits, description=CONNECTIONS_DESCRIPTION)


class WeightedSelection(BaseModel):
    """Sample a source by measured success × throughput, demoted 20× per corrupt shard or forged manifest it
    sent (`swarmrl/shardcast/selection/weighted.py`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["weighted"] = Field("weighted", description="source selection policy")
    exploration: float = Field(0.1, ge=0, le=1, description="chance of picking a source uniformly at random")


class OrderedSelection(BaseModel):
    """Ask the sources in the order given, nearest first; the next one only while those before it back off, and
    one that sent corrupt data behind every clean one (`swarmrl/shardcast/selection/ordered.py`)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ordered"] = Field("ordered", description="source selection policy")


SourceSelection = Annotated[WeightedSelection | OrderedSelection, Field(discriminator="type")]


class RelayConfig(BaseModel):
    upstreams: list[str] = Field(default_factory=list, description="origin or relay base URLs to mirror")
    host: str = Field("127.0.0.1", description="interface the relay binds")
    port: int = Field(0, ge=0, le=65535, description="TCP port; 0 lets the OS choose")
    data_dir: Path = Field(Path("shardcast-relay"), description="where mirrored versions are stored")
    keep_versions: int = Field(5, ge=1, description="newest complete versions kept (INTELLECT-2 kept 5)")
    pinned_versions: list[int] = Field(
        default_factory=list,
        description="versions mirrored even when older than the window and never deleted (a LoRA run's base, "
        "which every worker needs before it can merge an adapter)",
    )
    gc_grace_s: float = Field(
        60.0, ge=0, description="an old version read by a client within this many seconds is not deleted yet"
    )
    long_poll_s: float = Field(15.0, gt=0, description="how long one poll for a new version waits upstream")
    retry_interval_s: float = Field(1.0, gt=0, description="pause before retrying an unreachable upstream")
    concurrency: int = Field(
        8,
        ge=1,
        description="shards mirrored at once: enough to keep a long, narrow link full (250 ms at 20 Mbit/s "
        "holds ~600 KB in flight; each round of requests costs a round trip); fewer means the first shards "
        "verify, and serve, sooner",
    )
    selection: SourceSelection = Field(
        default_factory=WeightedSelection, description="which upstream gets the next request (as a client's)"
    )
    cut_through: bool = Field(
        True,
        description="pass a shard on while its bytes arrive from upstream, its last byte once it verified (a hop "
        "then costs no whole shard's transfer); off: a shard is served once it is held whole and verified",
    )
    park_next: bool = Field(
        True,
        description="once a version's manifest is in, send the requests for the next version's delta shards at "
        "once, held upstream until it is published (its bytes then leave with its announcement: a round trip "
        "saved on a long path); off: requested once the next version is announced",
    )
    connections: ConnectionLimits = Field(default_factory=server_limits, description=CONNECTIONS_DESCRIPTION)


class ClientConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(8, ge=1, description="shards downloaded at once")
    request_timeout_s: float = Field(
        30.0, gt=0, description="longest silence while reading a response before the request counts as failed"
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="limit on opening a connection")
    min_throughput_bytes_s: float = Field(
        256 * 1024,
        gt=0,
        description="per-request throughput floor: once `throughput_grace_s` has passed, a shard request must "
        "have received this rate times the time since then, or it is cut and its source demoted",
    )
    throughput_grace_s: float = Field(
        3.0,
        gt=0,
        description="time a shard request gets to connect and start sending before the floor applies",
    )
    hedge_after_s: float = Field(
        1.0,
        gt=0,
        description="a manifest or announcement not answered within this many seconds is asked of the next "
        "source as well (a hedged request), the first good answer wins; a shard request gets a duplicate on "
        "another source once it has run 4 times what that source is expected to need (at least 0.25 s, at "
        "most this) and will likely finish later than the duplicate",
    )
    max_hedged_shards: int = Field(2, ge=0, description="duplicate shard requests in flight at once")
    discovery_timeout_s: float = Field(
        5.0,
        gt=0,
        description="longest wait for the signed manifests backing announced versions when looking for the "
        "newest one; a claim not backed by then is dropped and its source demoted",
    )
    max_attempts_per_shard: int = Field(8, ge=1, description="tries per shard across all sources")
    stall_timeout_s: float = Field(
        60.0, gt=0, description="give up when no source advertises a missing shard for this long"
    )
    near_wait_s: float = Field(
        3.0,
        ge=0,
        description="how long a shard waits for a near source (the relay of this node's region: a round trip "
        "within twice the shortest) that does not hold it yet, rather than crossing a narrow link to a distant "
        "source that does; 0 fetches from whichever holds it first",
    )
    availability_refresh_s: float = Field(
        0.25, gt=0, description="pause before re-asking a source whose shard list did not grow (or failed)"
    )
    selection: SourceSelection = Field(
        default_factory=WeightedSelection,
        description="which source gets the next request: `weighted` (by success × throughput, the default) or "
        "`ordered` (the order given, nearest first)",
    )
    backoff_base_s: float = Field(0.25, gt=0, description="first back-off after a failed request")
    backoff_max_s: float = Field(10.0, gt=0, description="longest back-off")
    keep_versions: int = Field(3, ge=1, description="newest versions kept on local disk")
    pinned_versions: list[int] = Field(
        default_factory=list,
        description="versions never deleted to make room (a LoRA run's base, which every adapter is merged onto)",
    )
    use_delta: bool = Field(True, description="rebuild from the local parent when the version is a delta")
    seed: int | None = Field(None, description="seed for source sampling (None: fresh randomness)")

    def pinning(self, versions: list[int]) -> ClientConfig:
        """These settings with `versions` kept as well (a LoRA run's base, on top of the section's own pins)."""
        return self.model_copy(update={"pinned_versions": sorted({*self.pinned_versions, *versions})})


def check_advertise_url(url: str | None) -> str | None:
    """An advertised URL must be one a relay or node can open: http(s)://host[:port], no path."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"advertise URL {url!r} is not of the form http://HOST[:PORT]")
    return url.rstrip("/")


class ShardcastConfig(BaseModel):
    """The run config's [shardcast] section: where the trainer's origin listens and the URL it hands to relays,
    and how workers and validators fetch checkpoints."""

    model_config = ConfigDict(extra="forbid")

    origin_host: str = Field(
        "127.0.0.1",
        description="address the trainer's origin binds: 127.0.0.1 for one machine, the address relays reach "
        "(or 0.0.0.0, every interface) across machines",
    )
    origin_port: int = Field(
        0, ge=0, le=65535, description="TCP port of the trainer's origin; 0 lets the OS choose"
    )
    advertise_url: str | None = Field(
        None,
        description="URL of the origin given to relays (written to <run>/swarm/origin.url and logged); unset: "
        "http://origin_host:PORT, with this machine's hostname in place of a wildcard host (0.0.0.0, ::)",
    )
    shard_size: int = Field(DEFAULT_SHARD_SIZE, ge=4096, description="bytes per shard the origin publishes")
    delta: bool = Field(
        True, description="the origin also publishes each version as a delta against the previous"
    )
    client: ClientConfig = Field(
        default_factory=ClientConfig, description="how workers and validators download checkpoints"
    )

    @field_validator("advertise_url")
    @classmethod
    def _advertise_url(cls, url: str | None) -> str | None:
        return check_advertise_url(url)

    def origin_config(self) -> OriginConfig:
        return OriginConfig(
            host=self.origin_host, port=self.origin_port, shard_size=self.shard_size, delta=self.delta
        )
