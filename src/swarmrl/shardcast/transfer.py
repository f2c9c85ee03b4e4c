"""Moving shards over HTTP: the manifest fetch and the concurrent, verified, in-place shard downloader.

Used by the client (into a partial directory) and by the relay (into its mirror). Every shard is hashed as its
bytes arrive and written straight at its offset in the preallocated final file; nothing is reassembled.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import httpx

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast.connections import Connections
from swarmrl.shardcast.errors import ManifestError, ShardcastError
from swarmrl.shardcast.fsutil import copy_region, resolve_inside, zero_region
from swarmrl.shardcast.hashing import new_hasher
from swarmrl.shardcast.hedge import AllAttemptsFailed, first_success
from swarmrl.shardcast.manifest import Manifest, ShardEntry, parse_signed_manifest
from swarmrl.shardcast.parking import ParkedRanges
from swarmrl.shardcast.range_get import (
    WRITE_BATCH,
    CorruptShard,
    RangeSink,
    SourceFailure,
    fetch_range_into,
    receive_range,
)
from swarmrl.shardcast.selection import SourcePolicy
from swarmrl.shardcast.streaming import STREAM_WRITE_BATCH, InFlight, InFlightShards

log = logging.getLogger(__name__)

AVAILABILITY_WAIT_S = 10.0
WATCH_INTERVAL_S = 0.1
MIN_SHARD_HEDGE_S = 0.25
HEDGE_FACTOR = 4.0
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


@dataclass
class TransferStats:
    """What one fetch or mirror moved, for callers, logs and tests."""

    bytes_downloaded: int = 0
    shards_downloaded: int = 0
    shards_resumed: int = 0
    corrupt_shards: int = 0
    used_delta: bool = False
    bytes_by_source: dict[str, int] = field(default_factory=dict)
    corrupt_by_source: dict[str, int] = field(default_factory=dict)
    manifest_rejected_by_source: dict[str, str] = field(default_factory=dict)


def normalize_sources(sources: list[str]) -> list[str]:
    cleaned = [s.rstrip("/") for s in sources if s and s.strip()]
    if not cleaned:
        raise ShardcastError("no source URLs given")
    return list(dict.fromkeys(cleaned))


def request_deadline_s(config: ClientConfig, nbytes: int) -> float:
    """The whole request, `nbytes` of body included, at the slowest acceptable rate, so a source that trickles
    bytes cannot hold a download slot forever (connecting and silence mid-response have their own limits)."""
    return config.connect_timeout_s + config.request_timeout_s + nbytes / config.min_throughput_bytes_s


async def _get_limited(
    client: httpx.AsyncClient, url: str, total_s: float, limit: int, timeout: httpx.Timeout | None = None
) -> bytes:
    """GET at most `limit` bytes within `total_s` from an untrusted server; SourceFailure (naming no URL) on
    anything unexpected. `timeout`: limits on connecting and on silence (default: `total_s` for each)."""
    timeout = timeout or httpx.Timeout(total_s)
    try:
        async with asyncio.timeout(total_s), client.stream("GET", url, timeout=timeout) as response:
            if response.status_code != 200:
                raise SourceFailure(f"HTTP {response.status_code}", unavailable=response.status_code == 404)
            return await _read_limited(response, limit)
    except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as exc:
        raise SourceFailure(f"{type(exc).__name__} {exc}".strip()) from exc


async def get_json(client: httpx.AsyncClient, url: str, timeout: float) -> dict:
    """GET a small JSON object from an untrusted server; SourceFailure on anything unexpected."""
    try:
        body = await _get_limited(client, url, timeout, MAX_JSON_BYTES)
    except SourceFailure as exc:
        raise SourceFailure(f"{url}: {exc}", unavailable=exc.unavailable) from exc
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise SourceFailure(f"{url}: not JSON") from exc
    if not isinstance(value, dict):
        raise SourceFailure(f"{url}: expected a JSON object")
    return value


async def _read_limited(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise SourceFailure(f"response of {declared} bytes exceeds {limit}")
    parts, total = [], 0
    async for chunk in response.aiter_raw():
        total += len(chunk)
        if total > limit:
            raise SourceFailure(f"response exceeds {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def race_manifest(
    client: httpx.AsyncClient,
    urls: list[str],
    version: int,
    trainer_public_key: str,
    selector: SourcePolicy,
    config: ClientConfig,
    stats: TransferStats,
    errors: dict[str, str],
    min_version: int | None = None,
    run_id: str | None = None,
    claimed_by: Collection[str] = (),
) -> tuple[Manifest, bytes, str]:
    """The trainer-signed manifest of `version` from the first of `urls` (best first) that serves a genuine one,
    hedged: the next source is asked too whenever `hedge_after_s` passes without an answer. Returns the
    manifest, its bytes and the source that served them; AllAttemptsFailed if none did.

    Forged, replayed or malformed manifests demote their source. The sources in `claimed_by` announced this
    version, so answering that they lack its manifest is a false announcement, demoted the same way.
    """

    asked: list[str] = []
    answered: set[str] = set()

    def attempt(url: str) -> Callable[[], Awaitable[tuple[Manifest, bytes, str]]]:
        async def run() -> tuple[Manifest, bytes, str]:
            asked.append(url)
            try:
                raw = await _get_limited(
                    client,
                    f"{url}/v/{version}/manifest",
                    request_deadline_s(config, 0),
                    MAX_MANIFEST_BYTES,
                    httpx.Timeout(config.request_timeout_s, connect=config.connect_timeout_s),
                )
            except SourceFailure as exc:
                answered.add(url)
                errors[url] = str(exc)
                if url in claimed_by and exc.unavailable:
                    stats.manifest_rejected_by_source[url] = (
                        f"announced version {version} without its manifest"
                    )
                    selector.record_corrupt(url, time.monotonic())
                else:
                    selector.record_failure(url, time.monotonic(), unreachable=not exc.unavailable)
                raise
            answered.add(url)
            try:
                manifest = parse_signed_manifest(
                    raw,
                    trainer_public_key,
                    expected_version=version,
                    min_version=min_version,
                    expected_run_id=run_id,
                )
            except ManifestError as exc:
                errors[url] = f"manifest rejected: {exc}"
                stats.manifest_rejected_by_source[url] = str(exc)
                selector.record_corrupt(url, time.monotonic())
                raise
            return manifest, raw, url

        return run

    manifest, raw, winner = await first_success([attempt(url) for url in urls], config.hedge_after_s)
    for url in asked[: asked.index(winner)]:
        if url not in answered:  # overtaken by a source asked later: too slow to be asked first again
            selector.record_failure(url, time.monotonic())
    return manifest, raw, winner


async def fetch_manifest(
    client: httpx.AsyncClient,
    sources: list[str],
    version: int,
    trainer_public_key: str,
    selector: SourcePolicy,
    config: ClientConfig,
    stats: TransferStats,
    min_version: int | None = None,
    run_id: str | None = None,
) -> tuple[Manifest, bytes]:
    """The trainer-signed manifest of `version` from the first source that has a genuine one (hedged races).

    If every source answers with a forged, replayed or malformed manifest, ManifestError. Sources that do not
    have the version yet are retried with back-off until the stall timeout or `max_attempts_per_shard`
    rounds, then ShardcastError.
    """
    deadline = time.monotonic() + config.stall_timeout_s
    errors: dict[str, str] = {}
    for round_number in range(config.max_attempts_per_shard):
        ordered = selector.ranked_near_first(sources)
        try:
            manifest, raw, _ = await race_manifest(
                client,
                ordered,
                version,
                trainer_public_key,
                selector,
                config,
                stats,
                errors,
                min_version,
                run_id,
            )
            return manifest, raw
        except AllAttemptsFailed as failed:
            if all(isinstance(f, ManifestError) for f in failed.failures):
                raise ManifestError(
                    f"no genuine manifest for version {version}: {_describe(errors)}"
                ) from None
        pause = min(config.backoff_max_s, config.backoff_base_s * 2**round_number)
        if time.monotonic() + pause > deadline or round_number == config.max_attempts_per_shard - 1:
            break
        await asyncio.sleep(pause)
    error_class = ManifestError if stats.manifest_rejected_by_source else ShardcastError
    raise error_class(f"no source served the manifest of version {version}: {_describe(errors)}")


def _describe(errors: dict[str, str]) -> str:
    return "; ".join(f"{url}: {message}" for url, message in errors.items()) or "no sources answered"


@dataclass
class _Transfer:
    """One request for one shard from one source, running on a fetch thread.

    In place, or (a hedge) into a private scratch file that is copied into place only if it wins, so two
    requests for one shard never write the same bytes.
    """

    url: str
    sink: RangeSink
    started: float
    future: asyncio.Future
    scratch: BinaryIO | None = None
    too_slow: bool = False
    flight: InFlight | None = None  # a relay's in-place request, registered for readers of its bytes


class ShardDownloader:
    """Downloads a set of shards of one version from several sources into files under `target_root`.

    Files must already be preallocated; `connections` (the caller's, kept from one download to the next) carry
    the requests. `on_verified` runs (in the event loop) after each shard's bytes are on disk and hash to the
    signed value; `in_flight` (a relay's): where each in-place request is registered while it runs, so its bytes can be passed on as they
    land; `claimed`: the shards a source said it holds when it announced the version, requested at once instead
    of after a round trip asking for its shard list (untrusted like that list: a shard it lacks is asked again);
    `parked` (a relay's): requests sent before the version was published, taken over for the shards they match.
    Every request is held to the throughput floor (cut and its source demoted below it) and a straggling one is
    hedged on a second source.
    """

    def __init__(
        self,
        connections: Connections,
        manifest: Manifest,
        sources: list[str],
        selector: SourcePolicy,
        config: ClientConfig,
        target_root: Path,
        stats: TransferStats,
        on_verified: Callable[[ShardEntry], Awaitable[None] | None] | None = None,
        in_flight: InFlightShards | None = None,
        claimed: dict[str, set[int]] | None = None,
        parked: ParkedRanges | None = None,
    ) -> None:
        self.connections = connections
        self.manifest = manifest
        self.sources = list(sources)
        self.selector = selector
        self.config = config
        self.target_root = target_root
        self.stats = stats
        self.on_verified = on_verified
        self.in_flight = in_flight
        self.parked = parked
        self.available: dict[str, set[int]] = {url: set((claimed or {}).get(url, ())) for url in sources}
        self._complete_sources: set[str] = set()
        self._followers: dict[str, asyncio.Task] = {}
        self._fds: dict[str, int] = {}
        self._attempts: dict[int, list[str]] = collections.defaultdict(list)
        self._bad_for_shard: dict[int, set[str]] = collections.defaultdict(set)
        self._needed: set[int] = set()
        self._unavailable_since: dict[int, float] = {}
        self._slow_only_since: dict[int, float] = {}
        self._grew_at: dict[str, float] = {}  # source → when its shard list last grew (or the download began)
        self._fatal: str | None = None
        self._change = asyncio.Event()
        self._hedges = 0
        self._fetchers = ThreadPoolExecutor(
            max_workers=config.concurrency + config.max_hedged_shards, thread_name_prefix="shardcast-fetch"
        )
        self._stop = threading.Event()
        self._count_lock = threading.Lock()

    async def download(self, shards: list[ShardEntry]) -> None:
        if not shards:
            return
        self._needed = {s.index for s in shards}
        self._complete_sources = {url for url, held in self.available.items() if self._needed <= held}
        self._grew_at = dict.fromkeys(self.sources, time.monotonic())
        pending = collections.deque(shards)
        in_flight = [0]
        try:
            # Each source's shard list is followed on its own: a silent source delays nobody.
            for url in self.sources:
                self._follow(url)
            try:
                async with asyncio.TaskGroup() as group:
                    for _ in range(min(self.config.concurrency, len(shards))):
                        group.create_task(self._worker(pending, in_flight))
            finally:
                for follower in self._followers.values():
                    follower.cancel()
            if self._fatal is not None:
                raise ShardcastError(self._fatal)
        except BaseException:
            # Cancelled: fetch threads stop at their next read (each attempt cut its requests as it ended). A
            # hopeless shard does not come here before the shards in flight have landed, kept for a resume.
            self._stop.set()
            raise
        finally:
            # Fetch threads still running must land before the fds close (or are reused).
            await asyncio.shield(asyncio.to_thread(self._fetchers.shutdown, True))
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def _changed(self) -> None:
        """Wake idle workers: a shard finished or failed, or a source announced new shards."""
        self._change.set()
        self._change = asyncio.Event()

    async def _wait_for_change(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._change.wait(), max(timeout, 0.001))
        except TimeoutError:
            pass

    def _follow(self, url: str) -> None:
        """Follow a source's shard list (again: a relay lists a shard while it arrives and drops it if that
        fails, so a source once complete may lack a shard later)."""
        follower = self._followers.get(url)
        if follower is None or follower.done():
            self._followers[url] = asyncio.create_task(self._follow_availability(url))

    async def _follow_availability(self, url: str) -> None:
        """Long-poll a source lacking some needed shards until it holds them all (a relay still mirroring)."""
        while url not in self._complete_sources:
            before = len(self.available[url])
            answered = await self._refresh_one(url, wait=AVAILABILITY_WAIT_S)
            if not answered or len(self.available[url]) <= before:
                # Failed, timed out, or a server that ignores `wait`: never spin on it.
                await asyncio.sleep(self.config.availability_refresh_s)

    async def _refresh_one(self, url: str, wait: float) -> bool:
        known = len(self.available[url])
        try:
            body = await get_json(
                self.connections.http,
                f"{url}/v/{self.manifest.version}/availability?known={known}&wait={wait}",
                timeout=wait + self.config.connect_timeout_s + 5.0,
            )
            shards = body.get("shards")
            if not isinstance(shards, list) or not all(isinstance(i, int) for i in shards):
                raise SourceFailure("availability is not a list of shard indices")
        except SourceFailure as exc:
            if exc.unavailable:
                self.available[url] = set()
            else:  # unreachable: backing off, it is not waited for as a near source
                self.selector.record_failure(url, time.monotonic(), unreachable=True)
            return False
        self.selector.record_reachable(url)
        if len(shards) > known:
            self._grew_at[url] = time.monotonic()
        self.available[url] = set(shards)
        if self._needed <= self.available[url]:
            self._complete_sources.add(url)
        self._changed()
        return True

    def _give_up(self, shard: ShardEntry, reason: str) -> None:
        """A shard is hopeless: start no new requests, let those in flight land (kept for a resume)."""
        if self._fatal is None:
            self._fatal = self._give_up_message(shard, reason)
        self._changed()

    def _candidates(self, shard: ShardEntry, exclude: str | None = None) -> list[str]:
        return [
            url
            for url in self.sources
            if shard.index in self.available[url]
            and url not in self._bad_for_shard[shard.index]
            and url != exclude
        ]

    async def _worker(self, pending: collections.deque, in_flight: list[int]) -> None:
        while (pending or in_flight[0]) and self._fatal is None:
            if not pending:
                await self._wait_for_change(0.5)
                continue
            shard = pending.popleft()
            now = time.monotonic()
            candidates = self._candidates(shard)
            if not candidates:
                if self._bad_for_shard[shard.index] >= set(self.sources):
                    self._give_up(shard, "every source sent corrupt bytes")
                    return
                since = self._unavailable_since.setdefault(shard.index, now)
                if now - since > self.config.stall_timeout_s:
                    self._give_up(shard, "no source advertises it")
                    return
                pending.append(shard)
                await self._wait_for_change(min(self.config.availability_refresh_s, 0.5))
                continue
            self._unavailable_since.pop(shard.index, None)
            candidates = self._near_first(shard, candidates, now)
            if not candidates:
                pending.append(shard)
                await self._wait_for_change(0.1)
                continue
            parked_at = self._parked_at(shard, candidates)
            if parked_at is None and self._only_slow(shard, candidates, now):
                # Only sources measured below the floor hold it (a liar claims everything at once, an honest
                # relay is still mirroring): wait a little for a better one before trying them.
                pending.append(shard)
                await self._wait_for_change(0.1)
                continue
            url = parked_at or self.selector.choose(candidates, now)
            if url is None:
                pending.append(shard)
                await self._wait_for_change(min(self.selector.earliest_ready(candidates) - now, 0.5))
                continue
            in_flight[0] += 1
            try:
                ok = await self._attempt(shard, url)
            finally:
                in_flight[0] -= 1
                self._changed()
            if not ok:
                if len(self._attempts[shard.index]) >= self.config.max_attempts_per_shard:
                    self._give_up(shard, "too many failed attempts")
                    return
                pending.append(shard)

    async def _attempt(self, shard: ShardEntry, url: str) -> bool:
        """Fetch one shard from `url` (plus a hedge elsewhere if it straggles); True once it is verified in
        place. On failure the bytes it wrote are zeroed: nothing that failed its check stays on disk."""
        primary = self._launch(shard, url, hedge=False)
        transfers = [primary]
        winner: _Transfer | None = None
        try:
            try:
                winner = await self._race(shard, transfers)
            finally:
                # Before a loser's bytes are cut, zeroed or overwritten (a flight is registered with `in_flight`).
                if primary.flight is not None and self.in_flight is not None:
                    self.in_flight.ended(primary.flight, verified=winner is primary)
                await self._end(transfers)
            if winner is None:
                if primary.sink.written:
                    await asyncio.to_thread(zero_region, primary.sink.fd, shard.offset, primary.sink.written)
                return False
            if winner.scratch is not None:
                await asyncio.to_thread(
                    copy_region, winner.scratch.fileno(), self._fd(shard.path), shard.length, shard.offset
                )
        finally:
            for transfer in transfers:
                if transfer.scratch is not None:
                    transfer.scratch.close()
        self.stats.shards_downloaded += 1
        if self.on_verified is not None:
            result = self.on_verified(shard)
            if result is not None:
                await result
        return True

    async def _race(self, shard: ShardEntry, transfers: list[_Transfer]) -> _Transfer | None:
        """Watch the transfers of one shard: cut those below the floor, hedge a straggler, return the first
        that verified (None when all failed)."""
        while True:
            running = [t for t in transfers if not t.future.done()]
            if not running:
                return None
            await asyncio.wait(
                [t.future for t in running], timeout=WATCH_INTERVAL_S, return_when=asyncio.FIRST_COMPLETED
            )
            now = time.monotonic()
            for transfer in running:
                if transfer.future.done():
                    if self._settle(shard, transfer, now):
                        return transfer
                elif self._below_floor(transfer, now):
                    transfer.too_slow = True
                    transfer.sink.cut()
            if len(transfers) == 1 and not transfers[0].future.done():
                alternative = self._hedge_source(shard, transfers[0], now)
                if alternative is not None:
                    log.info(
                        "shard %d straggles from %s; hedging on %s",
                        shard.index,
                        transfers[0].url,
                        alternative,
                    )
                    transfers.append(self._launch(shard, alternative, hedge=True))

    def _near_first(self, shard: ShardEntry, candidates: list[str], now: float) -> list[str]:
        """The near sources among `candidates` when one holds the shard. When only distant ones do, none while a
        near source is still mirroring: its shard list grew within `near_wait_s`. Over a narrow regional link,
        fetching from afar takes the bandwidth the region's relay needs to mirror the same bytes once for every
        node behind it. A near source that stops making progress, or is out of reach (its last request could not
        reach it: down, restarting), is not waited for: the nearest of the sources holding the shard stand in for
        it, so a node whose regional relay died fetches from the next region at once, not from across the
        world."""
        # A near source backing off after a failed request is still waited for while it makes progress: a
        # quarter-second back-off must not send the shard across the narrow link. One out of reach is neither
        # waited for nor asked while another source holds the shard: the shards it listed before it went down
        # would otherwise wait for it to come back.
        near = [
            url for url in self.selector.near(self.sources) if url not in self._bad_for_shard[shard.index]
        ]
        reachable = [url for url in near if not self.selector.stats[url].unreachable]
        close = [url for url in candidates if url in reachable]
        if close or not near:
            return close or candidates
        mirroring = any(
            now - self._grew_at.get(url, float("-inf")) < self.config.near_wait_s for url in reachable
        )
        if mirroring:
            return []
        return self.selector.near([url for url in candidates if url not in near] or candidates)

    def _parked_at(self, shard: ShardEntry, candidates: list[str]) -> str | None:
        """The candidate holding a request for this shard parked before the version existed: its bytes may be
        arriving already."""
        if self.parked is None:
            return None
        version = self.manifest.version
        return next((url for url in candidates if self.parked.has(url, version, shard)), None)

    def _only_slow(self, shard: ShardEntry, candidates: list[str], now: float) -> bool:
        """True while every candidate is measured below the floor and a source that may be faster could still
        list the shard, for up to `hedge_after_s` per shard.

        Over a narrow link the requests a download runs at once share it, so each may measure below the floor
        while the source is as fast as the link allows: waiting then only delays the shard. A source worth the
        wait does not hold the shard yet, is neither out of reach nor corrupt for it, is not measured below the
        floor, and is near when the candidates are (a distant one would not be asked while a near one holds
        the shard)."""
        floor = self.config.min_throughput_bytes_s
        if any(self.selector.throughput(url) >= floor for url in candidates):
            self._slow_only_since.pop(shard.index, None)
            return False
        near = self.selector.near(self.sources)
        eligible = near if any(url in near for url in candidates) else self.sources
        awaited = [url for url in eligible if self._may_offer_faster(shard, url)]
        if not awaited:
            return False
        since = self._slow_only_since.setdefault(shard.index, now)
        return now - since < self.config.hedge_after_s

    def _may_offer_faster(self, shard: ShardEntry, url: str) -> bool:
        """`url` may still list the shard and serve it above the floor (unmeasured: it may)."""
        stats = self.selector.stats[url]
        return (
            shard.index not in self.available[url]
            and url not in self._bad_for_shard[shard.index]
            and not stats.unreachable
            and (stats.throughput is None or stats.throughput >= self.config.min_throughput_bytes_s)
        )

    def _below_floor(self, transfer: _Transfer, now: float) -> bool:
        late = now - transfer.started - self.config.throughput_grace_s
        return late > 0 and transfer.sink.received < self.config.min_throughput_bytes_s * late

    def _hedge_source(self, shard: ShardEntry, transfer: _Transfer, now: float) -> str | None:
        """A second source for a shard whose request will likely finish later than a fresh one there.

        The request first gets HEDGE_FACTOR times what the best other source is expected to need (at least
        MIN_SHARD_HEDGE_S, at most `hedge_after_s`); then its projected finish is compared with that source's.
        """
        if self._hedges >= self.config.max_hedged_shards:
            return None
        others = [
            url for url in self._candidates(shard, exclude=transfer.url) if self.selector.ready(url, now)
        ]
        near = self.selector.near(self.sources)
        if transfer.url not in near:  # the near sources are gone: the nearest of the rest stand in for them
            near = self.selector.near([transfer.url, *others])
        if transfer.url in near:  # a distant duplicate would cross the narrow link the near source spares
            others = [url for url in others if url in near]
        if not others:
            return None
        best = self.selector.ranked(others)[0]
        fresh = shard.length / max(self.selector.throughput(best), 1.0)
        delay = min(self.config.hedge_after_s, max(MIN_SHARD_HEDGE_S, HEDGE_FACTOR * fresh))
        elapsed = now - transfer.started
        if elapsed < delay:
            return None
        received = transfer.sink.received
        rate = received / elapsed
        projected = (shard.length - received) / rate if rate > 0 else float("inf")
        return best if projected > fresh + delay else None

    def _launch(self, shard: ShardEntry, url: str, hedge: bool) -> _Transfer:
        scratch = tempfile.TemporaryFile(dir=self.target_root) if hedge else None
        sink = RangeSink(
            fd=scratch.fileno() if scratch is not None else self._fd(shard.path),
            first=shard.offset,
            length=shard.length,
            digest=new_hasher(self.manifest.hash_algorithm),
            # The thread's own backstop, should the watchdog not run: connect, silence, the slowest rate.
            deadline=time.monotonic() + request_deadline_s(self.config, shard.length),
            stop=self._stop,
            on_bytes=lambda nbytes: self._count(url, nbytes),
            position=0 if hedge else None,
            write_batch=STREAM_WRITE_BATCH if self.in_flight is not None else WRITE_BATCH,
        )
        flight = None
        if self.in_flight is not None and not hedge:
            flight = self.in_flight.started(self.manifest.version, shard, sink)
        address = f"{url}/v/{self.manifest.version}/data/{quote(shard.path)}"
        parked_at = url if self.parked is not None and not hedge else None
        future = asyncio.get_running_loop().run_in_executor(
            self._fetchers, self._fetch_verified, address, sink, shard, parked_at
        )
        if hedge:
            self._hedges += 1
        return _Transfer(url, sink, time.monotonic(), future, scratch, flight=flight)

    async def _end(self, transfers: list[_Transfer]) -> None:
        """Cut the transfers still running and wait for their threads (they may be writing). A transfer that
        lost the race still measured its source: its rate so far enters the throughput estimate."""
        now = time.monotonic()
        for transfer in transfers:
            if not transfer.future.done():
                transfer.sink.cut()
                elapsed = now - transfer.started
                if elapsed >= MIN_SHARD_HEDGE_S and not self._stop.is_set():  # a shorter one says little
                    self.selector.observe_rate(transfer.url, transfer.sink.received, elapsed)
        await asyncio.shield(asyncio.gather(*(t.future for t in transfers), return_exceptions=True))
        self._hedges -= sum(1 for t in transfers if t.scratch is not None)

    def _fetch_verified(
        self, address: str, sink: RangeSink, shard: ShardEntry, parked_at: str | None
    ) -> None:
        """Runs on a fetch thread: takes over the request parked at `parked_at` for this shard if there is one."""
        answer = None
        if parked_at is not None and self.parked is not None:
            answer = self.parked.take(parked_at, self.manifest.version, shard)
        if answer is not None:
            receive_range(answer, sink)
        else:
            fetch_range_into(self.connections.shards, address, sink)
        if sink.digest.hexdigest() != shard.digest:
            raise CorruptShard(f"{self.manifest.hash_algorithm} does not match the signed manifest")

    def _settle(self, shard: ShardEntry, transfer: _Transfer, now: float) -> bool:
        """Account for a finished transfer; True if its bytes verified."""
        url, elapsed = transfer.url, now - transfer.started
        try:
            transfer.future.result()
        except CorruptShard as exc:
            self._attempts[shard.index].append(f"{url}: {exc}")
            self._bad_for_shard[shard.index].add(url)
            self.selector.record_corrupt(url, now)
            self.stats.corrupt_shards += 1
            self.stats.corrupt_by_source[url] = self.stats.corrupt_by_source.get(url, 0) + 1
            log.warning("shard %d from %s is corrupt; demoting the source", shard.index, url)
            return False
        except SourceFailure as exc:
            if transfer.too_slow:
                rate = transfer.sink.received / max(elapsed, 1e-6)
                self._attempts[shard.index].append(f"{url}: below the throughput floor ({rate:.0f} B/s)")
                self.selector.record_slow(url, transfer.sink.received, elapsed, now)
                return False
            self._attempts[shard.index].append(f"{url}: {exc}")
            if exc.unavailable:
                self.available[url].discard(shard.index)
                self._complete_sources.discard(url)
                self._follow(url)
            self.selector.record_failure(url, now, unreachable=not exc.unavailable)
            return False
        self.selector.record_success(url, shard.length, elapsed)
        return True

    def _fd(self, relative: str) -> int:
        fd = self._fds.get(relative)
        if fd is None:
            fd = os.open(resolve_inside(self.target_root, relative), os.O_WRONLY)
            self._fds[relative] = fd
        return fd

    def _count(self, url: str, nbytes: int) -> None:
        with self._count_lock:  # called from fetch threads
            self.stats.bytes_downloaded += nbytes
            self.stats.bytes_by_source[url] = self.stats.bytes_by_source.get(url, 0) + nbytes

    def _give_up_message(self, shard: ShardEntry, reason: str) -> str:
        tried = "; ".join(self._attempts[shard.index][-6:]) or "none tried"
        return (
            f"version {self.manifest.version}: shard {shard.index} ({shard.path} bytes "
            f"{shard.offset}-{shard.offset + shard.length - 1}) could not be fetched: {reason}; "
            f"sources {self.sources}; attempts: {tried}"
        )
