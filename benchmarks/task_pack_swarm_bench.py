"""Junk task packs from free identities through a swarm's coordinator and a validator (issue 61, phase 2).

`--packs` packs (default 100), each signed by a fresh key, cycle through the junk kinds of
`task_pack_junk_bench.py` (malformed archives, forged signatures, leaks, copies of the run's held-out evals,
hostile verifiers). Each key submits its pack to a coordinator (in this process, on 127.0.0.1, a run taking
packs with the default `[tasks.community]` but `--ticket-bits` and `--lane`), with a proof-of-work ticket; one
validator (`validator/packs.py`, the default admission config and the held-out split of the default tasks)
then checks what the budget lets it, until the coordinator offers nothing more. Printed per kind: where each
pack was refused (at receipt by the coordinator, by which validator check) or whether it still waits (its lane
spent); then the validator time spent (as validators measured and the coordinator charged it) against the
bound of the newcomers' lane, the admitted packs, the mix of the next step, the credit and the rows trained.

No anchor: no other framework admits tasks from strangers.

    PYTHONPATH=src .venv/bin/python benchmarks/task_pack_swarm_bench.py [--packs 100] [--lane 900] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from task_pack_junk_bench import KINDS, ROWS, pack

from swarmrl.configs import RunConfig
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.coordinator.client import AdminClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_client import PackClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import archive_bytes, read_pack_files
from swarmrl.tasks.packs.pack import pack_from_files
from swarmrl.tasks.packs.ticket import solve_ticket
from swarmrl.tasks.registry import heldout_sources
from swarmrl.validator.packs import PackChecker
from swarmrl_lab.coordinator_double import serve_in_thread

RUN = "junk"


def held_out_copies(config: RunConfig):
    """The kind "copies of held-out evals", against this run's own held-out split (what a validator indexes)."""
    held = heldout_sources(config.tasks)[0]
    prompts = [held[i].prompt for i in range(len(held))]
    from task_pack_junk_bench import rows

    return lambda folder, key: pack(
        folder, key, **{"prompts.jsonl": rows(prompt=lambda i: prompts[i % len(prompts)])}
    )


def archive_of(path: Path) -> tuple[bytes, str | None]:
    """What the key uploads, and the pack's digest when it loads as one (the ticket binds it)."""
    if path.is_file():
        return path.read_bytes(), None
    limits = CommunityTasksConfig().admission.limits
    files = read_pack_files(path, limits)
    try:
        digest = pack_from_files(files, limits).digest
    except PackError:  # sent all the same, as its author would: the coordinator refuses it at receipt
        digest = None
    return archive_bytes(files, "junk"), digest


def submit_all(url: str, root: Path, count: int, kinds: dict, bits: int) -> list[dict]:
    names, results = list(kinds), []
    for number in range(count):
        kind, key = names[number % len(names)], Identity.generate()
        data, digest = archive_of(kinds[kind](root / f"pack{number}", key))
        started = time.monotonic()
        ticket = solve_ticket(RUN, digest or "0" * 64, key.node_id, bits)
        ticket_s = time.monotonic() - started
        entry = {"kind": kind, "key": key.node_id, "ticket_seconds": ticket_s}
        with PackClient.at(url, key, retry=NO_RETRY) as client:
            started = time.monotonic()
            try:
                entry["pack_id"] = client.submit_pack(RUN, data, ticket).id
            except CoordinatorError as exc:
                entry["refused_at_receipt"] = exc.kind
            entry["receipt_seconds"] = time.monotonic() - started
        results.append(entry)
    return results


