"""The origin: runs next to the trainer, publishes each checkpoint step and serves it straight from its files.

Shards are byte ranges of the checkpoint files themselves (sendfile, no copy into shard files). Versions
published by another process (e.g. the trainer calling `publish_checkpoint` while `swarmrl origin` serves) are
picked up by a rescan of the checkpoint root every `scan_interval_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from swarmrl.configs.shardcast import OriginConfig
from swarmrl.httpserve import Notifier
from swarmrl.identity import Identity
from swarmrl.shardcast.errors import ShardcastError
from swarmrl.shardcast.fsutil import resolve_inside
from swarmrl.shardcast.layout import manifest_path
from swarmrl.shardcast.manifest import Manifest, parse_signed_manifest
from swarmrl.shardcast.publish import publish_checkpoint
from swarmrl.shardcast.server import ServerMetrics, ServerThread, build_app, start_site
from swarmrl.steps import parse_step_dir_name, step_dir_name

log = logging.getLogger(__name__)


@dataclass
class _Published:
    directory: Path
    manifest: Manifest
    raw: bytes
    served_paths: dict[str, int]


class OriginStore:
    """Published versions under a checkpoint root; every shard of a published version is available."""

    def __init__(self, checkpoint_root: Path, trainer_public_key: str) -> None:
        self.root = Path(checkpoint_root)
        self.public_key = trainer_public_key
        self._published: dict[int, _Published] = {}
        self._lock = threading.Lock()

    def register(self, directory: Path, raw: bytes) -> Manifest:
        manifest = parse_signed_manifest(raw, self.public_key)
        served = {f.path: f.size for f in manifest.files}
        if manifest.delta:
            served.update({e.payload_path: e.payload_size for e in manifest.delta.entries})
        with self._lock:
            self._published[manifest.version] = _Published(Path(directory), manifest, raw, served)
        return manifest

    def rescan(self) -> list[int]:
        """Register manifests that appeared under the root since the last scan, forget versions whose
        directory the trainer pruned; return the new versions."""
        with self._lock:
            gone = [v for v, entry in self._published.items() if not manifest_path(entry.directory).is_file()]
            for old in gone:
                del self._published[old]
        added: list[int] = []
        if not self.root.is_dir():
            return added
        for child in self.root.iterdir():
            version = parse_step_dir_name(child.name)
            if version is None or version in self._published:
                continue
            path = manifest_path(child)
            if path.is_file():
                try:
                    self.register(child, path.read_bytes())
                    added.append(version)
                except (ShardcastError, OSError) as exc:
                    log.warning("ignoring %s: %s", child, exc)
        return added

    def get(self, version: int) -> _Published | None:
        with self._lock:
            return self._published.get(version)

    def versions(self) -> list[int]:
        with self._lock:
            return sorted(self._published)

    def manifest_bytes(self, version: int) -> bytes | None:
        entry = self.get(version)
        return entry.raw if entry else None

    def available_shards(self, version: int) -> list[int] | None:
        entry = self.get(version)
        return [s.index for s in entry.manifest.all_shards] if entry else None

    def file_size(self, version: int, path: str) -> int | None:
        entry = self.get(version)
        return entry.served_paths.get(path) if entry else None

    def servable_path(self, version: int, path: str, start: int, stop: int) -> Path | None:
        entry = self.get(version)
        if entry is None or path not in entry.served_paths:
            return None
        return resolve_inside(entry.directory, path)

    def streamable(self, version: int, path: str, start: int, stop: int) -> None:
        return None  # the origin holds whole versions only

    def touch(self, version: int, reading: int) -> None:
        """The origin never deletes checkpoints (the trainer owns them), so reads need no tracking."""


class Origin:
    """Trainer-side publisher and server.

    >>> origin = Origin(Path("ckpts"), Identity.load("trainer.pem"), run_id="run-1")
    >>> server = origin.serve_in_thread()          # or `await origin.start()` inside an event loop
    >>> origin.publish(Path("ckpts/step_7"), 7)     # after the trainer wrote step_7/
    """

    def __init__(
        self,
        checkpoint_root: Path,
        identity: Identity,
        run_id: str = "swarmrl",
        config: OriginConfig | None = None,
    ) -> None:
        self.config = config or OriginConfig()
        self.identity = identity
        self.run_id = run_id
        self.store = OriginStore(Path(checkpoint_root), identity.node_id)
        self.notifier = Notifier()
        self.metrics = ServerMetrics("origin")
        self._publish_lock = threading.Lock()
        self.store.rescan()

    def publish(self, checkpoint_dir: Path | None, version: int) -> Manifest:
        """Sign and serve `checkpoint_dir` (default `<root>/step_<version>`) as `version`; thread-safe.

        With `config.delta`, the payload against the newest older published version is written too.
        """
        directory = Path(checkpoint_dir) if checkpoint_dir else self.store.root / step_dir_name(version)
        with self._publish_lock:
            if version in self.store.versions():
                raise ShardcastError(f"version {version} is already published")
            older = [v for v in self.store.versions() if v < version]
            parent_dir = None
            if self.config.delta and older:
                candidate = self.store.get(older[-1])
                if candidate is not None and candidate.directory.is_dir():
                    parent_dir = candidate.directory
            signed = publish_checkpoint(
                directory,
                version,
                self.identity,
                self.run_id,
                self.config.shard_size,
                parent_dir=parent_dir,
                delta_chunk_size=self.config.delta_chunk_size,
                delta_zstd_level=self.config.delta_zstd_level,
                hash_algorithm=self.config.hash_algorithm,
            )
            manifest = self.store.register(directory, signed.to_bytes())
        self.notifier.notify()
        return manifest

    def app(self) -> web.Application:
        app = build_app(self.store, self.notifier, self.metrics)
        app.cleanup_ctx.append(self._rescan_loop)
        return app

    async def _rescan_loop(self, app: web.Application):
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.config.scan_interval_s)
                if await asyncio.to_thread(self.store.rescan):
                    self.notifier.notify()

        task = asyncio.create_task(loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def start(self) -> tuple[web.AppRunner, str]:
        """Serve on the running loop; returns the runner (`await runner.cleanup()` stops) and the URL."""
        return await start_site(
            self.app(),
            self.config.host,
            self.config.port,
            self.config.connections,
            self.metrics,
            "shardcast origin",
        )

    def serve_in_thread(self) -> ServerThread:
        """Serve from a background thread (for a synchronous trainer); `.url`, `.stop()`."""
        return ServerThread(
            self.app,
            self.config.host,
            self.config.port,
            self.config.connections,
            self.metrics,
            "shardcast origin",
        ).start()
