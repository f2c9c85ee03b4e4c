"""Community task packs at the coordinator, over real HTTP on an injected clock: a submission checked on receipt
and refused in one line; validator time spent on keys without accepted work bounded by one lane however many
keys send junk; a pack from probation to admitted, its author credited only for rows trained in informative
groups, and retired for cause when its judges disagree (its unpaid credit wiped).

Validators' reports here are written by the test (the admission checks themselves are tested in
tests/adversarial/tasks); the coordinator trusts nothing in them it can check: the pack, the verdict against
its own checks, the lease."""

from __future__ import annotations

import httpx
import pytest
from task_pack_kit import write_pack
from typer.testing import CliRunner

from swarmrl.cli import app as cli
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.coordinator.client import AdminClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.pack_api import TrainedPackFile
from swarmrl.coordinator.pack_client import PackClient
from swarmrl.coordinator.server.app import create_app
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl.tasks.packs.files import archive_bytes, read_pack_files
from swarmrl.tasks.packs.pack import TaskPack, pack_from_files
from swarmrl.tasks.packs.report import AdmissionReport, CheckResult
from swarmrl.tasks.packs.ticket import solve_ticket
from swarmrl_lab.coordinator_double import accept, leased_submit, serve_in_thread

RESERVE = 10.0  # the validators' cap on one admission: what a check reserves of its lane
POLICY = CommunityTasksConfig(
    accept=True,
    max_share=1.0,  # every unit a pack's: the test's units are its pack's
    per_author_cap=1.0,
    probation_share=1.0,
    probation_rows=2,
    budget={"ticket_bits": 4, "newcomer_seconds_per_hour": 25.0, "max_pending_per_author": 1},
    admission={"seconds": RESERVE},
)


@pytest.fixture
def world(clocked):
    world = clocked(credit_unlock_window_s=600.0)
    PackClient(world.admin.transport).set_pack_policy("r", POLICY)
    world.packs = PackClient(world.validator.transport)
    world.trainer_packs = PackClient(world.trainer.transport)
    return world


def author_pack(world, tmp_path, key: Identity, name: str = "p") -> tuple[PackClient, TaskPack, bytes]:
    folder = write_pack(tmp_path / f"{name}-{key.node_id[:8]}", key=key)
    files = read_pack_files(folder, POLICY.admission.limits)
    return (
        world.as_(PackClient, key),
        pack_from_files(files, POLICY.admission.limits),
        archive_bytes(files, name),
    )


def submit(world, tmp_path, key: Identity | None = None):
    key = key or Identity.generate()
    client, pack, data = author_pack(world, tmp_path, key)
    return client.submit_pack("r", data, solve_ticket("r", pack.digest, key.node_id, 4)), pack


def report(pack_digest: str, *checks: tuple[str, str], seconds: float = 1.0) -> AdmissionReport:
    results = [CheckResult(name=name, status=status, summary=f"{name} {status}") for name, status in checks]
    failed = next((name for name, status in checks if status == "fail"), None)
    pending = any(status == "pending" for _, status in checks)
    verdict = "refused" if failed else "pending" if pending else "admitted"
    return AdmissionReport(
        pack="test-pack@0.1.0",
        digest=pack_digest,
        verdict=verdict,
        refused_by=failed,
        checks=results,
        seconds=seconds,
    )


PASSED = (("loads", "pass"), ("leaking", "pass"), ("solvable", "pass"), ("hackable", "pass"))


def kind(call) -> str:
    with pytest.raises(CoordinatorError) as info:
        call()
    return info.value.kind


def test_a_submission_is_checked_on_receipt_and_refused_by_name(world, tmp_path):
    key = Identity.generate()
    client, pack, data = author_pack(world, tmp_path, key)
    ticket = solve_ticket("r", pack.digest, key.node_id, 4)
    other = world.as_(PackClient, Identity.generate())
    assert (
        kind(lambda: other.submit_pack("r", data, solve_ticket("r", pack.digest, other.node_id, 4)))
        == "not_author"
    )
    wrong = next(n for n in (format(i, "x") for i in range(999)) if n != ticket and not _ok(pack, key, n))
    assert kind(lambda: client.submit_pack("r", data, wrong)) == "bad_ticket"
    assert kind(lambda: client.submit_pack("r", b"\x1f\x8b not a tar at all", ticket)) == "invalid_pack"
    huge = POLICY.admission.limits.max_archive_bytes + 1
    assert kind(lambda: client.submit_pack("r", b"x" * huge, ticket)) == "too_large"
    first = client.submit_pack("r", data, ticket)
    assert (first.status, first.label, first.rows) == ("pending", "test-pack@0.1.0", 3)
    assert kind(lambda: client.submit_pack("r", data, ticket)) == "author_packs_waiting"
    world.admin.create_run("closed", world.trainer.node_id, world.contract)
    assert kind(lambda: client.submit_pack("closed", data, ticket)) == "packs_not_accepted"


