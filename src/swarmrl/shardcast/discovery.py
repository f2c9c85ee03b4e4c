"""Which version is newest: announcements are claims, a version is real only once its signed manifest is in hand.

Every source is asked which versions it holds. Each source's claim is the newest version it announces inside
(floor, ceiling] (the ceiling is the caller's trusted bound, e.g. the coordinator's step counter, so a claim
above it costs nothing). The manifests of all claimed versions are then fetched at once, each in a hedged
race over its claimants first and then the other sources. The newest manifest that verifies wins; a higher claim still unproven
`hedge_after_s` after that (or `discovery_timeout_s` after the start) is abandoned. A source whose claim is not backed by a genuine manifest is demoted
in the selector (a lie counts like a corrupt shard), so one liar costs a refresh at most one hedge delay.

A long-poll's answer (`/latest?manifest=1`) carries the announced version's signed manifest: one that verifies
makes that version real at once, without the round of asking (`enclosed_manifest`); one that does not sends the
caller through that round, where its announcer is found out. It also lists the shards the announcer holds of it
(`claimed_shards`), so a download from across a long path starts without first asking for them; a claim is as
untrusted as any availability answer: a shard the announcer turns out not to hold is asked for again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast.errors import ManifestError
from swarmrl.shardcast.hedge import AllAttemptsFailed
from swarmrl.shardcast.manifest import Manifest, parse_signed_manifest
from swarmrl.shardcast.selection import SourcePolicy
from swarmrl.shardcast.transfer import SourceFailure, TransferStats, get_json, race_manifest

MAX_VERSIONS_READ = 4096  # of one /versions answer; a relay keeps a handful


@dataclass(frozen=True)
class Bounds:
    """The versions a caller will take: newer than `floor` (what it holds), at most `ceiling` (what it trusts)."""

    floor: int | None = None
    ceiling: int | None = None

    def allows(self, version: int) -> bool:
        return (self.floor is None or version > self.floor) and (
            self.ceiling is None or version <= self.ceiling
        )


def as_version(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def announced_versions(body: dict) -> list[int]:
    """The versions an untrusted /versions (or /latest) answer names; anything malformed is dropped."""
    listed = body.get("versions")
    values = listed[:MAX_VERSIONS_READ] if isinstance(listed, list) else []
    return [v for v in (as_version(x) for x in [*values, body.get("latest")]) if v is not None]


def enclosed_manifest(
    body: dict, version: int, trainer_public_key: str, run_id: str | None = None
) -> tuple[Manifest, bytes] | None:
    """The signed manifest of `version` an untrusted /latest answer carried (`&manifest=1`), if it verifies;
    None sends the caller to ask for it, in the race where an announcer that cannot back its claim is found out."""
    enclosed = body.get("manifest")
    if not isinstance(enclosed, str):
        return None
    raw = enclosed.encode("utf-8")
    try:
        manifest = parse_signed_manifest(
            raw, trainer_public_key, expected_version=version, expected_run_id=run_id
        )
    except ManifestError:
        return None
    return manifest, raw


def claimed_shards(body: dict, manifest: Manifest) -> set[int]:
    """The shards of `manifest`'s version an untrusted /latest answer says its announcer holds; a malformed
    list claims nothing (the download then asks the announcer, as it asks every source)."""
    listed = body.get("shards")
    indices = {s.index for s in manifest.all_shards}
    if not isinstance(listed, list) or len(listed) > len(indices):
        return set()
    claimed = {i for i in listed if isinstance(i, int) and not isinstance(i, bool)}
    return claimed if len(claimed) == len(listed) and claimed <= indices else set()


async def ask_versions(
    client: httpx.AsyncClient, url: str, selector: SourcePolicy, config: ClientConfig
) -> list[int]:
    """The versions `url` announces on /versions; its answer, given at once, measures its round trip."""
    sent = time.monotonic()
    body = await get_json(client, f"{url}/versions", timeout=config.connect_timeout_s)
    selector.observe_round_trip(url, time.monotonic() - sent)
    selector.record_reachable(url)
    return announced_versions(body)


async def collect_claims(
    client: httpx.AsyncClient,
    sources: list[str],
    bounds: Bounds,
    selector: SourcePolicy,
    config: ClientConfig,
) -> dict[str, int]:
    """{source: the newest version it announces within bounds}. Sources backing off are not asked (unless all
    are); once one source has answered, the others get `hedge_after_s` more, and those still silent then count
    as failed."""
    now = time.monotonic()
    ready = [url for url in sources if selector.ready(url, now)]
    tasks = {
        asyncio.create_task(ask_versions(client, url, selector, config)): url for url in ready or sources
    }
    claims: dict[str, int] = {}
    first_answer: float | None = None
    pending = set(tasks)
    try:
        while pending:
            timeout = None if first_answer is None else first_answer + config.hedge_after_s - time.monotonic()
            if timeout is not None and timeout <= 0:
                break
            done, pending = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                url = tasks[task]
                try:
                    announced = task.result()
                except SourceFailure as exc:
                    selector.record_failure(url, time.monotonic(), unreachable=not exc.unavailable)
                    continue
                first_answer = first_answer or time.monotonic()
                allowed = [v for v in announced if bounds.allows(v)]
                if allowed:
                    claims[url] = max(allowed)
    finally:
        for task in pending:
            task.cancel()
            selector.record_failure(tasks[task], time.monotonic())
        await asyncio.gather(*pending, return_exceptions=True)
    return claims


async def newest_verified(
    client: httpx.AsyncClient,
    sources: list[str],
    trainer_public_key: str,
    selector: SourcePolicy,
    config: ClientConfig,
    stats: TransferStats,
    bounds: Bounds,
    run_id: str | None = None,
) -> tuple[Manifest, bytes] | None:
    """The newest version within `bounds` whose trainer-signed manifest some source serves, with that
    manifest; None when no source backs any version within bounds."""
    claims = await collect_claims(client, sources, bounds, selector, config)
    claimants: dict[int, list[str]] = {}
    for url, version in claims.items():
        claimants.setdefault(version, []).append(url)
    errors: dict[str, str] = {}

    def askable(version: int) -> list[str]:
        """Its claimants, best first, then the other sources (one may hold it by now: a relay announces a
        version only once it holds the manifest, so a claim can be ahead of a relay still fetching it)."""
        claimed_by = selector.ranked_near_first(list(claimants[version]))
        others = selector.ranked_near_first([u for u in sources if u not in claimed_by])
        return claimed_by + others

    races = {
        asyncio.create_task(
            race_manifest(
                client,
                askable(version),
                version,
                trainer_public_key,
                selector,
                config,
                stats,
                errors,
                run_id=run_id,
                claimed_by=set(urls),
            )
        ): version
        for version, urls in claimants.items()
    }
    best: tuple[Manifest, bytes] | None = None
    give_up_at = time.monotonic() + config.discovery_timeout_s
    try:
        while True:
            higher = [task for task, version in races.items() if best is None or version > best[0].version]
            if not higher:
                break
            timeout = give_up_at - time.monotonic()
            if timeout <= 0:
                break
            done, _ = await asyncio.wait(higher, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                races.pop(task)
                try:
                    manifest, raw, _ = task.result()
                except AllAttemptsFailed:
                    continue  # every claimant of that version was refuted (and demoted) in the race
                if best is None or manifest.version > best[0].version:
                    best = (manifest, raw)
                    give_up_at = min(give_up_at, time.monotonic() + config.hedge_after_s)
    finally:
        for task, version in races.items():
            if not task.done():
                task.cancel()
                if best is None or version > best[0].version:
                    # Announced a newer version and did not back it in time: a liar or a straggler.
                    for url in claimants[version]:
                        selector.record_failure(url, time.monotonic())
        await asyncio.gather(*races, return_exceptions=True)
    return best
