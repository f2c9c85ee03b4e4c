"""The worker-side client: fetch a trainer-signed checkpoint version from origin and relays, verified.

Final layout under `dest_root`: `step_<k>/` (the checkpoint files plus `.shardcast/manifest.json`), which
appears in one rename only after every file hash matched the signed manifest. In-progress downloads live in
`dest_root/.partial/` and survive a crash (see `partial.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import shutil
from pathlib import Path

import aiohttp

from swarmrl.shardcast.config import ClientConfig
from swarmrl.shardcast.delta import apply_delta
from swarmrl.shardcast.errors import DeltaError, ManifestError, ShardcastError, ShardIntegrityError
from swarmrl.shardcast.fsutil import atomic_write_bytes, preallocate, resolve_inside
from swarmrl.shardcast.hashing import HashAlgorithm, digest_range
from swarmrl.shardcast.layout import manifest_path, parse_version_dir_name, version_dir_name
from swarmrl.shardcast.manifest import Manifest, ShardEntry
from swarmrl.shardcast.partial import PartialDownload, Progress
from swarmrl.shardcast.publish import read_local_manifest
from swarmrl.shardcast.selection import SourceSelector
from swarmrl.shardcast.transfer import (
    ShardDownloader,
    SourceFailure,
    TransferStats,
    fetch_manifest,
    get_json,
    normalize_sources,
)
from swarmrl.shardcast.verify import StreamingVerifier

log = logging.getLogger(__name__)


def local_versions(dest_root: Path) -> list[int]:
    """Versions fully installed under `dest_root` (a directory with a manifest), oldest first."""
    if not Path(dest_root).is_dir():
        return []
    found = []
    for child in Path(dest_root).iterdir():
        version = parse_version_dir_name(child.name)
        if version is not None and manifest_path(child).is_file():
            found.append(version)
    return sorted(found)


class ShardcastClient:
    """Async client; use as `async with ShardcastClient(...) as client: path = await client.fetch(k)`."""

    def __init__(
        self,
        sources: list[str],
        trainer_public_key: str,
        dest_root: Path,
        config: ClientConfig | None = None,
        run_id: str | None = None,
    ) -> None:
        self.sources = normalize_sources(sources)
        self.trainer_public_key = trainer_public_key.lower()
        self.dest_root = Path(dest_root)
        self.config = config or ClientConfig()
        self.run_id = run_id
        rng = random.Random(self.config.seed)
        self.selector = SourceSelector(
            self.sources, self.config.exploration, self.config.backoff_base_s, self.config.backoff_max_s, rng
        )
        self.last_stats = TransferStats()
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ShardcastClient:
        connector = aiohttp.TCPConnector(
            limit=4 * self.config.concurrency, limit_per_host=self.config.concurrency
        )
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise ShardcastError("use the client inside `async with`")
        return self._session

    async def latest_version(self) -> int | None:
        """The newest version any source announces (a hint: the manifest is verified only on fetch)."""
        return await announced_latest(self.session, self.sources, self.config.connect_timeout_s)

    async def wait_for_version(self, after: int, timeout_s: float) -> int | None:
        """Long-poll every source until one announces a version newer than `after`, or the timeout."""
        tasks = [asyncio.create_task(self._long_poll(url, after, timeout_s)) for url in self.sources]
        try:
            for next_done in asyncio.as_completed(tasks, timeout=timeout_s + 5):
                try:
                    version = await next_done
                except TimeoutError:
                    return None
                if version is not None and version > after:
                    return version
            return None
        finally:
            for task in tasks:
                task.cancel()

    async def _long_poll(self, url: str, after: int, timeout_s: float) -> int | None:
        try:
            body = await get_json(
                self.session, f"{url}/latest?after={after}&wait={timeout_s}", timeout=timeout_s + 5
            )
        except SourceFailure:
            await asyncio.sleep(min(timeout_s, 1.0))
            return None
        return _as_version(body.get("latest"))

    async def fetch(self, version: int | None = None, min_version: int | None = None) -> Path:
        """Download, verify and install `version` (None: the newest announced); return its directory.

        `min_version`: refuse manifests older than this (replay protection when the caller tracks a floor).
        """
        self.last_stats = TransferStats()
        if version is None:
            announced = await self.latest_version()
            installed = local_versions(self.dest_root)
            if installed and (announced is None or announced <= installed[-1]):
                return self.dest_root / version_dir_name(installed[-1])  # nothing newer out there
            if announced is None:
                raise ShardcastError(f"no source announces any version: {self.sources}")
            version = announced
        final = self.dest_root / version_dir_name(version)
        if final.is_dir() and manifest_path(final).is_file():
            read_local_manifest(final, self.trainer_public_key, version)
            return final
        manifest, raw = await fetch_manifest(
            self.session,
            self.sources,
            version,
            self.trainer_public_key,
            self.selector,
            self.config,
            self.last_stats,
            min_version=min_version,
            run_id=self.run_id,
        )
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
        self._collect_old_versions(keep=version)
        return installed

    def _usable_parent(self, manifest: Manifest) -> Path | None:
        """The verified local parent the delta was coded against, or None (then fetch the full version)."""
        if not self.config.use_delta or manifest.delta is None:
            return None
        parent_dir = self.dest_root / version_dir_name(manifest.delta.parent_version)
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
            self.session,
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
        files = manifest.file_by_path
        for entry in manifest.delta.entries:
            target = files[entry.path]
            out = resolve_inside(partial.directory, entry.path)
            out.parent.mkdir(parents=True, exist_ok=True)
            parent_file = resolve_inside(parent, entry.path) if entry.parent_digest else None
            digest = await asyncio.to_thread(
                apply_delta,
                resolve_inside(partial.directory, entry.payload_path),
                parent_file,
                out,
                target.size,
                manifest.delta.chunk_size,
                manifest.hash_algorithm,
            )
            if digest != target.digest:
                raise DeltaError(f"{entry.path} rebuilt from the delta does not match the signed hash")
        shutil.rmtree(resolve_inside(partial.directory, ".shardcast/delta"), ignore_errors=True)

    def _collect_old_versions(self, keep: int) -> None:
        """Keep the newest `keep_versions` installed versions (never the one just fetched)."""
        installed = local_versions(self.dest_root)
        for old in installed[: max(len(installed) - self.config.keep_versions, 0)]:
            if old != keep:
                shutil.rmtree(self.dest_root / version_dir_name(old), ignore_errors=True)


def fetch_checkpoint(
    sources: list[str],
    version: int | None,
    dest_root: Path,
    trainer_public_key: str,
    config: ClientConfig | None = None,
    min_version: int | None = None,
    run_id: str | None = None,
) -> Path:
    """Synchronous wrapper around `ShardcastClient.fetch` for callers without an event loop."""

    async def run() -> Path:
        async with ShardcastClient(sources, trainer_public_key, Path(dest_root), config, run_id) as client:
            return await client.fetch(version, min_version=min_version)

    return asyncio.run(run())


def _as_version(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


async def announced_latest(
    session: aiohttp.ClientSession, sources: list[str], timeout_s: float
) -> int | None:
    """The newest version any of `sources` announces on /versions; unreachable sources are skipped."""

    async def one(url: str) -> int | None:
        try:
            return _as_version((await get_json(session, f"{url}/versions", timeout=timeout_s)).get("latest"))
        except SourceFailure:
            return None

    known = [v for v in await asyncio.gather(*(one(url) for url in sources)) if v is not None]
    return max(known) if known else None


def latest_version(sources: list[str], timeout_s: float = 5.0) -> int | None:
    """Synchronous: the newest version any source announces, or None."""

    async def run() -> int | None:
        async with aiohttp.ClientSession() as session:
            return await announced_latest(session, normalize_sources(sources), timeout_s)

    return asyncio.run(run())
