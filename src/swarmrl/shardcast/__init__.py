"""SHARDCAST: broadcast trainer checkpoints to the swarm through relays that may lie.

Trainer: `Origin(root, identity).publish(step_dir, step)` and serve it. Relays: `Relay(config, trainer_key)`.
Workers: `CheckpointFetcher(sources, trainer_key, dest_root).refresh(ceiling)`, `fetch_checkpoint(...)`, or the
async `ShardcastClient`. A version counts only once its trainer-signed manifest is in hand.
"""

from swarmrl.shardcast.client import (
    CheckpointFetcher,
    ShardcastClient,
    fetch_checkpoint,
    latest_version,
    local_versions,
)
from swarmrl.shardcast.config import ClientConfig, OriginConfig, RelayConfig, ShardcastConfig
from swarmrl.shardcast.errors import DeltaError, ManifestError, ShardcastError, ShardIntegrityError
from swarmrl.shardcast.manifest import Manifest, SignedManifest, parse_signed_manifest, sign_manifest
from swarmrl.shardcast.origin import Origin
from swarmrl.shardcast.publish import publish_checkpoint, read_local_manifest
from swarmrl.shardcast.relay import Relay
from swarmrl.shardcast.server import ServerThread
from swarmrl.shardcast.transfer import TransferStats

__all__ = [
    "CheckpointFetcher",
    "ClientConfig",
    "DeltaError",
    "Manifest",
    "ManifestError",
    "Origin",
    "OriginConfig",
    "Relay",
    "RelayConfig",
    "ServerThread",
    "ShardIntegrityError",
    "ShardcastClient",
    "ShardcastConfig",
    "ShardcastError",
    "SignedManifest",
    "TransferStats",
    "fetch_checkpoint",
    "latest_version",
    "local_versions",
    "parse_signed_manifest",
    "publish_checkpoint",
    "read_local_manifest",
    "sign_manifest",
]