def _ok(pack, key, nonce) -> bool:
    from swarmrl.tasks.packs.ticket import ticket_ok

    return ticket_ok("r", pack.digest, key.node_id, nonce, 4)


def test_junk_from_many_keys_costs_validators_one_lane_and_accepted_work_earns_its_own(world, tmp_path):
    junk = [submit(world, tmp_path) for _ in range(12)]
    leased, load = [], []
    for _ in range(4):  # a lane of 25 s holds two checks of a 10 s reserve at once, whatever the keys
        lease = world.packs.lease_pack("r")
        if lease.pack is not None:
            leased.append(lease.pack)
    assert len(leased) == 2 and {p.lane for p in leased} == {"newcomers"}
    for info in leased:  # each measured 1 s: charged 1 s, its 10 s reserve freed
        digest = next(pack.digest for got, pack in junk if got.id == info.id)
        decided = world.packs.post_pack_verdict("r", info.id, "check", report(digest, ("loads", "fail")))
        assert (decided.status, decided.refused_by, decided.admission_seconds) == ("refused", "loads", 1.0)
    while (lease := world.packs.lease_pack("r")).pack is not None:
        load.append(lease.pack.id)
        digest = next(pack.digest for got, pack in junk if got.id == lease.pack.id)
        world.packs.post_pack_verdict(
            "r", lease.pack.id, "check", report(digest, ("loads", "fail"), seconds=4.0)
        )
    # a check is leased while 2 × 1 s + n × 4 s + its 10 s reserve fit in 25 s: n = 4 (the fifth would need 28)
    assert len(load) == 4
    spent = sum(p.admission_seconds for p in world.packs.every_pack("r"))
    assert spent == 18.0 <= POLICY.budget.newcomer_seconds_per_hour
    # An author with accepted work (a worker credited 40 rows: 20 s at 0.5 s a row) has a lane of its own.
    worker = world.node()
    world.trainer.set_demand("r", 0, 1)
    accept(world.validator, leased_submit(worker, "r", b"honest rollouts", rows=40, tokens=400))
    earned, _ = submit(world, tmp_path, worker.transport.identity)
    lease = world.packs.lease_pack("r")
    assert (lease.pack.id, lease.pack.lane) == (earned.id, "earned")
    world.clock.advance(3600.0)  # an hour on, the newcomers' lane is open again
    assert world.packs.lease_pack("r").pack.lane == "newcomers"


def test_a_report_must_be_the_packs_and_say_what_its_checks_say(world, tmp_path):
    info, pack = submit(world, tmp_path)
    lease = world.packs.lease_pack("r")
    assert lease.pack.id == info.id and lease.stage == "check"
    assert (
        kind(lambda: world.packs.post_pack_verdict("r", info.id, "check", report("0" * 64, *PASSED)))
        == "wrong_pack"
    )
    lying = report(pack.digest, ("loads", "fail")).model_copy(
        update={"verdict": "pending", "refused_by": None}
    )
    assert kind(lambda: world.packs.post_pack_verdict("r", info.id, "check", lying)) == "inconsistent_report"
    early = report(pack.digest, *PASSED, ("useful", "pass"))
    assert kind(lambda: world.packs.post_pack_verdict("r", info.id, "check", early)) == "too_early"
    stranger = world.as_(PackClient, Identity.generate())
    assert (
        kind(lambda: stranger.post_pack_verdict("r", info.id, "check", report(pack.digest, *PASSED)))
        == "not_validator"
    )


def pack_units(world, step: int, count: int) -> list:
    """`count` accepted files of units of `step` (every unit is the pack's: its share is 1)."""
    if step == 0:
        world.trainer.set_demand("r", 0, count)
    else:
        world.trainer.publish_step("r", step, units=count)
    files = []
    for index in range(count):
        node = world.node()
        files.append(leased_submit(node, "r", f"file {step}/{index}".encode(), rows=16, tokens=16))
        accept(world.validator, files[-1])
    return files


