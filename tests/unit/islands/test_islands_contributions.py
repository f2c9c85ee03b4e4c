"""The checks on a peer island's contribution and on a peer's state to heal from, without a quorum."""

from __future__ import annotations

import pytest
import torch

from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators import LocalCommunicator
from swarmrl.diloco.errors import DiLoCoStateError
from swarmrl.islands.contributions import (
    HEADER_BYTES,
    ContributionError,
    RoundKey,
    decode_contribution,
    encode_contribution,
    judge_round,
)
from swarmrl.islands.merge import IslandMerger
from swarmrl.islands.peer_state import checked_peer_state

torch.set_num_threads(1)
KEY = RoundKey(round=3, fragment=0, numel=40_000)  # three int8 rows of at most 16384 values


def _delta(scale: float = 1.0, seed: int = 0) -> torch.Tensor:
    return scale * torch.randn(KEY.numel, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("codec", ["fp32", "fp16", "bf16", "int8"])
def test_a_contribution_decodes_to_the_codecs_roundtrip(codec):
    wire = make_codec(codec)
    delta = _delta()
    decoded = decode_contribution(encode_contribution(delta, KEY, wire), KEY, wire)
    padded = torch.zeros(3 * 16384)
    padded[: KEY.numel] = delta
    assert torch.equal(decoded, wire.roundtrip(padded.view(3, -1)).reshape(-1)[: KEY.numel])
    assert decode_contribution(encode_contribution(None, KEY, wire), KEY, wire) is None


def _header_edit(field: int, value: int) -> torch.Tensor:
    message = encode_contribution(_delta(), KEY, make_codec("int8"))
    header = message[:HEADER_BYTES].clone().view(torch.int64)
    header[field] = value
    message[:HEADER_BYTES] = header.view(torch.uint8)
    return message


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        (0, 1234, "magic"),
        (1, 2, "round 2"),
        (2, 1, "fragment 1"),
        (3, 39_999, "of 39999 values"),
        (4, 1, "codec 1"),
        (5, 10**6, "flag 1000000"),
    ],
)
def test_a_header_that_is_not_this_rounds_is_refused_by_name(field, value, named):
    with pytest.raises(ContributionError, match=named):
        decode_contribution(_header_edit(field, value), KEY, make_codec("int8"))


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -1.0])
def test_a_bad_int8_scale_is_refused(scale):
    codec = make_codec("int8")
    message = encode_contribution(_delta(), KEY, codec)
    rows = message[HEADER_BYTES:].view(3, -1)
    rows[1, -4:] = torch.tensor([scale], dtype=torch.float32).view(torch.uint8)
    with pytest.raises(ContributionError, match="scales must be finite and positive"):
        decode_contribution(message, KEY, codec)


