"""The worker-side client: fetch a trainer-signed checkpoint version from origin and relays, verified.

Final layout under `dest_root`: `step_<k>/` (the checkpoint files plus `.shardcast/manifest.json`), which
appears in one rename only after every file hash matched the signed manifest. In-progress downloads live in
`dest_root/.partial/` and survive a crash (see `partial.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from swarmrl.configs.shardcast import ClientConfig, HashAlgorithm
from swarmrl.shardcast.connections import Connections
from swarmrl.shardcast.delta import rebuild_file
from swarmrl.shardcast.discovery import (
    Bounds,
    announced_versions,
    as_version,
    ask_versions,
    enclosed_manifest,
    newest_verified,
)
from swarmrl.shardcast.errors import DeltaError, ManifestError, ShardcastError, ShardIntegrityError
from swarmrl.shardcast.fsutil import atomic_write_bytes, preallocate, resolve_inside
from swarmrl.shardcast.hashing import digest_range
from swarmrl.shardcast.holds import VersionHolds
from swarmrl.shardcast.layout import manifest_path
from swarmrl.shardcast.loop_thread import LoopThread
from swarmrl.shardcast.manifest import Manifest, ShardEntry
from swarmrl.shardcast.partial import PartialDownload, Progress
from swarmrl.shardcast.publish import read_local_manifest
from swarmrl.shardcast.selection import SourcePolicy, source_policy
from swarmrl.shardcast.transfer import (
    ShardDownloader,
    SourceFailure,
    TransferStats,
    fetch_manifest,
    get_json,
    normalize_sources,
)
from swarmrl.shardcast.verify import StreamingVerifier
from swarmrl.steps import parse_step_dir_name, step_dir_name

log = logging.getLogger(__name__)
T = TypeVar("T")
# While a node waits for a version, it samples each source's round trip this often until its window is full.
ROUND_TRIP_PROBE_S = 1.0


def local_versions(dest_root: Path) -> list[int]:
    """Versions fully installed under `dest_root` (a directory with a manifest), oldest first."""
    if not Path(dest_root).is_dir():
        return []
    found = []
    for child in Path(dest_root).iterdir():
        version = parse_step_dir_name(child.name)
        if version is not None and manifest_path(child).is_file():
            found.append(version)
    return sorted(found)


class ShardcastClient:
    """Async client; use as `async with ShardcastClient(...) as client: path = await client.fetch(k)`.

    Its connections to the sources (`Connections`) are opened on entry and kept alive until it closes.
    `selector`: carry what was learned about the sources over from an earlier client. `holds`: the versions
    the node is loading or using, which pruning old versions never deletes.
    """

    def __init__(
        self,
        sources: list[str],
        trainer_public_key: str,
        dest_root: Path,
        config: ClientConfig | None = None,
        run_id: str | None = None,
        selector: SourcePolicy | None = None,
        holds: VersionHolds | None = None,
    ) -> None:
        self.sources = normalize_sources(sources)
        self.trainer_public_key = trainer_public_key.lower()
        self.dest_root = Path(dest_root)
        self.config = config or ClientConfig()
        self.run_id = run_id
        self.selector = selector or source_policy(self.sources, self.config)
        self.last_stats = TransferStats()
        self.holds = holds or VersionHolds()
        self._connections: Connections | None = None

    async def __aenter__(self) -> ShardcastClient:
        self._connections = Connections.open(self.config)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._connections is not None:
            await self._connections.aclose()
            self._connections = None

    @property
    def connections(self) -> Connections:
        if self._connections is None:
            raise ShardcastError("use the client inside `async with`")
        return self._connections

    async def newest_verified(
        self, ceiling: int | None = None, after: int | None = None
    ) -> tuple[Manifest, bytes] | None:
        """The newest version in (after, ceiling] whose trainer-signed manifest a source serves, with that
        manifest; None if none. Announcements alone are never believed (see `discovery.py`)."""
        return await newest_verified(
            self.connections.http,
            self.sources,
            self.trainer_public_key,
            self.selector,
            self.config,
            self.last_stats,
            Bounds(floor=after, ceiling=ceiling),
            self.run_id,
        )

    async def latest_version(self, ceiling: int | None = None) -> int | None:
        """The newest version (at most `ceiling`) backed by a genuine signed manifest, or None."""
        found = await self.newest_verified(ceiling)
        return found[0].version if found is not None else None

    async def wait_for_version(self, after: int, timeout_s: float, ceiling: int | None = None) -> int | None:
        """The version `next_verified` finds, or None at the timeout."""
        found = await self.next_verified(after, timeout_s, ceiling)
        return found[0].version if found is not None else None

    async def next_verified(
        self, after: int, timeout_s: float, ceiling: int | None = None
    ) -> tuple[Manifest, bytes] | None:
        """Long-poll the sources until a version in (after, ceiling] is announced and its signed manifest
        verifies, and return that manifest; None at the timeout. An announcement carries its version's
        manifest, so a genuine one is the answer at once; one without (or with a manifest that does not verify)
        sends the client to ask every source for the newest version it can back. A source announcing a version
        it cannot back is demoted there and, while it backs off, not listened to."""
        deadline = time.monotonic() + timeout_s
        bounds = Bounds(floor=after, ceiling=ceiling)
        # Which source is near decides where the download goes; asking every source for its versions measures
        # that, so each source is asked again (every ROUND_TRIP_PROBE_S) while the announcement is awaited, until
        # its window of round trips is full: a node's first samples, taken while it starts and downloads its
        # first policy over a narrow link, can be a second long for every source, and the minimum of one sample
        # made a distant relay look as near as the node's own (its shards then crossed the narrow link twice).
        first: dict[str, asyncio.Future[None]] = {}
        probes = []
        for url in self.sources:
            if self.selector.stats[url].measuring:
                first[url] = asyncio.get_running_loop().create_future()
                probes.append(asyncio.create_task(self._sample_round_trips(url, first[url])))
        unmeasured = [first[url] for url in self.sources if self.selector.stats[url].round_trip is None]
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                announced = await self._announcement(bounds, remaining)
                if announced is False:
                    return None
                if announced is not True:
                    if unmeasured:  # the first choice of sources needs a round trip of each
                        await asyncio.wait(unmeasured, timeout=self.config.hedge_after_s)
                    return announced
                found = await self.newest_verified(ceiling, after)
                if found is not None:
                    return found
                await asyncio.sleep(min(self.config.backoff_base_s, max(deadline - time.monotonic(), 0)))
            return None
        finally:
            for probe in probes:
                probe.cancel()
            await asyncio.gather(*probes, return_exceptions=True)

    async def _measure_round_trip(self, url: str) -> None:
        with contextlib.suppress(SourceFailure):  # measured on a later call, once it answers
            await ask_versions(self.connections.http, url, self.selector, self.config)

    async def _sample_round_trips(self, url: str, first: asyncio.Future[None]) -> None:
        """Ask `url` for its versions every ROUND_TRIP_PROBE_S until its window of round trips is full;
        `first` is done once the first answer (or failure) is in."""
        await self._measure_round_trip(url)
        first.set_result(None)
        while self.selector.stats[url].measuring:
            await asyncio.sleep(ROUND_TRIP_PROBE_S)
            await self._measure_round_trip(url)

    async def _announcement(self, bounds: Bounds, timeout_s: float) -> tuple[Manifest, bytes] | bool:
        """As soon as a source (not backing off) announces a version within bounds: the verified manifest the
        announcement carried, or True without one; False at the timeout."""
        now = time.monotonic()
        listening = [url for url in self.sources if self.selector.ready(url, now)] or self.sources
        tasks = [asyncio.create_task(self._long_poll(url, bounds, timeout_s)) for url in listening]
        try:
            for next_done in asyncio.as_completed(tasks, timeout=timeout_s + 5):
                try:
                    announced = await next_done
                except TimeoutError:
                    return False
                if announced is not False:
                    return announced
            return False
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _long_poll(self, url: str, bounds: Bounds, timeout_s: float) -> tuple[Manifest, bytes] | bool:
        after = -1 if bounds.floor is None else bounds.floor
        try:
            body = await get_json(
                self.connections.http,
                f"{url}/latest?after={after}&wait={timeout_s}&manifest=1",
                timeout=timeout_s + 5,
            )
        except SourceFailure:
            await asyncio.sleep(min(timeout_s, 1.0))
            return False
        if not any(bounds.allows(v) for v in announced_versions(body)):
            return False
        latest = as_version(body.get("latest"))
        if latest is None or not bounds.allows(latest):
            return True
        return enclosed_manifest(body, latest, self.trainer_public_key, self.run_id) or True

    async def fetch(
        self, version: int | None = None, min_version: int | None = None, max_version: int | None = None
    ) -> Path:
        """Download, verify and install `version` and return its directory.

        `version=None`: the newest version whose signed manifest verifies, at most `max_version` (the caller's
        trusted bound, e.g. the coordinator's step); if nothing newer than the newest installed version is
        out there, that one's directory. `min_version`: refuse manifests older than this (replay protection
        when the caller tracks a floor).
        """
        self.last_stats = TransferStats()
        if version is None:
            found = await self.refresh(max_version, min_version)
            if found is None:
                bound = "" if max_version is None else f" up to {max_version}"
                raise ShardcastError(
                    f"no source backs any version{bound} with a signed manifest: {self.sources}"
                )
            return found[1]
        installed = self._installed(version)
        if installed is not None:
            return installed
        manifest, raw = await fetch_manifest(
            self.connections.http,
            self.sources,
            version,
            self.trainer_public_key,
            self.selector,
            self.config,
            self.last_stats,
            min_version=min_version,
            run_id=self.run_id,
        )
        return await self._install(manifest, raw)

    async def install(self, manifest: Manifest, raw: bytes) -> Path:
        """Download, verify and install the version of a manifest already verified (`next_verified`'s)."""
        self.last_stats = TransferStats()
        return self._installed(manifest.version) or await self._install(manifest, raw)

    def _installed(self, version: int) -> Path | None:
        final = self.dest_root / step_dir_name(version)
        if final.is_dir() and manifest_path(final).is_file():
            read_local_manifest(final, self.trainer_public_key, version)
            return final
        return None

    async def refresh(
        self, ceiling: int | None = None, min_version: int | None = None
    ) -> tuple[int, Path] | None:
        """Install the newest verified version (at most `ceiling`) if it is newer than every installed one;
        return the newest installed version at most `ceiling` and its directory (None: none anywhere)."""
        installed = [v for v in local_versions(self.dest_root) if ceiling is None or v <= ceiling]
        found = await self.newest_verified(ceiling, installed[-1] if installed else None)
        if found is None:
            if not installed:
                return None
            return installed[-1], self.dest_root / step_dir_name(installed[-1])
        manifest, raw = found
        if min_version is not None and manifest.version < min_version:
            raise ManifestError(f"replayed manifest: version {manifest.version} is older than {min_version}")
        return manifest.version, await self._install(manifest, raw)

    async def _install(self, manifest: Manifest, raw: bytes) -> Path:
        """Download the version `manifest` describes into a partial directory and rename it into place."""
        version = manifest.version
        final = self.dest_root / step_dir_name(version)
        self.dest_root.mkdir(parents=True, exist_ok=True)
        partial = PartialDownload.acquire(self.dest_root, version)
        try:
            parent_dir = self._usable_parent(manifest)
            if parent_dir is not None:
                try:
                    await self._fetch_delta(manifest, raw, partial, parent_dir)
                    self.last_stats.used_delta = True
                except DeltaError as exc:
                    log.warning("delta of version %d failed (%s); fetching the full version", version, exc)
                    partial.reset()
                    parent_dir = None
            if parent_dir is None:
                await self._fetch_full(manifest, raw, partial)
            atomic_write_bytes(manifest_path(partial.directory), raw)
            installed = partial.finish(final)
        finally:
            partial.release()
        # In a thread: the loop may serve another call meanwhile (a CheckpointFetcher's, from another thread).
        await asyncio.to_thread(self._collect_old_versions, version)
        return installed

    def _usable_parent(self, manifest: Manifest) -> Path | None:
        """The verified local parent the delta was coded against, or None (then fetch the full version)."""
        if not self.config.use_delta or manifest.delta is None:
            return None
        parent_dir = self.dest_root / step_dir_name(manifest.delta.parent_version)
        try:
            parent = read_local_manifest(parent_dir, self.trainer_public_key, manifest.delta.parent_version)
        except ManifestError:
            return None
        parent_files = parent.file_by_path
        for entry in manifest.delta.entries:
            if entry.parent_digest is not None:
                held = parent_files.get(entry.path)
                if held is None or held.digest != entry.parent_digest:
                    return None
        return parent_dir

    async def _download(
        self,
        manifest: Manifest,
        raw: bytes,
        partial: PartialDownload,
        plan: str,
        shards: list[ShardEntry],
        sizes: dict[str, int],
        verifier: StreamingVerifier | None = None,
    ) -> Progress:
        """Preallocate, resume what a previous run verified, download the rest; returns the final progress."""
        manifest_sha = hashlib.sha256(raw).hexdigest()
        previous = partial.previous
        if previous is None or previous.manifest_sha256 != manifest_sha or previous.plan != plan:
            partial.reset()
            previous = None
        for relative, size in sizes.items():
            preallocate(resolve_inside(partial.directory, relative), size)
        progress = Progress(manifest.version, manifest_sha, plan)
        if previous is not None:
            progress.verified = await asyncio.to_thread(
                self._still_valid, partial.directory, shards, previous, manifest.hash_algorithm
            )
            self.last_stats.shards_resumed = len(progress.verified)
        partial.save(progress)
        if verifier is not None:
            for shard in shards:
                if shard.index in progress.verified:
                    verifier.shard_done(shard)

        def mark(shard: ShardEntry) -> None:
            progress.verified.add(shard.index)
            partial.save(progress)
            if verifier is not None:
                verifier.shard_done(shard)

        missing = [s for s in shards if s.index not in progress.verified]
        downloader = ShardDownloader(
            self.connections,
            manifest,
            self.sources,
            self.selector,
            self.config,
            partial.directory,
            self.last_stats,
            mark,
        )
        await downloader.download(missing)
        return progress

    @staticmethod
    def _still_valid(
        directory: Path, shards: list[ShardEntry], previous: Progress, algorithm: HashAlgorithm
    ) -> set[int]:
        return {
            s.index
            for s in shards
            if s.index in previous.verified
            and digest_range(resolve_inside(directory, s.path), s.offset, s.length, algorithm) == s.digest
        }

    async def _fetch_full(self, manifest: Manifest, raw: bytes, partial: PartialDownload) -> None:
        """Download every shard; each file's whole digest is computed as its shards land, then checked."""
        sizes = {f.path: f.size for f in manifest.files}
        verifier = StreamingVerifier(partial.directory, manifest.files, manifest.hash_algorithm)
        try:
            await self._download(manifest, raw, partial, "full", manifest.shards, sizes, verifier)
            digests = await verifier.finish()
        finally:
            verifier.close()
        for entry in manifest.files:
            if digests[entry.path] != entry.digest:
                partial.reset()  # bytes that failed their check are not kept for a resume
                raise ShardIntegrityError(
                    f"version {manifest.version}: {entry.path} hashes to {digests[entry.path][:16]}…, the "
                    f"manifest says {entry.digest[:16]}… (local disk corrupted the file?)"
                )

    async def _fetch_delta(
        self, manifest: Manifest, raw: bytes, partial: PartialDownload, parent: Path
    ) -> None:
        assert manifest.delta is not None
        sizes = {e.payload_path: e.payload_size for e in manifest.delta.entries}
        await self._download(manifest, raw, partial, "delta", manifest.delta.shards, sizes)
        for entry in manifest.delta.entries:
            out = resolve_inside(partial.directory, entry.path)
            out.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(rebuild_file, manifest, entry, partial.directory, parent, out)
        shutil.rmtree(resolve_inside(partial.directory, ".shardcast/delta"), ignore_errors=True)

    def _collect_old_versions(self, keep: int) -> None:
        """Keep the newest `keep_versions` installed versions (never the one just fetched, a pinned one, nor
        one the node holds: loading or using)."""
        installed = [v for v in local_versions(self.dest_root) if v not in self.config.pinned_versions]
        old = [v for v in installed[: max(len(installed) - self.config.keep_versions, 0)] if v != keep]
        self.holds.prune(self.dest_root, old)


class CheckpointFetcher:
    """Fetching for a synchronous caller that asks again and again (a worker refreshing its policy).

    One `ShardcastClient` on one event loop (a daemon thread) serves every call, so what was learned about the
    sources (throughput, round trips, failures, lies and their back-off) and the kept-alive connections carry
    over from call to call: a liar found out once is not asked again until its back-off has passed. Calls from
    several threads run side by side on that loop; calls that install a version take turns (a lock), so two
    threads of one process (a worker's prefetching and its foreground) never download into the same directory
    at once. `close()` (or `with`) ends the loop; a process that fetches until it exits need not.
    """

    def __init__(
        self,
        sources: list[str],
        trainer_public_key: str,
        dest_root: Path,
        config: ClientConfig | None = None,
        run_id: str | None = None,
    ) -> None:
        self.sources = normalize_sources(sources)
        self.trainer_public_key = trainer_public_key
        self.dest_root = Path(dest_root)
        self.config = config or ClientConfig()
        self.run_id = run_id
        self.selector = source_policy(self.sources, self.config)
        self.last_stats = TransferStats()  # what the last `fetch` moved, and from where
        self._installing = threading.Lock()
        self._client = ShardcastClient(
            self.sources, trainer_public_key, self.dest_root, self.config, run_id, self.selector
        )
        self.holds = self._client.holds  # a version held here is never pruned by an install
        self._loop = LoopThread("shardcast-fetcher")
        self._loop.run(self._client.__aenter__())

    def close(self) -> None:
        self._loop.run(self._client.close())
        self._loop.close()

    def __enter__(self) -> CheckpointFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, work: Callable[[ShardcastClient], Awaitable[T]]) -> T:
        async def run() -> T:
            return await work(self._client)

        return self._loop.run(run())

    def latest_version(self, ceiling: int | None = None) -> int | None:
        """The newest version (at most `ceiling`) backed by a genuine signed manifest, or None."""
        return self._run(lambda client: client.latest_version(ceiling))

    def fetch(
        self, version: int | None = None, min_version: int | None = None, max_version: int | None = None
    ) -> Path:
        """`ShardcastClient.fetch`: install `version` (None: the newest verified, at most `max_version`)."""
        return self._installed_by(lambda client: client.fetch(version, min_version, max_version))

    def install(self, manifest: Manifest, raw: bytes) -> Path:
        """`ShardcastClient.install`: the version of a verified manifest, downloaded and installed."""
        return self._installed_by(lambda client: client.install(manifest, raw))

    def _installed_by(self, installing: Callable[[ShardcastClient], Awaitable[T]]) -> T:
        """Run an install (one at a time) and keep what it moved as `last_stats`."""

        async def work(client: ShardcastClient) -> T:
            client.last_stats = TransferStats()
            try:
                return await installing(client)
            finally:
                self.last_stats = client.last_stats

        with self._installing:
            return self._run(work)

    def refresh(self, ceiling: int | None = None) -> tuple[int, Path] | None:
        """`ShardcastClient.refresh`: the newest installed version at most `ceiling` after installing a
        newer verified one if there is one, with its directory; None while no version exists."""
        return self._installed_by(lambda client: client.refresh(ceiling))

    def wait_for_version(self, after: int, timeout_s: float, ceiling: int | None = None) -> int | None:
        """`ShardcastClient.wait_for_version`: a version in (after, ceiling] once announced and signed."""
        return self._run(lambda client: client.wait_for_version(after, timeout_s, ceiling))

    def next_verified(
        self, after: int, timeout_s: float, ceiling: int | None = None
    ) -> tuple[Manifest, bytes] | None:
        """`ShardcastClient.next_verified`: the signed manifest of a version in (after, ceiling] once announced."""
        return self._run(lambda client: client.next_verified(after, timeout_s, ceiling))


def fetch_checkpoint(
    sources: list[str],
    version: int | None,
    dest_root: Path,
    trainer_public_key: str,
    config: ClientConfig | None = None,
    min_version: int | None = None,
    run_id: str | None = None,
    max_version: int | None = None,
) -> Path:
    """Synchronous `ShardcastClient.fetch` for callers without an event loop."""
    with CheckpointFetcher(sources, trainer_public_key, Path(dest_root), config, run_id) as fetcher:
        return fetcher.fetch(version, min_version, max_version)


def latest_version(
    sources: list[str],
    trainer_public_key: str,
    ceiling: int | None = None,
    config: ClientConfig | None = None,
    run_id: str | None = None,
) -> int | None:
    """Synchronous: the newest version (at most `ceiling`) whose trainer-signed manifest a source serves."""
    with CheckpointFetcher(sources, trainer_public_key, Path("."), config, run_id) as fetcher:
        return fetcher.latest_version(ceiling)