def test_a_pack_from_probation_to_admitted_credited_for_informative_rows_then_retired_for_cause(
    world, tmp_path
):
    info, pack = submit(world, tmp_path)
    world.packs.lease_pack("r")
    on_probation = world.packs.post_pack_verdict(
        "r", info.id, "check", report(pack.digest, *PASSED, ("useful", "pending"))
    )
    assert on_probation.status == "probation"
    (share,) = world.packs.mix("r", 0)
    assert (share.pack_id, share.probation, share.share) == (info.id, True, 1.0)
    first, second = pack_units(world, 0, 2)
    trained_on_probation = TrainedPackFile(
        submission_id=first.id, pack_id=info.id, scores=[(0, [1.0] * 8)], groups=1, kept=1, rows_trained=8
    )
    assert (
        kind(lambda: world.trainer_packs.report_training("r", 0, [trained_on_probation])) == "probation_unit"
    )
    world.packs.post_scores("r", first.id, info.id, [(0, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])])
    assert world.packs.pack("r", info.id).status == "probation"  # one row measured of the two it needs
    world.packs.post_scores("r", second.id, info.id, [(1, [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])])
    lease = world.packs.lease_pack("r")
    assert (lease.pack.id, lease.stage, lease.pack.status) == (info.id, "measure", "measuring")
    assert [(m.row, m.samples, m.passed) for m in lease.measurement] == [(0, 8, 1), (1, 8, 2)]
    decided = world.packs.post_pack_verdict(
        "r", info.id, "measure", report(pack.digest, *PASSED, ("useful", "pass"))
    )
    assert decided.status == "admitted" and decided.credit.pending_rows == 0  # admission alone earns nothing
    world.trainer.publish_step("r", 1, units=1)  # the admitted pack's units from step 1's mix on
    assert [s.probation for s in world.packs.mix("r", 1)] == [False]
    (trained,) = pack_units(world, 1, 1)
    scores = [(2, [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]), (0, [0.0] * 8)]
    world.packs.post_scores("r", trained.id, info.id, scores)
    file = TrainedPackFile(
        submission_id=trained.id, pack_id=info.id, scores=scores, groups=2, kept=1, rows_trained=8
    )
    assert world.trainer_packs.report_training("r", 1, [file]).retired == []
    standing = world.packs.pack("r", info.id)
    assert (standing.groups_seen, standing.groups_kept, standing.rows_trained) == (2, 1, 8)
    assert standing.credit.pending_rows == 8  # the informative group's 8 rows, not the uninformative one's
    # A second file on which the trainer's scores are not the validator's: the verifier disagrees between judges.
    world.trainer.publish_step("r", 2, units=1)
    world.packs.mix("r", 2)
    (lied,) = pack_units(world, 2, 1)
    world.packs.post_scores("r", lied.id, info.id, [(1, [1.0] + [0.0] * 7)])
    differs = file.model_copy(
        update={"submission_id": lied.id, "scores": [(1, [0.0] * 8)], "kept": 0, "rows_trained": 0}
    )
    assert world.trainer_packs.report_training("r", 2, [differs]).retired == [info.id]
    retired = world.packs.pack("r", info.id)
    assert (retired.status, retired.disagreements) == ("retired", 1) and "differently" in retired.reason
    assert (retired.credit.pending_rows, retired.credit.wiped_rows) == (0, 8)
    world.trainer.publish_step("r", 3, units=1)
    assert world.packs.mix("r", 3) == []  # a retired pack takes no more units


@pytest.fixture
def live(tmp_path):
    """A coordinator on the real clock (the command line signs with the time of day), its run taking packs."""
    app = create_app(db_url=f"sqlite:///{tmp_path / 'c.db'}", storage=tmp_path / "store", admin_token="t")
    server = serve_in_thread(app)
    try:
        with AdminClient.at(server.url, admin_token="t", retry=NO_RETRY) as admin:
            admin.create_run("r", Identity.generate().node_id, ContractSection())
            PackClient(admin.transport).set_pack_policy("r", POLICY)
        yield server.url
    finally:
        server.stop()
        app.state.engine.dispose()


def test_an_author_submits_and_follows_a_pack_from_the_command_line(live, tmp_path):
    key = Identity.generate()
    key.save(tmp_path / "author.pem")
    folder = write_pack(tmp_path / "mine", key=key)
    where = ["--coordinator", live, "--run-id", "r"]

    def run(*args: str):
        return CliRunner().invoke(cli, ["tasks", *args])

    submitted = run("submit", str(folder), "--key", str(tmp_path / "author.pem"), *where)
    assert submitted.exit_code == 0, submitted.output
    assert "submitted test-pack@0.1.0 to run r: pack 1, pending" in submitted.output
    status = run("status", "1", *where)
    assert status.exit_code == 0, status.output
    assert "pack 1 (test-pack@0.1.0): pending" in status.output and "not checked yet" in status.output
    again = run("submit", str(folder), "--key", str(tmp_path / "author.pem"), *where)
    assert again.exit_code == 2
    assert (
        again.output.strip()
        .splitlines()[-1]
        .startswith("error: test-pack@0.1.0: the coordinator refused it: author_packs_waiting:")
    )
    (folder / "prompts.jsonl").write_text('{"id": "r0", "prompt": "changed", "answer": "1"}\n')
    tampered = run("submit", str(folder), "--key", str(tmp_path / "author.pem"), *where)
    assert tampered.exit_code == 2
    assert tampered.output.strip() == (
        f"error: {folder}/signature.json: the files changed since they were signed (sign the pack again)"
    )
    unknown = run("status", "99", *where)
    assert (unknown.exit_code, unknown.output.strip()) == (
        2,
        "error: pack 99: unknown_pack: no pack 99 in run 'r'",
    )
    past_a_row_id = httpx.get(f"{live}/v1/runs/r/packs/{2**64}", timeout=10)
    assert past_a_row_id.status_code == 422, past_a_row_id.text
