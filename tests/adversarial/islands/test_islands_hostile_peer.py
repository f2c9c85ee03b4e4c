"""An honest island merging with a hostile peer through a real torchft quorum: every attack the peer makes
costs it its contribution (or, where it breaks a collective's framing, the round), and the honest island goes
on merging; nothing the peer sends reaches the honest island's policy unchecked."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from swarmrl.configs.islands import IslandsConfig

pytest.importorskip("torchft")
# One module-scoped duel (about two minutes on 2 shared cores) that every test reads.
pytestmark = [pytest.mark.slow, pytest.mark.swarm, pytest.mark.timeout(600)]

# One merge round per entry; island 1 makes the attack, island 0 is honest. Attacks that break the
# collective's framing (a message of another size) come late: each costs a reconfigured quorum.
PLAN = [
    "step_claim",  # before the honest island has merged: it is offered a poisoned state to heal from
    "honest",
    "offset",
    "nan_scale",
    "inf_scale",
    "contributors",
    "garble",
    "fragment",
    "codec",
    "replay",
    "step_claim",  # now the honest island has merged: no peer state replaces its own
    "pickle",
    "oversize",
    "truncate",
    "honest",
]
SETTINGS = IslandsConfig(
    count=2,
    merge_every=1,
    codec="int8",
    collective_timeout_s=15.0,
    join_timeout_s=60.0,
    heartbeat_timeout_s=2.0,
)


def run_islands(targets: list[tuple], *, min_replicas: int, wait: int) -> list[int | None]:
    """Each `(function, args)` of `targets` as island i (called `function(i, lighthouse, *args)`) in a spawned
    process around one lighthouse; waits for the first `wait` of them, stops the rest by PID; exit codes."""
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(
        bind="[::]:0", min_replicas=min_replicas, join_timeout_ms=60_000, heartbeat_timeout_ms=2_000
    )
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=function, args=(island, lighthouse.address(), *args))
        for island, (function, args) in enumerate(targets)
    ]
    try:
        for process in processes:
            process.start()
        for process in processes[:wait]:
            process.join(timeout=420)
        return [process.exitcode for process in processes]
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
        lighthouse.shutdown()


@pytest.fixture(scope="module")
def duel(tmp_path_factory):
    """The honest island's merge records, by round, and the pickle gadget's marker path."""
    from adversarial.islands.hostile_island_kit import island_main

    root = tmp_path_factory.mktemp("duel")
    out, marker = root / "honest.jsonl", root / "gadget-ran"
    args = (PLAN, SETTINGS.model_dump_json(), str(out), str(marker))
    honest_exit, _ = run_islands([(island_main, args)] * 2, min_replicas=2, wait=1)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return {"records": records, "exit": honest_exit, "marker": marker}


def _rounds(duel, attack: str) -> list[dict]:
    assert duel["exit"] == 0 and len(duel["records"]) == len(PLAN), (duel["exit"], duel["records"])
    return [r for r in duel["records"] if r["attack"] == attack]


def _dropped_alone(record: dict, reason: str) -> None:
    """The peer's contribution was dropped for the round, naming `reason`; the honest island merged alone and
    its policy stayed where its own pseudo-gradients put it."""
    assert record["committed"] and record["participants"] == 2, record
    assert record["contributors"] == 1 and record["dropped"] == 1, record
    assert reason in record["drops"][0] and record["drops"][0].startswith("rank 1"), record["drops"]
    assert record["max_abs"] < 1.0, record


def test_a_peer_adding_1e30_to_its_policy_is_dropped(duel):
    (record,) = _rounds(duel, "offset")
    _dropped_alone(record, "exceeds 4 x the round's median")


@pytest.mark.parametrize("attack", ["nan_scale", "inf_scale"])
def test_a_non_finite_int8_scale_is_dropped(duel, attack):
    (record,) = _rounds(duel, attack)
    _dropped_alone(record, "int8 scales must be finite and positive")


def test_an_absurd_contributors_flag_is_dropped(duel):
    (record,) = _rounds(duel, "contributors")
    _dropped_alone(record, "contributing flag 1000000")


def test_a_garbled_payload_is_dropped(duel):
    (record,) = _rounds(duel, "garble")
    _dropped_alone(record, "bad magic")


@pytest.mark.parametrize(
    ("attack", "reason"), [("fragment", "claims fragment 1"), ("codec", "claims codec 1")]
)
def test_a_contribution_for_another_fragment_or_codec_is_dropped(duel, attack, reason):
    (record,) = _rounds(duel, attack)
    _dropped_alone(record, reason)


def test_a_replayed_contribution_of_an_earlier_round_is_dropped(duel):
    (record,) = _rounds(duel, "replay")
    _dropped_alone(record, "a replay?")


def test_a_peer_claiming_a_later_step_cannot_replace_the_honest_islands_state(duel):
    # Before its first merge (a fresh island) the poisoned state fails the checks; after it, no peer state is
    # taken at all. Either way the island keeps its own policy and merges with the peer's contribution.
    fresh, live = _rounds(duel, "step_claim")
    for record in (fresh, live):
        assert record["heal_refused"] and not record["healed"], record
        assert record["committed"] and record["contributors"] == 2 and record["max_abs"] < 1.0, record


def test_a_peers_state_cannot_run_code_in_the_island_that_heals_from_it(duel):
    (record,) = _rounds(duel, "pickle")
    assert not duel["marker"].exists(), "the peer's pickle ran in the honest island"
    assert not record["committed"] and record["max_abs"] < 1.0, record


SIZE_ATTACKS = ("oversize", "truncate")


@pytest.mark.parametrize("attack", SIZE_ATTACKS)
def test_a_message_of_another_size_fails_the_round_not_the_island(duel, attack):
    # A collective cannot carry messages of two sizes: gloo aborts the process that receives too many bytes
    # (here the peer's child process), which fails the round for everyone in it. A short message may instead
    # land in the honest island's zeroed buffer before the peer aborts; then it fails the checks (its int8
    # scales are zeros) and the honest island merges alone. Either way nothing of the peer's reaches it.
    (record,) = _rounds(duel, attack)
    assert record["max_abs"] < 1.0, record
    if record["committed"]:
        assert record["contributors"] == 1, record
        assert record["participants"] == 1 or record["drops"][0].startswith("rank 1"), record


def test_after_every_attack_the_islands_merge_together_again(duel):
    *_, last = _rounds(duel, "honest")
    assert last is duel["records"][-1]
    assert last["committed"] and last["contributors"] == 2 and last["dropped"] == 0, last
    assert all(r["committed"] for r in duel["records"] if r["attack"] not in ("pickle", *SIZE_ATTACKS))


def test_an_honest_island_joining_late_still_heals_from_its_peer(tmp_path):
    # The hardening leaves the honest path whole: the state arrives weights-only and passes the checks, the
    # fresh island adopts it, sits one contribution out, and both islands hold the same merged policy.
    from adversarial.islands.hostile_island_kit import late_island_main, leader_main

    leader_out, late_out = tmp_path / "leader.jsonl", tmp_path / "late.jsonl"
    settings = SETTINGS.model_dump_json()
    targets = [
        (leader_main, (settings, str(leader_out), str(tmp_path), 2, 6)),
        (late_island_main, (settings, str(late_out), str(tmp_path))),
    ]
    assert run_islands(targets, min_replicas=1, wait=2) == [0, 0]
    leader = [json.loads(line) for line in leader_out.read_text().splitlines()]
    late = [json.loads(line) for line in late_out.read_text().splitlines()]
    first = late[0]
    assert first["healed"] and not first["heal_refused"] and first["committed"], first
    assert first["participants"] == 2 and first["contributors"] == 1
    # The leader merges alone until the late island's first request reaches the quorum (on a loaded machine,
    # one round more than the two it waits for), then together with it from that round on.
    alone = [r for r in leader if r["round"] < first["round"]]
    together = [r for r in leader if r["round"] >= first["round"]]
    assert len(alone) >= 2 and all(r["participants"] == 1 for r in alone), (leader, late)
    assert together[0]["participants"] == 2 and together[0]["round"] == first["round"], (leader, late)
    assert together[0]["global_digest"] == first["global_digest"]
    # From then on both contribute, and their merged policies stay bit-identical.
    assert len(late) >= len(together) >= 2
    for mine, theirs in zip(late[1:], together[1:], strict=False):
        assert mine["contributors"] == theirs["contributors"] == 2 and mine["dropped"] == 0
        assert mine["global_digest"] == theirs["global_digest"]
