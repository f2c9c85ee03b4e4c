"""SHARDCAST: broadcast trainer checkpoints to the swarm through relays that may lie.

Trainer: `Origin(root, identity).publish(step_dir, step)` and serve it. Relays: `Relay(config, trainer_key)`.
Workers: `CheckpointFetcher(sources, trainer_key, dest_root).refresh(ceiling)`, `fetch_checkpoint(...)`, or the
async `ShardcastClient`. A version counts only once its trainer-signed manifest is in hand.

Names are imported on first use (`swarmrl.lazy_exports`): importing the
package must not load the rest of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "CheckpointFetcher": "swarmrl.shardcast.client",
    "ShardcastClient": "swarmrl.shardcast.client",
    "fetch_checkpoint": "swarmrl.shardcast.client",
    "latest_version": "swarmrl.shardcast.client",
    "local_versions": "swarmrl.shardcast.client",
    "DeltaError": "swarmrl.shardcast.errors",
    "ManifestError": "swarmrl.shardcast.errors",
    "ShardcastError": "swarmrl.shardcast.errors",
    "ShardIntegrityError": "swarmrl.shardcast.errors",
    "Manifest": "swarmrl.shardcast.manifest",
    "SignedManifest": "swarmrl.shardcast.manifest",
    "parse_signed_manifest": "swarmrl.shardcast.manifest",
    "sign_manifest": "swarmrl.shardcast.manifest",
    "Origin": "swarmrl.shardcast.origin",
    "publish_checkpoint": "swarmrl.shardcast.publish",
    "read_local_manifest": "swarmrl.shardcast.publish",
    "Relay": "swarmrl.shardcast.relay",
    "ServerThread": "swarmrl.shardcast.server",
    "TransferStats": "swarmrl.shardcast.transfer",
}

__all__ = [
    "CheckpointFetcher",
    "DeltaError",
    "Manifest",
    "ManifestError",
    "Origin",
    "Relay",
    "ServerThread",
    "ShardIntegrityError",
    "ShardcastClient",
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

if TYPE_CHECKING:
    from swarmrl.shardcast.client import (
        CheckpointFetcher,
        ShardcastClient,
        fetch_checkpoint,
        latest_version,
        local_versions,
    )
    from swarmrl.shardcast.errors import DeltaError, ManifestError, ShardcastError, ShardIntegrityError
    from swarmrl.shardcast.manifest import Manifest, SignedManifest, parse_signed_manifest, sign_manifest
    from swarmrl.shardcast.origin import Origin
    from swarmrl.shardcast.publish import publish_checkpoint, read_local_manifest
    from swarmrl.shardcast.relay import Relay
    from swarmrl.shardcast.server import ServerThread
    from swarmrl.shardcast.transfer import TransferStats


__getattr__ = lazy_exports(__name__, _EXPORTS)
