"""`demo --swarm` with community task packs (`[swarm] submit_packs`): the swarm demo, and mid-run, at step
`submit_packs_at_step`, each listed pack is re-signed by an author key of its own and submitted like any
author's (`swarmrl tasks submit`). The run's validators admit or refuse each; an admitted pack's units join the
mix; its author is credited for the rows trained in informative groups. At the end: held-out accuracy of the
first and last policy, each pack's status, checks, rows trained and credit, and whether the credit is exactly
the informative trained rows the trainer recorded (`<run>/packs_trained.jsonl`). Written to
`<run>/packs_result.json`.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from swarmrl.configs import RunConfig
from swarmrl.coordinator.pack_api import PackInfo
from swarmrl.coordinator.pack_client import PackClient
from swarmrl.launch.demo import evaluate_checkpoint
from swarmrl.launch.swarm import Swarm, SwarmSnapshot, run_swarm_demo
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import latest_checkpoint
from swarmrl.tasks.packs.files import MANIFEST, SIGNATURE, PackFiles, archive_bytes, read_pack_files
from swarmrl.tasks.packs.pack import pack_from_files
from swarmrl.tasks.packs.signing import signature_file
from swarmrl.tasks.packs.ticket import solve_ticket

# What the examples of examples/task-packs must come to in a run that takes packs: the good one admitted (and
# maybe retired later, once the policy solves it), the others refused by the check that catches them.
EXPECTED = {"good": ("admitted", "retired"), "hackable": ("refused:hackable",), "leaky": ("refused:leaking",)}
_AUTHOR_LINE = re.compile(r'^author = "[0-9a-f]*"$', re.MULTILINE)


@dataclass
class PackSubmitter:
    """A `SwarmObserver`: submits the config's packs once the run reaches their step, reads them at the end."""

    config: RunConfig
    submitted: dict[str, PackInfo] = field(default_factory=dict)
    final: list[PackInfo] = field(default_factory=list)

    def started(self, swarm: Swarm) -> None:
        return None

    def poll(self, swarm: Swarm, state: SwarmSnapshot | None) -> None:
        if self.submitted or state is None or state.step < self.config.swarm.submit_packs_at_step:
            return
        for path in self.config.swarm.submit_packs:
            self.submitted[Path(path).name] = submit_as_author(swarm, Path(path))

    def finished(self, swarm: Swarm, state: SwarmSnapshot) -> None:
        with PackClient.at(swarm.coordinator_url) as client:
            self.final = client.every_pack(self.config.run.id)


def submit_as_author(swarm: Swarm, source: Path) -> PackInfo:
    """The pack at `source`, its manifest's author set to a key of its own, signed by it and submitted."""
    name = source.name
    author = swarm.identity(f"author-{name}")
    folder = swarm.rundir.root / "packs" / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, folder)
    manifest = folder / MANIFEST
    manifest.write_text(_AUTHOR_LINE.sub(f'author = "{author.node_id}"', manifest.read_text()))
    limits = swarm.config.tasks.community.admission.limits
    unsigned = {k: v for k, v in read_pack_files(folder, limits).files.items() if k != SIGNATURE}
    (folder / SIGNATURE).write_bytes(signature_file(PackFiles(str(folder), unsigned), author))
    files = read_pack_files(folder, limits)
    pack = pack_from_files(files, limits)
    run_id = swarm.config.run.id
    with PackClient.at(swarm.coordinator_url, author) as client:
        bits = client.pack_policy(run_id).policy["budget"]["ticket_bits"]
        data = archive_bytes(files, name)
        return client.submit_pack(run_id, data, solve_ticket(run_id, pack.digest, author.node_id, bits))


def trained_rows(rundir: RunDir) -> dict[int, dict[str, int]]:
    """pack id → what the trainer's own record says it trained: groups offered, groups kept, rows trained."""
    totals: dict[int, dict[str, int]] = {}
    path = rundir.root / "packs_trained.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        pack = totals.setdefault(entry["pack_id"], {"groups": 0, "kept": 0, "rows_trained": 0})
        for key in pack:
            pack[key] += entry[key]
    return totals