def check_all(url: str, work: Path, config: RunConfig, results: list[dict]) -> float:
    """One validator checks every pack the coordinator offers it; returns its wall-clock seconds."""
    validator = Identity.generate()
    with AdminClient.at(url, admin_token="t", retry=NO_RETRY) as admin:
        admin.add_validator(RUN, validator.node_id)
    started = time.monotonic()
    with PackClient.at(url, validator, retry=NO_RETRY) as client:
        checker = PackChecker(client, RUN, config, work)
        while checker.check_one():
            pass
        packs = {info.id: info for info in client.every_pack(RUN)}
        mix = client.mix(RUN, 0)
    for entry in results:
        info = packs.get(entry.get("pack_id"))
        if info is not None:
            entry.update(
                status=info.status, refused_by=info.refused_by, validator_seconds=info.admission_seconds
            )
            entry.update(
                credit=info.credit.pending_rows + info.credit.unlocked_rows, rows_trained=info.rows_trained
            )
    results.append({"mix_of_step_0": [share.pack_id for share in mix]})
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packs", type=int, default=100)
    parser.add_argument("--lane", type=float, default=900.0, help="newcomer_seconds_per_hour")
    parser.add_argument("--ticket-bits", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    policy = CommunityTasksConfig(
        accept=True, budget={"ticket_bits": args.ticket_bits, "newcomer_seconds_per_hour": args.lane}
    )
    config = RunConfig.model_validate({"tasks": {"community": policy.model_dump()}})
    kinds = {**KINDS, "copies of held-out evals": held_out_copies(config)}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        app = create_app(db_url=f"sqlite:///{root / 'c.db'}", storage=root / "store", admin_token="t")
        server = serve_in_thread(app)
        try:
            with AdminClient.at(server.url, admin_token="t", retry=NO_RETRY) as admin:
                admin.create_run(RUN, Identity.generate().node_id, ContractSection())
                PackClient(admin.transport).set_pack_policy(RUN, policy)
            results = submit_all(server.url, root, args.packs, kinds, args.ticket_bits)
            wall = check_all(server.url, root / "validator", config, results)
        finally:
            server.stop()
            app.state.engine.dispose()
    report(results, wall, policy)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


def _where(result: dict) -> str:
    if "refused_at_receipt" in result:
        return f"receipt:{result['refused_at_receipt']}"
    if result.get("refused_by"):
        return f"validator:{result['refused_by']}"
    return result.get("status", "?")


def report(results: list[dict], wall: float, policy: CommunityTasksConfig) -> None:
    packs = [r for r in results if "kind" in r]
    print(f"{'kind':<34} {'packs':>5} {'where refused':<22} {'validator s (median, max)':>26}")
    for kind in dict.fromkeys(r["kind"] for r in packs):
        mine = [r for r in packs if r["kind"] == kind]
        where = {_where(r) for r in mine}
        seconds = [r.get("validator_seconds", 0.0) for r in mine]
        print(
            f"{kind:<34} {len(mine):>5} {','.join(sorted(where)):<22} {statistics.median(seconds):>12.2f} {max(seconds):>12.2f}"
        )
    spent = sum(r.get("validator_seconds", 0.0) for r in packs)
    waiting = sum(r.get("status") in ("pending", "checking") for r in packs)
    receipt = sum("refused_at_receipt" in r for r in packs)
    admitted = sum(r.get("status") in ("probation", "measuring", "admitted") for r in packs)
    credit = sum(r.get("credit", 0) for r in packs)
    rows = sum(r.get("rows_trained", 0) for r in packs)
    tickets = sum(r["ticket_seconds"] for r in packs)
    print(
        f"\n{len(packs)} packs from {len(packs)} keys ({ROWS} rows where a kind has rows): {receipt} refused at "
        f"receipt (the coordinator, {sum(r['receipt_seconds'] for r in packs):.1f} s in all), "
        f"{len(packs) - receipt - waiting} checked by the validator, {waiting} still waiting (lane spent)\n"
        f"validator time: {spent:.1f} s charged ({wall:.1f} s wall) — the newcomers' lane allows "
        f"{policy.budget.newcomer_seconds_per_hour:.0f} s per hour plus one {policy.admission.seconds:.0f} s reserve, "
        f"whatever the number of keys\nadmitted or on probation: {admitted} · mix of the next step: "
        f"{results[-1]['mix_of_step_0']} · credit: {credit} rows · rows trained: {rows} · tickets: {tickets:.1f} s "
        f"of the submitters' CPU at {policy.budget.ticket_bits} bits"
    )


if __name__ == "__main__":
    main()
