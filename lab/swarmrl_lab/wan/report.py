"""The figures of one arm of `demo --wan` (loopback or the emulated WAN), from what `SwarmWatch` recorded.

- steps_per_min: trainer steps from step 1 to the last, per minute of wall clock (its metrics' times);
- broadcast_s: per checkpoint, seconds from its publication until every worker that was in the swarm then
  (up, and once restarted, ready again; not killed before) held it or a newer one; the median over
  checkpoints every such worker got (and broadcast_by_worker_s: each worker's median wait, which region the
  broadcast waits for). A restarted worker's start-up counts in churn.ready_s, not here;
- broadcast_bound_s: per checkpoint, its bytes (the delta where there is one) over the narrowest link on the
  way origin → relay of the worker's region → worker, plus that worker's round trip to the origin, for the
  worker it takes longest; the median (the physical bound, SPEC §10);
- worker_idle_fraction: 1 − the workers' generating time over their time up, from step 1's publication on;
- policy_lag_mean: the trainer's mean policy lag;
- honest_files_lost: files of honest workers refused at submission, rejected by a validator, refused by the
  trainer as stale, or accepted and never trained though the run went past their window;
  units_trained_twice: units whose files more than one step trained on;
- churn: nodes killed, nodes back (a worker leasing a unit, a relay holding a version it did not hold
  before), and how long each took after its restart;
- cpu: CPU seconds the arm's processes used over the window steps_per_min measures, by role, and the share of
  the machine's cores that was (`swarmrl_lab.wan.cpu_use`): every node shares this machine's cores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from swarmrl.rundir import RunDir
from swarmrl_lab.wan.cpu_use import cpu_figures
from swarmrl_lab.wan.watch import Outage, SwarmWatch


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _trained_steps(rundir: RunDir) -> list[dict]:
    """The trainer's metrics records of the steps it trained (its other records carry no train_seconds)."""
    return [m for m in rundir.read_metrics() if "train_seconds" in m]


def step_window(rundir: RunDir) -> tuple[tuple[int, float], tuple[int, float]] | None:
    """(step, unix time) of the first trained step from 1 on and of the last; None before two."""
    times = sorted((m["step"], m["time"]) for m in _trained_steps(rundir))
    times = [(step, t) for step, t in times if step >= 1]
    return (times[0], times[-1]) if len(times) >= 2 else None


def steps_per_min(rundir: RunDir) -> float | None:
    return per_minute(step_window(rundir))


def per_minute(window: tuple[tuple[int, float], tuple[int, float]] | None) -> float | None:
    """Steps per minute of wall clock over a `step_window`."""
    if window is None:
        return None
    (first_step, first), (last_step, last) = window
    return 60 * (last_step - first_step) / (last - first)


def policy_lag_mean(rundir: RunDir) -> float | None:
    lags = [m["policy_lag"] for m in rundir.read_metrics() if "policy_lag" in m]
    return statistics.fmean(lags) if lags else None


def _down(outages: list[Outage], role: str, start: float, end: float) -> float:
    """Seconds `role` was down within [start, end]."""
    total = 0.0
    for o in outages:
        if o.role == role and o.killed_at is not None:
            up_again = o.restarted_at if o.restarted_at is not None else end
            total += max(0.0, min(end, up_again) - max(start, o.killed_at))
    return total


def _up_at(outages: list[Outage], role: str, at: float) -> bool:
    return not any(
        o.role == role
        and o.killed_at is not None
        and o.killed_at <= at
        and (o.restarted_at is None or at < o.restarted_at)
        for o in outages
    )


def _killed_within(outages: list[Outage], role: str, start: float, end: float) -> bool:
    return any(o.role == role and o.killed_at is not None and start <= o.killed_at <= end for o in outages)


def joined_outages(watch: SwarmWatch, swarm_dir: Path) -> list[Outage]:
    """The outages, each restarted worker down until it was ready again (its `ready_at`) or for good: a node
    still starting is not yet in the swarm a broadcast reaches."""
    joined = []
    for outage in watch.outages:
        if outage.role.startswith("worker-") and outage.restarted_at is not None:
            ready_at = _ready_at(swarm_dir / outage.role / "ready_at")
            outage = dataclasses.replace(
                outage, restarted_at=ready_at if ready_at >= outage.restarted_at else None
            )
        joined.append(outage)
    return joined