def pack_goals(
    packs: list[PackInfo], trained: dict[int, dict[str, int]], names: dict[int, str], group_size: int
) -> list[str]:
    """The goals this run missed: each example classified right, and every author credited exactly the rows
    of its pack trained in informative groups (none for a refused pack)."""
    missed = []
    for pack in packs:
        outcome = pack.status if pack.status != "refused" else f"refused:{pack.refused_by}"
        expected = EXPECTED.get(names.get(pack.id, ""))
        if expected is not None and outcome not in expected:
            missed.append(f"{pack.label}: {outcome}, expected {' or '.join(expected)}")
        credited = pack.credit.pending_rows + pack.credit.unlocked_rows + pack.credit.wiped_rows
        mine = trained.get(pack.id, {"kept": 0, "rows_trained": 0})
        if credited != pack.rows_trained or credited != mine["kept"] * group_size:
            missed.append(
                f"{pack.label}: credited {credited} rows; trained {pack.rows_trained} at the coordinator, "
                f"{mine['kept']} informative groups × {group_size} in the trainer's record"
            )
    return missed


def run_pack_demo(config: RunConfig, console: Console) -> list[str]:
    """The swarm demo with packs submitted mid-run; returns the goals it missed."""
    submitter = PackSubmitter(config)
    swarm = run_swarm_demo(config, console, observer=submitter)
    rundir = RunDir(config.run.directory)
    last = latest_checkpoint(rundir.checkpoints) or 0
    before, after = evaluate_checkpoint(config, rundir, 0), evaluate_checkpoint(config, rundir, last)
    names = {info.id: name for name, info in submitter.submitted.items()}
    trained = trained_rows(rundir)
    missed = pack_goals(submitter.final, trained, names, config.contract.group_size)
    if after.accuracy <= before.accuracy:
        missed.append(f"held-out accuracy {before.accuracy:.1%} → {after.accuracy:.1%}: no gain")
    console.print(packs_table(submitter.final, names))
    console.print(
        f"held-out accuracy {100 * before.accuracy:.1f}% (step 0) → {100 * after.accuracy:.1f}% (step {last}), "
        f"{100 * (after.accuracy - before.accuracy):+.1f} points · sampled reward "
        f"{swarm.snapshot.rewards[0]:.3f} → {swarm.snapshot.rewards[-1]:.3f} · {swarm.seconds:.0f}s"
    )
    for failure in missed:
        console.print(f"[red]goal missed:[/red] {failure}")
    result: dict[str, Any] = {
        "held_out": {"before": before.accuracy, "after": after.accuracy, "steps": last},
        "packs": [info.model_dump() | {"example": names.get(info.id)} for info in submitter.final],
        "trainer_record": trained,
        "honest_work": swarm.honest_work(),
        "seconds": swarm.seconds,
        "goals_missed": missed,
    }
    write_json_atomic(rundir.root / "packs_result.json", result)
    return missed


def packs_table(packs: list[PackInfo], names: dict[int, str]) -> Table:
    table = Table(title="community task packs")
    for column in (
        "pack",
        "example",
        "status",
        "checks",
        "admission s",
        "groups kept/seen",
        "rows trained",
        "credit",
    ):
        table.add_column(column)
    for pack in packs:
        status = pack.status if pack.refused_by is None else f"refused by {pack.refused_by}"
        checks = " ".join(f"{name}:{state}" for name, state in pack.checks.items())
        credit = pack.credit.pending_rows + pack.credit.unlocked_rows
        table.add_row(
            pack.label, names.get(pack.id, "-"), status, checks, f"{pack.admission_seconds:.1f}",
            f"{pack.groups_kept}/{pack.groups_seen}", str(pack.rows_trained), f"{credit} rows",
        )  # fmt: skip
    return table
