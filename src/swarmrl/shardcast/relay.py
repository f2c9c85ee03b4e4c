"""A relay: mirrors one or more upstreams (origin or other relays), verifies every shard against the
trainer-signed manifest before completing it to anyone, and keeps the newest `keep_versions` versions.

It learns of new versions by long-polling each upstream's `/latest`, so a new version starts mirroring within
milliseconds of being published; an announcement counts only once the version's trainer-signed manifest is in
hand (an upstream announcing versions it cannot back is demoted and not chased). It advertises a version as
soon as its manifest verifies, and each shard once its request upstream is under way: the shard's bytes are
passed on as they land and its last byte once they hash right (`swarmrl.shardcast.streaming`), so clients pull
from a relay that is still mirroring without waiting a whole shard per hop. The announcement lists the shards
its sender holds, requested at once; the next version's delta is requested before it exists, the requests held
upstream until it is published (`swarmrl.shardcast.parking`), so over a long path its bytes arrive with its
announcement rather than a round trip after it.
Garbage collection spares versions with reads in flight or read within `gc_grace_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from swarmrl.configs.shardcast import ClientConfig, RelayConfig
from swarmrl.httpserve import Notifier
from swarmrl.shardcast.connections import Connections
from swarmrl.shardcast.delta import rebuild_file
from swarmrl.shardcast.discovery import as_version, claimed_shards, enclosed_manifest
from swarmrl.shardcast.errors import DeltaError, ManifestError, ShardcastError
from swarmrl.shardcast.fsutil import atomic_write_bytes, preallocate, resolve_inside, unique_temp_name
from swarmrl.shardcast.hashing import digest_range
from swarmrl.shardcast.hedge import AllAttemptsFailed
from swarmrl.shardcast.layout import META_DIR, manifest_path
from swarmrl.shardcast.manifest import Manifest, ShardEntry, parse_signed_manifest
from swarmrl.shardcast.parking import ParkedRanges
from swarmrl.shardcast.selection import source_policy
from swarmrl.shardcast.server import ServerMetrics, ServerThread, build_app, start_site
from swarmrl.shardcast.streaming import InFlight, InFlightShards
from swarmrl.shardcast.transfer import (
    ShardDownloader,
    SourceFailure,
    TransferStats,
    get_json,
    normalize_sources,
    race_manifest,
)
from swarmrl.steps import parse_step_dir_name, step_dir_name

log = logging.getLogger(__name__)
VERIFIED_NAME = "verified.json"


@dataclass
class _Mirrored:
    directory: Path
    manifest: Manifest
    raw: bytes
    verified: set[int] = field(default_factory=set)
    readers: int = 0
    last_read: float = 0.0
    shards_by_file: dict[str, list[ShardEntry]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.verified) == len(self.manifest.all_shards)


class RelayStore:
    """Versions held by a relay, and which of their shards are verified."""

    def __init__(self, data_dir: Path, on_change: Callable[[], None] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self._held: dict[int, _Mirrored] = {}
        self._lock = threading.Lock()
        self.in_flight = InFlightShards(on_change)

    def add(self, manifest: Manifest, raw: bytes, verified: set[int]) -> _Mirrored:
        directory = self.data_dir / step_dir_name(manifest.version)
        entry = _Mirrored(directory, manifest, raw, set(verified))
        for shard in manifest.all_shards:
            entry.shards_by_file.setdefault(shard.path, []).append(shard)
        entry.sizes = {f.path: f.size for f in manifest.files}
        if manifest.delta:
            entry.sizes.update({e.payload_path: e.payload_size for e in manifest.delta.entries})
        with self._lock:
            self._held[manifest.version] = entry
        return entry

    def get(self, version: int) -> _Mirrored | None:
        with self._lock:
            return self._held.get(version)

    def remove(self, version: int) -> None:
        with self._lock:
            self._held.pop(version, None)
        self.in_flight.forget(version)

    def versions(self) -> list[int]:
        with self._lock:
            return sorted(self._held)

    def manifest_bytes(self, version: int) -> bytes | None:
        entry = self.get(version)
        return entry.raw if entry else None

    def available_shards(self, version: int) -> list[int] | None:
        """Verified shards and those arriving now (served cut-through, their last byte after they verify)."""
        entry = self.get(version)
        return sorted(entry.verified | self.in_flight.indices(version)) if entry else None

    def file_size(self, version: int, path: str) -> int | None:
        entry = self.get(version)
        return entry.sizes.get(path) if entry else None

    def servable_path(self, version: int, path: str, start: int, stop: int) -> Path | None:
        entry = self.get(version)
        if entry is None or path not in entry.sizes:
            return None
        shards = entry.shards_by_file.get(path, [])
        shard_size = entry.manifest.shard_size
        touched = shards[start // shard_size : (max(stop, start + 1) - 1) // shard_size + 1]
        if not all(s.index in entry.verified for s in touched):
            return None
        return resolve_inside(entry.directory, path)

    def streamable(self, version: int, path: str, start: int, stop: int) -> tuple[Path, InFlight] | None:
        """The file and the upstream request of the one shard holding [start, stop), while it is in flight."""
        entry = self.get(version)
        if entry is None or path not in entry.sizes:
            return None
        flight = self.in_flight.covering(version, entry.shards_by_file.get(path, []), start, stop)
        return None if flight is None else (resolve_inside(entry.directory, path), flight)

    def touch(self, version: int, reading: int) -> None:
        entry = self.get(version)
        if entry is not None:
            entry.readers += reading
            entry.last_read = time.monotonic()


class Relay:
    """Mirror and server. `await relay.start()` inside a loop, or `relay.serve_in_thread()`."""

    def __init__(
        self, config: RelayConfig, trainer_public_key: str, client_config: ClientConfig | None = None
    ) -> None:
        self.config = config
        self.upstreams = normalize_sources(config.upstreams)
        self.public_key = trainer_public_key.lower()
        self.client_config = client_config or ClientConfig(
            concurrency=config.concurrency, selection=config.selection
        )
        self.notifier = Notifier()
        self.store = RelayStore(config.data_dir, self.notifier.notify)
        self.metrics = ServerMetrics("relay")
        self.selector = source_policy(self.upstreams, self.client_config)
        self._mirroring: dict[int, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._connections: Connections | None = None  # to the upstreams, kept from one version to the next
        self.parked = (
            ParkedRanges(self.client_config, config.long_poll_s, self.client_config.concurrency)
            if config.park_next
            else None
        )
        self.stats: dict[int, TransferStats] = {}
        self.mirror_seconds: dict[int, float] = {}  # version → seconds its (last) mirroring pass took

    def status(self, url: str) -> dict:
        """Where this relay sits and what it holds (`url`: where it serves), in the coordinator's RelayReport
        shape: the dashboard draws the relay tree and each version's spread and mirror throughput from it."""
        versions = []
        for version in self.store.versions():
            entry = self.store.get(version)
            if entry is None:  # collected meanwhile
                continue
            complete = entry.complete
            versions.append(
                {
                    "version": version,
                    "complete": complete,
                    "bytes": sum(s.length for s in entry.manifest.all_shards if s.index in entry.verified),
                    "seconds": self.mirror_seconds.get(version) if complete else None,
                }
            )
        served = self.metrics.registry.get_sample_value("shardcast_bytes_served_total", {"role": "relay"})
        return {
            "url": url,
            "upstreams": list(self.upstreams),
            "versions": versions,
            "served_bytes": int(served or 0),
        }

    # ---- serving -------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = build_app(self.store, self.notifier, self.metrics)
        app.cleanup_ctx.append(self._background)
        return app

    async def start(self) -> tuple[web.AppRunner, str]:
        return await start_site(
            self.app(), self.config.host, self.config.port, self.config.connections, self.metrics, "relay"
        )

    def serve_in_thread(self) -> ServerThread:
        return ServerThread(
            self.app, self.config.host, self.config.port, self.config.connections, self.metrics, "relay"
        ).start()

    async def _background(self, app: web.Application):
        self._connections = Connections.open(self.client_config)
        await asyncio.to_thread(self._load_existing)
        for version in self.store.versions():
            entry = self.store.get(version)
            if entry is not None and not entry.complete:
                self._start_mirror(version)
        self._tasks = [asyncio.create_task(self._follow(url)) for url in self.upstreams]
        self._tasks.append(asyncio.create_task(self._gc_loop()))
        self._tasks += [
            asyncio.create_task(self._mirror_pinned(v))
            for v in self.config.pinned_versions
            if self.store.get(v) is None
        ]
        yield
        tasks = self._tasks
        for task in tasks + list(self._mirroring.values()):
            task.cancel()
        for task in tasks + list(self._mirroring.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.parked is not None:
            self.parked.close()
        await self._connections.aclose()

    @property
    def connections(self) -> Connections:
        if self._connections is None:
            raise ShardcastError("the relay's connections open when it starts serving")
        return self._connections

    # ---- following upstreams -------------------------------------------------------------------------
    async def add_upstream(self, url: str) -> None:
        """Start mirroring from one more upstream (call on the relay's event loop); stalled versions retry."""
        url = url.rstrip("/")
        if url in self.upstreams:
            return
        self.upstreams.append(url)
        self.selector.add(url)
        self._tasks.append(asyncio.create_task(self._follow(url)))
        for version, task in list(self._mirroring.items()):
            if not task.done() and self.store.get(version) is not None:
                # restart stalled mirrors so they can use the new upstream now
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self._start_mirror(version)

    async def _follow(self, upstream: str) -> None:
        """Long-poll one upstream for versions newer than the newest this relay knows.

        An announced version is mirrored only once its trainer-signed manifest is in hand; an upstream that
        announces a version it cannot back is demoted, waits out its back-off, and is asked only about
        versions newer than its lie.
        """
        refuted = -1
        while True:
            known = self.store.versions()
            after = max(known[-1] if known else -1, refuted)
            try:
                body = await get_json(
                    self.connections.http,
                    f"{upstream}/latest?after={after}&wait={self.config.long_poll_s}&manifest=1",
                    timeout=self.config.long_poll_s + 10,
                )
            except SourceFailure as exc:
                log.debug("upstream %s unreachable: %s", upstream, exc)
                await asyncio.sleep(self.config.retry_interval_s)
                continue
            latest = as_version(body.get("latest"))
            if latest is None or latest <= after:
                await asyncio.sleep(0.05)  # an upstream answering "nothing new" at once must not make us spin
                continue
            mirroring = self._mirroring.get(latest)
            if mirroring is not None and not mirroring.done():
                await asyncio.sleep(0.05)  # its mirror is starting: the store lists it in a moment
                continue
            enclosed = enclosed_manifest(body, latest, self.public_key)
            backed = enclosed or await self._verified_manifest(upstream, latest)
            if backed is None:
                refuted = latest
                self.metrics.manifests_rejected.labels("relay").inc()
                await asyncio.sleep(max(self.selector.earliest_ready([upstream]) - time.monotonic(), 0.05))
                continue
            claimed = {upstream: claimed_shards(body, enclosed[0])} if enclosed else None
            self._start_mirror(latest, *backed, claimed=claimed)
            if self.parked is not None:
                self.parked.park_next(upstream, backed[0])

    async def _mirror_pinned(self, version: int) -> None:
        """Mirror a pinned version this relay lacks, however old: ask the upstreams for its signed manifest
        until one serves it (it may not be published yet), then mirror it like an announced one."""
        while self.store.get(version) is None:
            errors: dict[str, str] = {}
            try:
                manifest, raw, _ = await race_manifest(
                    self.connections.http,
                    self.selector.ranked(self.upstreams),
                    version,
                    self.public_key,
                    self.selector,
                    self.client_config,
                    self.stats.setdefault(version, TransferStats()),
                    errors,
                )
            except AllAttemptsFailed:
                log.debug("relay: pinned version %d not served upstream yet: %s", version, errors)
                await asyncio.sleep(self.config.retry_interval_s)
                continue
            self._start_mirror(version, manifest, raw)
            return

    async def _verified_manifest(self, announcer: str, version: int) -> tuple[Manifest, bytes] | None:
        """The signed manifest of an announced version, asked of its announcer first (hedged to the other
        upstreams); None, with the announcer demoted, when no genuine one came."""
        others = self.selector.ranked([u for u in self.upstreams if u != announcer])
        errors: dict[str, str] = {}
        stats = self.stats.setdefault(version, TransferStats())
        try:
            manifest, raw, _ = await race_manifest(
                self.connections.http,
                [announcer, *others],
                version,
                self.public_key,
                self.selector,
                self.client_config,
                stats,
                errors,
                claimed_by={announcer},
            )
        except AllAttemptsFailed:
            log.warning(
                "relay: %s announced version %d without a genuine manifest: %s", announcer, version, errors
            )
            self.selector.record_corrupt(announcer, time.monotonic())
            self.stats.pop(version, None)
            return None
        return manifest, raw

    def _start_mirror(
        self,
        version: int,
        manifest: Manifest | None = None,
        raw: bytes | None = None,
        claimed: dict[str, set[int]] | None = None,
    ) -> None:
        """Mirror `version`: one already held (after a restart), or a new one whose verified manifest is given
        (with the shards its announcer claimed to hold, requested at once)."""
        task = self._mirroring.get(version)
        if task is None or task.done():
            self._mirroring[version] = asyncio.create_task(self._mirror(version, manifest, raw, claimed))

    async def _mirror(
        self,
        version: int,
        manifest: Manifest | None,
        raw: bytes | None,
        claimed: dict[str, set[int]] | None = None,
    ) -> None:
        stats = self.stats.setdefault(version, TransferStats())
        while True:
            try:
                await self._mirror_once(version, manifest, raw, stats, claimed)
                return
            except ShardcastError as exc:
                log.warning("relay: mirroring version %d stalled: %s", version, exc)
                claimed = None  # stale by now: a retry asks every upstream afresh
                await asyncio.sleep(self.config.retry_interval_s)
            held = self._windowed(self.store.versions())
            pinned = version in self.config.pinned_versions
            if (
                not pinned
                and len(held) >= self.config.keep_versions
                and version < held[-self.config.keep_versions]
            ):
                return  # it fell out of the window while failing; stop trying

    async def _mirror_once(
        self,
        version: int,
        manifest: Manifest | None,
        raw: bytes | None,
        stats: TransferStats,
        claimed: dict[str, set[int]] | None,
    ) -> None:
        entry = self.store.get(version)
        if entry is None:
            assert manifest is not None and raw is not None, (
                "a new version is mirrored from its verified manifest"
            )
            held = self.store.versions()
            directory = self.store.data_dir / step_dir_name(version)
            await asyncio.to_thread(self._prepare_directory, directory, manifest, raw)
            entry = self.store.add(manifest, raw, set())
            if held and version > held[-1] or not held:
                self.notifier.notify()

        def mark(shard: ShardEntry) -> None:
            entry.verified.add(shard.index)
            self.store.in_flight.recorded(version, shard.index)
            self.notifier.notify()  # wakes clients long-polling this version's availability
            self.metrics.shards_verified.labels("relay").inc()
            atomic_write_bytes(
                entry.directory / META_DIR / VERIFIED_NAME, json.dumps(sorted(entry.verified)).encode()
            )

        missing = [s for s in entry.manifest.all_shards if s.index not in entry.verified]
        started, fetched_before, rebuilt = time.monotonic(), stats.bytes_downloaded, 0
        # The delta, all a client holding the previous version needs, is mirrored before the full copy, which
        # only newcomers need: over a narrow link the delta does not share it with the full copy. The full copy
        # is then rebuilt here from the delta and the previous version where this relay holds it, and only
        # what that does not give is fetched.
        full = len(entry.manifest.shards)
        for batch in ([s for s in missing if s.index >= full], [s for s in missing if s.index < full]):
            if batch and batch[0].index < full:
                for shard in await self._rebuild_from_parent(entry):
                    mark(shard)
                    rebuilt += 1
                batch = [s for s in batch if s.index not in entry.verified]
            downloader = ShardDownloader(
                self.connections,
                entry.manifest,
                self.upstreams,
                self.selector,
                self.client_config,
                entry.directory,
                stats,
                mark,
                self.store.in_flight if self.config.cut_through else None,
                claimed,
                self.parked,
            )
            try:
                await downloader.download(batch)
            finally:
                if self.parked is not None:  # what was parked for this version and not taken is not wanted
                    self.parked.drop(version)
                if stats.corrupt_shards:
                    self.metrics.shards_rejected.labels("relay").inc(stats.corrupt_shards)
                    stats.corrupt_shards = 0
        elapsed = time.monotonic() - started
        self.mirror_seconds[version] = elapsed
        log.info(
            "relay: version %d complete in %.2f s: %d shards, %d rebuilt from the delta, %.1f MB fetched",
            version,
            elapsed,
            len(missing),
            rebuilt,
            (stats.bytes_downloaded - fetched_before) / 1e6,
        )
        await self.collect_garbage()

    async def _rebuild_from_parent(self, entry: _Mirrored) -> list[ShardEntry]:
        """The full shards of `entry` rebuilt from its verified delta and the parent version held complete
        here, each checked against its signed hash; none when the delta or the parent is not at hand."""
        delta = entry.manifest.delta
        if delta is None or not all(s.index in entry.verified for s in delta.shards):
            return []
        mirroring = self._mirroring.get(delta.parent_version)
        if mirroring is not None and not mirroring.done():
            # Versions come faster than a narrow link carries full copies: the parent's own full copy is
            # being rebuilt from its delta the same way, moments from now.
            await asyncio.wait({mirroring}, timeout=self.client_config.stall_timeout_s)
        parent = self.store.get(delta.parent_version)
        if parent is None or not parent.complete:
            return []
        self.store.touch(delta.parent_version, +1)  # read now: not collected under the rebuild
        try:
            return await asyncio.to_thread(self._rebuild_files, entry, parent)
        finally:
            self.store.touch(delta.parent_version, -1)

    @staticmethod
    def _rebuild_files(entry: _Mirrored, parent: _Mirrored) -> list[ShardEntry]:
        manifest, delta = entry.manifest, entry.manifest.delta
        assert delta is not None
        parent_files = parent.manifest.file_by_path
        rebuilt: list[ShardEntry] = []
        for item in delta.entries:
            if item.parent_digest is not None:
                held = parent_files.get(item.path)
                if held is None or held.digest != item.parent_digest:
                    continue
            out = resolve_inside(entry.directory, item.path)
            scratch = unique_temp_name(out)
            try:
                rebuild_file(manifest, item, entry.directory, parent.directory, scratch)
                os.replace(scratch, out)
            except (OSError, DeltaError) as exc:
                log.warning(
                    "relay: version %d: %s not rebuilt from the delta (%s)", manifest.version, item.path, exc
                )
                scratch.unlink(missing_ok=True)
                continue
            rebuilt += [
                shard
                for shard in entry.shards_by_file[item.path]
                if digest_range(out, shard.offset, shard.length, manifest.hash_algorithm) == shard.digest
            ]
        return rebuilt

    @staticmethod
    def _prepare_directory(directory: Path, manifest: Manifest, raw: bytes) -> None:
        for shard_file, size in [(f.path, f.size) for f in manifest.files] + (
            [(e.payload_path, e.payload_size) for e in manifest.delta.entries] if manifest.delta else []
        ):
            preallocate(resolve_inside(directory, shard_file), size)
        atomic_write_bytes(directory / META_DIR / VERIFIED_NAME, b"[]")
        atomic_write_bytes(manifest_path(directory), raw)

    def _load_existing(self) -> None:
        """After a restart: re-verify what is on disk (claimed shards are re-hashed, never trusted)."""
        data_dir = self.store.data_dir
        if not data_dir.is_dir():
            return
        for child in data_dir.iterdir():
            version = parse_step_dir_name(child.name)
            if version is None:
                continue
            try:
                raw = manifest_path(child).read_bytes()
                manifest = parse_signed_manifest(raw, self.public_key, expected_version=version)
                claimed = set(json.loads((child / META_DIR / VERIFIED_NAME).read_bytes()))
            except (OSError, ValueError, TypeError, ManifestError) as exc:
                log.warning("relay: discarding %s: %s", child, exc)
                shutil.rmtree(child, ignore_errors=True)
                continue
            verified = {
                s.index
                for s in manifest.all_shards
                if s.index in claimed
                and digest_range(resolve_inside(child, s.path), s.offset, s.length, manifest.hash_algorithm)
                == s.digest
            }
            self.store.add(manifest, raw, verified)

    # ---- garbage collection --------------------------------------------------------------------------
    def _windowed(self, versions: list[int]) -> list[int]:
        """The versions the keep window applies to: all but the pinned ones."""
        return [v for v in versions if v not in self.config.pinned_versions]

    async def _gc_loop(self) -> None:
        while True:
            await asyncio.sleep(max(min(self.config.gc_grace_s / 2, 5.0), 0.2))
            await self.collect_garbage()

    async def collect_garbage(self) -> list[int]:
        """Delete versions older than the newest `keep_versions` complete ones, unless being read or pinned."""
        windowed = self._windowed(self.store.versions())
        complete = [v for v in windowed if (e := self.store.get(v)) is not None and e.complete]
        if len(complete) <= self.config.keep_versions:
            return []
        cutoff = complete[-self.config.keep_versions]
        now = time.monotonic()
        removed = []
        for version in windowed:
            entry = self.store.get(version)
            if entry is None or version >= cutoff:
                continue
            if entry.readers > 0 or now - entry.last_read < self.config.gc_grace_s:
                continue
            task = self._mirroring.pop(version, None)
            if task is not None and not task.done():
                task.cancel()
            self.store.remove(version)
            self.mirror_seconds.pop(version, None)
            await asyncio.to_thread(shutil.rmtree, entry.directory, True)
            self.metrics.versions_collected.labels("relay").inc()
            removed.append(version)
        return removed