def broadcast_waits(watch: SwarmWatch, outages: list[Outage] | None = None) -> dict[int, dict[str, float]]:
    """Checkpoint → {worker: seconds until it held it (or a newer one)} for every worker up at its publication
    (by `outages`, default the watch's); a worker killed before it got there does not count, a checkpoint
    some live worker never got is left out."""
    assert watch.holdings is not None
    outages = watch.outages if outages is None else outages
    found: dict[int, dict[str, float]] = {}
    for step, published in sorted(watch.holdings.published.items()):
        waits: dict[str, float] = {}
        for worker in watch.holdings.workers:
            if not _up_at(outages, worker, published.at):
                continue
            got_at = min(
                (t for s, t in watch.holdings.held.get(worker, {}).items() if s >= step), default=None
            )
            if _killed_within(outages, worker, published.at, got_at or float("inf")):
                continue
            if got_at is None:
                break
            waits[worker] = max(0.0, got_at - published.at)
        else:
            if step >= 1 and waits:
                found[step] = waits
    return found


def broadcast_times(watch: SwarmWatch, outages: list[Outage] | None = None) -> dict[int, float]:
    """Checkpoint → seconds until the last worker up at its publication held it (see `broadcast_waits`)."""
    return {step: max(waits.values()) for step, waits in broadcast_waits(watch, outages).items()}


def broadcast_by_worker(watch: SwarmWatch, outages: list[Outage] | None = None) -> dict[str, float | None]:
    """Worker → its median wait over the checkpoints: which region the broadcast median waits for."""
    per_worker: dict[str, list[float]] = {}
    for waits in broadcast_waits(watch, outages).values():
        for worker, seconds in waits.items():
            per_worker.setdefault(worker, []).append(seconds)
    return {worker: median(values) for worker, values in sorted(per_worker.items())}


def broadcast_bounds(watch: SwarmWatch, bound: Callable[[str, int], float]) -> dict[int, float]:
    """Checkpoint → the physical bound of its broadcast: `bound(worker, bytes)` for the slowest worker."""
    assert watch.holdings is not None
    return {
        step: max(bound(w, p.delta_bytes or p.full_bytes) for w in watch.holdings.workers)
        for step, p in watch.holdings.published.items()
        if step >= 1
    }


def worker_idle_fraction(watch: SwarmWatch, swarm_dir: Path) -> float | None:
    assert watch.holdings is not None
    published = watch.holdings.published
    if 1 not in published:
        return None
    start = published[1].at
    end = max(p.at for p in published.values())
    if end <= start:
        return None
    busy = up = 0.0
    for worker in watch.holdings.workers:
        up += (end - start) - _down(watch.outages, worker, start, end)
        for unit in _units(swarm_dir / worker / "units.jsonl"):
            busy += max(0.0, min(end, unit["generated"]) - max(start, unit["started"]))
    return max(0.0, 1 - busy / up) if up > 0 else None