def test_a_short_int8_message_in_a_zeroed_buffer_is_refused():
    # gloo may deliver a peer's short all-gather message into the receiver's zeroed buffer before the peer
    # aborts: the header reads well, but the missing rows' scales are zeros.
    codec = make_codec("int8")
    message = encode_contribution(_delta(), KEY, codec)
    received = torch.zeros_like(message)
    received[: message.numel() // 2] = message[: message.numel() // 2]
    with pytest.raises(ContributionError, match="scales must be finite and positive"):
        decode_contribution(received, KEY, codec)


def test_non_finite_values_and_garbage_are_refused():
    codec = make_codec("fp32")
    message = encode_contribution(_delta(), KEY, codec)
    message[HEADER_BYTES + 7 * 4 : HEADER_BYTES + 8 * 4] = torch.tensor([float("inf")]).view(torch.uint8)
    with pytest.raises(ContributionError, match="NaN or Inf"):
        decode_contribution(message, KEY, codec)
    noise = torch.Generator().manual_seed(1)
    garbage = torch.randint(0, 256, (message.numel(),), dtype=torch.uint8, generator=noise)
    with pytest.raises(ContributionError, match="magic"):
        decode_contribution(garbage, KEY, codec)


def _gathered(*deltas: torch.Tensor | None, codec: str = "fp32") -> torch.Tensor:
    return torch.stack([encode_contribution(d, KEY, make_codec(codec)) for d in deltas])


def test_a_pseudo_gradient_far_outside_the_rounds_norm_is_dropped():
    honest, other, hostile = _delta(seed=0), _delta(1.3, seed=1), _delta(seed=2) + 1e30
    judged = judge_round(_gathered(honest, other, hostile), KEY, make_codec("fp32"), max_norm_ratio=4.0)
    assert judged.contributors == 2 and len(judged.drops) == 1 and judged.drops[0].startswith("rank 2")
    assert torch.equal(judged.mean, torch.stack([honest, other]).mean(dim=0))
    # Two islands: the honest one's norm is the lower median, the 1e30 one is far over it.
    judged = judge_round(_gathered(hostile, honest), KEY, make_codec("fp32"), max_norm_ratio=4.0)
    assert judged.contributors == 1 and judged.drops[0].startswith("rank 0")
    assert torch.equal(judged.mean, honest)


def test_an_island_with_nothing_to_contribute_is_neither_counted_nor_dropped():
    honest = _delta()
    judged = judge_round(_gathered(None, honest, codec="int8"), KEY, make_codec("int8"), max_norm_ratio=4.0)
    assert judged.contributors == 1 and judged.drops == []
    assert judge_round(_gathered(None, codec="int8"), KEY, make_codec("int8"), 4.0).mean is None


def _merger(value: float = 1.0, momentum: float = 0.9) -> tuple[torch.nn.Module, IslandMerger]:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    return model, IslandMerger(
        model,
        LocalCommunicator(),
        make_codec("fp32"),
        outer_lr=0.7,
        outer_momentum=momentum,
        heal_max_change=0.5,
    )


def test_a_peer_state_is_checked_before_it_is_adopted():
    _, own = _merger(1.0)
    _, peer = _merger(1.2)
    peer.rounds = 7
    assert checked_peer_state(peer.state_dict(), own.global_params, 0.5).rounds == 7
    for edit, named in [
        (lambda s: s["global_params"][0].add_(1e30), "over the bound"),
        (lambda s: s["global_params"][0].fill_(float("nan")), "NaN"),
        (lambda s: s.update(global_params=[torch.zeros(3)]), "float32 \\(1, 2\\)"),
        (lambda s: s.update(rounds=-1), "round count"),
        (
            lambda s: s["outer_optimizer"].update(state={0: {"momentum_buffer": torch.full((1, 2), 1e30)}}),
            "momentum",
        ),
        (lambda s: s["outer_optimizer"].update(state={5: {}}), "parameter 5"),
        (lambda s: s.update(global_params=[torch.empty(1, 2, device="meta")]), "on meta"),
        (lambda s: s.update(global_params=[torch.zeros(1, 2).to_sparse()]), "sparse"),
    ]:
        state = peer.state_dict()
        edit(state)
        with pytest.raises(DiLoCoStateError, match=named):
            checked_peer_state(state, own.global_params, 0.5)


def test_heal_from_peer_keeps_this_islands_settings_and_only_a_fresh_island_heals():
    model, island = _merger(1.0)
    _, peer = _merger(1.2)
    state = peer.state_dict()
    state["outer_optimizer"]["param_groups"][0]["lr"] = 1e30
    island.heal_from_peer(state)
    assert island.live and island.outer.param_groups[0]["lr"] == 0.7
    assert island.global_params[0].flatten().tolist() == pytest.approx([1.2, 1.2])
    # Merged (or healed) once, an island never takes a peer's state again.
    island.heal_from_peer(peer.state_dict())
    record = island.merge(step=1)
    assert record.heal_refused and record.healed

    model, fresh = _merger(1.0)
    state = peer.state_dict()
    state["global_params"][0].add_(1e30)
    fresh.heal_from_peer(state)
    record = fresh.merge(step=1)
    assert record.heal_refused and not record.healed and record.committed
    assert model.weight.detach().abs().max().item() < 10
