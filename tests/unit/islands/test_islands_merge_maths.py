"""Merge maths against hand-computed values: version numbering, outer step, merger, the checks on peers."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from pydantic import ValidationError

from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators import LocalCommunicator
from swarmrl.diloco.errors import DiLoCoStateError
from swarmrl.diloco.outer import make_outer_optimizer
from swarmrl.islands.merge import IslandMerger, apply_outer_step
from swarmrl.islands.versions import (
    is_merge_step,
    last_merged_step,
    merge_round,
    merging_fragment,
    steps_since_merge,
)
from swarmrl.rundir import RunDir

torch.set_num_threads(1)


def test_version_numbering():
    assert [s for s in range(0, 31) if is_merge_step(s, 10)] == [10, 20, 30]
    assert not is_merge_step(0, 10)
    assert [merge_round(s, 10) for s in (0, 9, 10, 19, 20)] == [0, 0, 1, 1, 2]
    assert [last_merged_step(s, 25) for s in (0, 24, 25, 49, 50, 70)] == [0, 0, 25, 25, 50, 50]
    assert steps_since_merge(23, 10) == 3
    assert all(is_merge_step(s, 1) for s in range(1, 6))
    with pytest.raises(ValueError, match="interval"):
        is_merge_step(3, 0)
    with pytest.raises(ValueError, match="step"):
        merge_round(-1, 10)


def test_streaming_fragments_merge_in_turn_within_each_window():
    # H = 10, F = 2: fragment 0 after window step 5, fragment 1 after step 10, in every window.
    assert {
        s: merging_fragment(s, 10, 2) for s in range(1, 21) if merging_fragment(s, 10, 2) is not None
    } == {
        5: 0,
        10: 1,
        15: 0,
        20: 1,
    }
    # F = 1 is the plain merge every H steps; step 0 is the shared start, never a merge.
    assert [s for s in range(0, 31) if merging_fragment(s, 10) is not None] == [10, 20, 30]
    assert {merging_fragment(s, 10) for s in (10, 20, 30)} == {0}
    assert [merging_fragment(s, 3, 3) for s in range(1, 7)] == [0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="fragments"):
        merging_fragment(5, 4, 5)


def test_a_fragment_merge_moves_only_its_parameters_and_keeps_its_own_momentum():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.fill_(1.0)
    merger = IslandMerger(
        model, LocalCommunicator(), make_codec("fp32"), outer_lr=0.7, outer_momentum=0.9, fragments=2
    )
    assert merger.fragments == [[0], [1]]
    with torch.no_grad():
        model[0].weight.fill_(0.5)  # pseudo-gradient 0.5 on both fragments
        model[1].weight.fill_(0.5)
    record = merger.merge(step=5, fragment=0)
    assert record.committed and record.fragment == 0 and record.round == 1
    # Fragment 0: Nesterov as in the single-island test (0.335); fragment 1 keeps its local 0.5, untouched.
    assert model[0].weight.flatten().tolist() == pytest.approx([0.335] * 4, abs=1e-6)
    assert model[1].weight.flatten().tolist() == [0.5] * 4
    assert merger.global_params[1].flatten().tolist() == [1.0] * 4
    # Fragment 1's first merge starts its own momentum: same first step, 0.335, not a second-round step.
    merger.merge(step=10, fragment=1)
    assert model[1].weight.flatten().tolist() == pytest.approx([0.335] * 4, abs=1e-6)
    assert model[0].weight.flatten().tolist() == pytest.approx([0.335] * 4, abs=1e-6)


def test_outer_nesterov_step_by_hand():
    # global 1.0, mean pseudo-gradient 0.4, lr 0.7, mu 0.9: buf = 0.4, step = 0.4 + 0.9 * 0.4 = 0.76,
    # global = 1 - 0.7 * 0.76 = 0.468. Second round with 0.2: buf = 0.9*0.4 + 0.2 = 0.56,
    # step = 0.2 + 0.9 * 0.56 = 0.704, global = 0.468 - 0.7 * 0.704 = -0.0248.
    global_params = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0]])]
    outer = make_outer_optimizer(global_params, 0.7, 0.9)
    apply_outer_step(global_params, outer, torch.tensor([0.4, 0.0, -1.0]))
    assert global_params[0].tolist() == pytest.approx([0.468, 2.0])
    assert global_params[1].item() == pytest.approx(3.0 + 0.7 * 1.9)
    apply_outer_step(global_params, outer, torch.tensor([0.2, 0.0, 0.0]))
    assert global_params[0][0].item() == pytest.approx(-0.0248, abs=1e-6)
    with pytest.raises(DiLoCoStateError, match="3 parameters"):
        apply_outer_step(global_params, outer, torch.zeros(2))


def _model(value: float) -> torch.nn.Module:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    return model


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
def test_single_island_merge_matches_hand_values(codec):
    model = _model(1.0)
    merger = IslandMerger(model, LocalCommunicator(), make_codec(codec), outer_lr=0.7, outer_momentum=0.9)
    with torch.no_grad():
        model.weight.fill_(0.5)  # local progress: pseudo-gradient 1.0 - 0.5 = 0.5
    record = merger.merge(step=10)
    # buf = 0.5, step = 0.5 + 0.45 = 0.95, global = 1 - 0.665 = 0.335; a constant row is exact in int8.
    assert record.committed and record.round == 1 and record.contributors == 1 and not record.healed
    assert record.pseudo_gradient_norm == pytest.approx(0.5 * 2**0.5)
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.335, 0.335], abs=1e-3)
    assert merger.global_params[0].flatten().tolist() == pytest.approx([0.335, 0.335], abs=1e-3)


def test_outer_lr_one_without_momentum_is_parameter_averaging():
    model = _model(1.0)
    merger = IslandMerger(model, LocalCommunicator(), make_codec("fp32"), outer_lr=1.0, outer_momentum=0.0)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.25, -3.0]]))
    merger.merge(step=1)
    assert model.weight.detach().flatten().tolist() == [0.25, -3.0]


def test_healed_island_adopts_peer_state_and_contributes_nothing():
    peer = IslandMerger(
        _model(0.2), LocalCommunicator(), make_codec("fp32"), outer_lr=0.7, outer_momentum=0.9
    )
    peer.rounds = 4
    model = _model(5.0)  # a restarted island's stale local policy
    island = IslandMerger(model, LocalCommunicator(), make_codec("fp32"), outer_lr=0.7, outer_momentum=0.9)
    island.load_state_dict(peer.state_dict())
    record = island.merge(step=13)
    # Alone in the quorum with nothing to contribute: no outer step, but it continues from the peer's policy.
    assert record.healed and record.contributors == 0 and not record.committed and record.round == 4
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.2, 0.2])
    with pytest.raises(DiLoCoStateError, match="shapes"):
        island.load_state_dict({"global_params": [torch.zeros(3)], "rounds": 0, "outer_optimizer": {}})


class _PoisonedPeer(LocalCommunicator):
    """A second island whose message is this island's with every payload byte set to 0xFF: an int8 scale of
    NaN (and fp32 values of NaN)."""

    def participants(self) -> int:
        return 2

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        poisoned = tensor.clone()
        poisoned[48:] = 255
        return torch.stack([tensor, poisoned])


@pytest.mark.parametrize("codec", ["fp32", "int8"])
def test_a_peers_non_finite_contribution_is_dropped_and_the_island_merges_alone(codec):
    model = _model(1.0)
    merger = IslandMerger(model, _PoisonedPeer(), make_codec(codec), outer_lr=0.7, outer_momentum=0.9)
    with torch.no_grad():
        model.weight.fill_(0.5)
    record = merger.merge(step=10)
    assert record.committed and record.contributors == 1 and record.dropped == 1, record
    assert "rank 1" in record.drops[0]
    # Its own pseudo-gradient alone: the single-island values.
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.335, 0.335], abs=1e-3)


def test_a_merge_becomes_the_steps_islands_metrics():
    from swarmrl.islands.island import merge_metrics
    from swarmrl.islands.merge import MergeRecord

    record = MergeRecord(
        round=3,
        step=30,
        fragment=1,
        participants=2,
        contributors=1,
        wire_bytes=4096,
        seconds=0.25,
        blocked_seconds=0.125,
        committed=True,
        healed=False,
        pseudo_gradient_norm=1.5,
    )
    assert merge_metrics(record, island=1, islands=3) == {
        "islands/island": 1.0,
        "islands/islands": 3.0,
        "islands/round": 3.0,
        "islands/fragment": 1.0,
        "islands/participants": 2.0,
        "islands/contributors": 1.0,
        "islands/wire_bytes": 4096.0,
        "islands/seconds": 0.25,
        "islands/blocked_seconds": 0.125,
        "islands/committed": 1.0,
        "islands/healed": 0.0,
        "islands/pseudo_gradient_norm": 1.5,
        "islands/dropped": 0.0,
        "islands/heal_refused": 0.0,
    }


class _HeldPeer(LocalCommunicator):
    """Alone in the quorum, but its all-gather waits until the test lets it go (a slow link)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.entered.set()
        assert self.release.wait(10)
        return super()._all_gather(tensor)


