"""A step's community mix (shares by probation, admission and author) and each unit's source; the proof-of-work
ticket of a submission. Pure functions, against hand-computed values."""

from __future__ import annotations

import pytest

from swarmrl.configs.task_packs import CommunityTasksConfig
from swarmrl.tasks.packs.mix import (
    MixCandidate,
    PackShare,
    community_shares,
    pack_task_id,
    unit_draw,
    unit_pack,
)
from swarmrl.tasks.packs.ticket import solve_ticket, ticket_hash, ticket_ok
from swarmrl.tickets import leading_zero_bits

CONFIG = CommunityTasksConfig(accept=True, max_share=0.25, per_author_cap=0.1, probation_share=0.1)


def candidate(pack_id: int, author: str, probation: bool = False) -> MixCandidate:
    return MixCandidate(pack_id, f"{pack_id:064x}", author * 64, probation)


def shares(*candidates: MixCandidate, config: CommunityTasksConfig = CONFIG) -> dict[int, float]:
    return {share.pack_id: share.share for share in community_shares(candidates, config)}


def test_probation_packs_split_the_probation_share_and_admitted_ones_the_rest():
    assert shares(candidate(1, "a", probation=True)) == {1: pytest.approx(0.1)}
    both = shares(candidate(1, "a", probation=True), candidate(2, "b"), candidate(3, "c"))
    # probation 0.1; the other 0.15 of max_share halved
    assert both == {1: pytest.approx(0.1), 2: pytest.approx(0.075), 3: pytest.approx(0.075)}
    assert sum(both.values()) == pytest.approx(CONFIG.max_share)


def test_one_authors_packs_together_stay_under_the_cap_whatever_their_number():
    split = shares(candidate(1, "a"), candidate(2, "a"), candidate(3, "b"))
    # 0.25 / 3 each; author a's 0.1667 scaled to the cap 0.1: 0.05 each; b's 0.0833 under it
    assert split == {1: pytest.approx(0.05), 2: pytest.approx(0.05), 3: pytest.approx(0.25 / 3)}
    many = shares(*(candidate(i, "a") for i in range(1, 11)))
    assert sum(many.values()) == pytest.approx(0.1)


def test_a_run_that_takes_no_packs_has_an_empty_mix():
    assert community_shares([candidate(1, "a")], CommunityTasksConfig()) == []
    assert community_shares([], CONFIG) == []


def test_a_units_source_follows_the_shares_and_is_the_same_for_every_node():
    mix = [PackShare(1, "d" * 64, "a" * 64, 0.2, False), PackShare(2, "e" * 64, "b" * 64, 0.05, True)]
    picked = [unit_pack(mix, "run", step, batch) for step in range(40) for batch in range(50)]
    ones, twos = (
        sum(p is not None and p.pack_id == 1 for p in picked),
        sum(p is not None and p.pack_id == 2 for p in picked),
    )
    assert 0.17 < ones / len(picked) < 0.23 and 0.03 < twos / len(picked) < 0.07
    assert picked == [unit_pack(mix, "run", step, batch) for step in range(40) for batch in range(50)]
    assert unit_pack([], "run", 0, 0) is None
    assert unit_draw("run", 3, 4) != unit_draw("other-run", 3, 4)


def test_a_pack_task_is_named_after_its_pack_and_row():
    assert pack_task_id("ab" * 32, "row-7") == "pack-abababababababab/row-7"


def test_leading_zero_bits_by_hand():
    assert leading_zero_bits(b"\x00\x00\x01") == 23
    assert leading_zero_bits(b"\x80") == 0
    assert leading_zero_bits(b"\x00\x10") == 11
    assert leading_zero_bits(b"\x00") == 8


def test_a_ticket_is_bound_to_its_run_pack_and_author():
    digest, author = "c" * 64, "a" * 64
    nonce = solve_ticket("r", digest, author, 12)
    assert ticket_ok("r", digest, author, nonce, 12)
    assert leading_zero_bits(ticket_hash("r", digest, author, nonce)) >= 12
    # the same nonce under another run, pack or author: another hash, not a ticket (fixed inputs, checked once)
    assert not ticket_ok("s", digest, author, nonce, 12)
    assert not ticket_ok("r", "d" * 64, author, nonce, 12)
    assert not ticket_ok("r", digest, "b" * 64, nonce, 12)
    for malformed in ("", "not-hex!", "z" * 40):
        assert not ticket_ok("r", digest, author, malformed, 0)