def _units(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def honest_files_lost(watch: SwarmWatch, last_step: int | None, async_level: int) -> dict[str, int]:
    """`never_trained`: accepted files that no step trained on although the trainer went past the last step
    their unit's window allows (its step + async_level); the trainer never marks them, as it reads no file of
    a step its window has left behind."""
    honest = {watch.node_ids.get(name) for name in watch.work}
    mine = [s for s in watch.submissions if s.node_id in honest]
    refused = sum(v for counts in watch.work.values() for k, v in counts.items() if k.startswith("refused_"))
    closed = -1 if last_step is None else last_step - async_level
    return {
        "refused_at_submission": refused,
        "rejected": sum(s.status == "rejected" for s in mine),
        "stale": sum(s.use_outcome == "stale" for s in mine),
        "never_trained": sum(
            s.status == "accepted" and s.use_outcome is None and s.step < closed for s in mine
        ),
    }


def last_step(rundir: RunDir) -> int | None:
    return max((m["step"] for m in _trained_steps(rundir)), default=None)


def units_trained_twice(watch: SwarmWatch) -> int:
    trained = Counter((s.step, s.batch_index) for s in watch.submissions if s.use_outcome == "trained")
    return sum(1 for n in trained.values() if n > 1)


def churn_figures(watch: SwarmWatch, swarm_dir: Path) -> dict:
    """A relay is back once it holds a version it did not hold before its kill; a worker is ready once it asks
    for work again (its `ready_at`: started, registered, first policy loaded) and back once it starts a unit
    (what it leases first may be a unit it held before: its lease time says nothing)."""
    assert watch.holdings is not None
    back: dict[str, float | None] = {}
    ready: dict[str, float | None] = {}
    for outage in watch.outages:
        if outage.killed_at is None or outage.restarted_at is None:
            continue
        if outage.role.startswith("relay-"):
            held_before = {
                s for s, t in watch.holdings.held.get(outage.role, {}).items() if t < outage.killed_at
            }
            after = [
                t
                for s, t in watch.holdings.held.get(outage.role, {}).items()
                if s not in held_before and t >= outage.restarted_at
            ]
        else:
            units = _units(swarm_dir / outage.role / "units.jsonl")
            after = [u["started"] for u in units if u["started"] >= outage.restarted_at]
            ready_at = _ready_at(swarm_dir / outage.role / "ready_at")
            ready[outage.role] = ready_at - outage.restarted_at if ready_at >= outage.restarted_at else None
        back[outage.role] = min(after) - outage.restarted_at if after else None
    return {
        "nodes_killed": sum(o.killed_at is not None for o in watch.outages),
        "nodes_rejoined": sum(v is not None for v in back.values()),
        "back_to_work_s": back,
        "ready_s": ready,
    }


def _ready_at(path: Path) -> float:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return 0.0


def arm_figures(
    watch: SwarmWatch, rundir: RunDir, async_level: int, bound: Callable[[str, int], float] | None
) -> dict:
    """Every figure of one arm (the WAN arm passes `bound`, the physical bound per worker and bytes)."""
    lost = honest_files_lost(watch, last_step(rundir), async_level)
    joined = joined_outages(watch, rundir.root / "swarm")
    broadcasts = broadcast_times(watch, joined)
    # The trainer's metrics, read once: steps/min and the CPU figures cover the same span.
    window = step_window(rundir)
    figures = {
        "steps_per_min": per_minute(window),
        "broadcast_s": median(list(broadcasts.values())),
        "broadcast_by_step_s": broadcasts,
        "broadcast_by_worker_s": broadcast_by_worker(watch, joined),
        "worker_idle_fraction": worker_idle_fraction(watch, rundir.root / "swarm"),
        "policy_lag_mean": policy_lag_mean(rundir),
        "honest_files_lost": sum(lost.values()),
        "honest_files_lost_by_cause": lost,
        "units_trained_twice": units_trained_twice(watch),
        "relay_holding_s": _relay_holding(watch),
        "checkpoint_bytes": _checkpoint_bytes(watch),
        "churn": churn_figures(watch, rundir.root / "swarm"),
    }
    if bound is not None:
        bounds = broadcast_bounds(watch, bound)
        figures["broadcast_bound_s"] = median(list(bounds.values()))
    if watch.cpu is not None and window is not None:
        figures["cpu"] = cpu_figures(watch.cpu, window[0][1], window[1][1], os.cpu_count() or 1)
    return figures


def _checkpoint_bytes(watch: SwarmWatch) -> dict[str, float | None]:
    """The median size of a published checkpoint, whole and as a delta against the one before."""
    assert watch.holdings is not None
    published = [p for s, p in watch.holdings.published.items() if s >= 1]
    return {
        "full": median([p.full_bytes for p in published]),
        "delta": median([p.delta_bytes for p in published if p.delta_bytes is not None]),
    }


def _relay_holding(watch: SwarmWatch) -> dict[str, float | None]:
    """Per relay, the median seconds from a checkpoint's publication until the relay held all of it."""
    assert watch.holdings is not None
    published = watch.holdings.published
    return {
        relay: median([t - published[s].at for s, t in held.items() if s in published and s >= 1])
        for relay, held in watch.holdings.held.items()
        if relay in watch.holdings.relays
    }