def test_a_round_in_the_background_lands_one_step_late_with_that_steps_progress_kept():
    model = _model(1.0)
    peer = _HeldPeer()
    merger = IslandMerger(model, peer, make_codec("fp32"), outer_lr=0.7, outer_momentum=0.9)
    with torch.no_grad():
        model.weight.fill_(0.5)  # pseudo-gradient 0.5 at the launch, as in the blocking case above
    pending = merger.launch(step=10)
    assert peer.entered.wait(10)
    # The trainer's next step, while the round is on the wire: the round neither waits for it nor touches it.
    with torch.no_grad():
        model.weight.sub_(0.1)
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.4, 0.4])
    assert merger.rounds == 0
    peer.release.set()
    record = merger.finish(pending)
    # Global as in the blocking merge (0.335); the model adds the -0.1 it moved since the launch.
    assert record.committed and record.round == 1 and record.step == 10
    assert merger.global_params[0].flatten().tolist() == pytest.approx([0.335, 0.335], abs=1e-6)
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.235, 0.235], abs=1e-6)
    assert 0 <= record.blocked_seconds <= record.seconds


def test_a_blocking_round_blocks_for_all_of_it():
    merger = IslandMerger(
        _model(1.0), LocalCommunicator(), make_codec("fp32"), outer_lr=1.0, outer_momentum=0.0
    )
    record = merger.merge(step=3)
    assert record.blocked_seconds == pytest.approx(record.seconds, abs=1e-3)  # all but a function call


class _Island(LocalCommunicator):
    island = 0


def test_an_overlapping_island_applies_each_merge_a_step_late_and_blocks_on_the_last(tmp_path):
    from swarmrl.configs.islands import IslandsConfig
    from swarmrl.islands.island import MergeHook, merges_log
    from swarmrl.rundir import RunDir

    settings = IslandsConfig(
        count=1, merge_every=2, overlap_steps=1, codec="fp32", outer_lr=1.0, outer_momentum=0.0
    )
    hook = MergeHook(RunDir(tmp_path), settings, _Island(), last_step=4)
    model = _model(1.0)
    hook.merger = IslandMerger(model, hook.communicator, make_codec("fp32"), outer_lr=1.0, outer_momentum=0.0)
    figures = {step: hook(step, model) for step in (1, 2)}
    assert figures == {1: None, 2: None} and hook.pending is not None  # step 2's round is in flight
    landed = hook(3, model)
    assert landed is not None and landed["islands/round"] == 1.0 and hook.pending is None
    last = hook(4, model)
    assert last is not None and last["islands/round"] == 2.0 and hook.pending is None  # the last one blocks
    steps = [json.loads(line)["step"] for line in merges_log(RunDir(tmp_path)).read_text().splitlines()]
    assert steps == [2, 4]
    assert (tmp_path / "merge_state.pt").is_file()


class _HeldIsland(_HeldPeer):
    island = 0


def test_a_round_lands_after_the_first_step_that_finds_it_done_or_at_its_last_allowed_step(tmp_path):
    from swarmrl.configs.islands import IslandsConfig
    from swarmrl.islands.island import MergeHook

    settings = IslandsConfig(
        count=1, merge_every=4, overlap_steps=2, codec="fp32", outer_lr=1.0, outer_momentum=0.0
    )
    peer = _HeldIsland()
    hook = MergeHook(RunDir(tmp_path), settings, peer, last_step=12)
    model = _model(1.0)
    hook.merger = IslandMerger(model, peer, make_codec("fp32"), outer_lr=1.0, outer_momentum=0.0)
    assert [hook(step, model) for step in (1, 2, 3, 4)] == [None] * 4
    assert peer.entered.wait(10)
    assert hook(5, model) is None and hook.pending is not None  # still on the wire: the trainer goes on
    peer.release.set()
    while not hook.pending.done():
        time.sleep(0.01)
    landed = hook(6, model)  # done: lands at once, without blocking
    assert landed is not None and landed["islands/round"] == 1.0 and landed["islands/blocked_seconds"] < 0.5
    # The next round is held past its last allowed step (8 + 2): step 10 waits for it.
    peer.entered.clear()
    peer.release.clear()
    assert [hook(step, model) for step in (7, 8)] == [None, None]
    assert peer.entered.wait(10)
    assert hook(9, model) is None
    threading.Timer(0.3, peer.release.set).start()
    forced = hook(10, model)
    assert forced is not None and forced["islands/round"] == 2.0 and forced["islands/blocked_seconds"] >= 0.25


def test_a_merge_lands_before_the_next_is_launched():
    from swarmrl.configs.islands import IslandsConfig

    with pytest.raises(ValidationError, match="overlap_steps"):
        IslandsConfig(merge_every=4, overlap_steps=4)


class _PeerContributes(LocalCommunicator):
    """A second island in the quorum whose contribution to the round is `message`."""

    def __init__(self, message: torch.Tensor) -> None:
        super().__init__()
        self.message = message

    def participants(self) -> int:
        return 2

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.stack([tensor, self.message])


@pytest.mark.parametrize("background", [False, True])
def test_a_healed_island_takes_the_whole_merged_policy_when_a_fragments_round_commits(background):
    """Fragment 0 (the weight) merges with the peer's contribution; the bias, merged in another round, must
    come from the healed state too, not stay the restarted island's stale value."""
    from swarmrl.islands.contributions import RoundKey, encode_contribution

    codec = make_codec("fp32")
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(5.0)
        model.bias.fill_(5.0)
    peer_delta = torch.full((2,), 0.1)
    communicator = _PeerContributes(encode_contribution(peer_delta, RoundKey(0, 0, 2), codec))
    island = IslandMerger(model, communicator, codec, outer_lr=1.0, outer_momentum=0.0, fragments=2)
    healed = island.state_dict()
    healed["global_params"] = [torch.full((1, 2), 0.2), torch.full((1,), 0.2)]
    island.load_state_dict(healed)  # as torchft's heal leaves it
    record = island.finish(island.launch(step=1, fragment=0, background=background))
    assert record.healed and record.committed and record.contributors == 1
    assert model.weight.detach().flatten().tolist() == pytest.approx([0.1, 0.1])  # 0.2 - the peer's 0.1
    assert model.bias.detach().tolist() == pytest.approx([0.2])
