"""Two islands on a real torchft quorum: an honest one running the production merge (`join_quorum`, its
process group, heal transport and `IslandMerger`), and a hostile peer that attacks one merge round after the
other. Each island is a spawned process; the honest one writes one JSON line per round.

The hostile peer is the same code with its communicator wrapped, so it can say anything on the wire:
collectives pass through `HostileCommunicator`, which rewrites what the peer sends; its codec, model and
torchft step counter are its own to corrupt as well.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import time
from pathlib import Path

import torch

from swarmrl.configs.islands import IslandsConfig
from swarmrl.diloco.codecs import EncodedRows, Int8Codec, make_codec
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.islands.island import join_quorum
from swarmrl.islands.merge import IslandMerger

HEADER_FIELDS = {"fragment": 2, "codec": 4, "contributors": 5}  # int64 index in the contribution header
HEAL_ATTACKS = {"step_claim", "pickle"}


class ScaleCodec(Int8Codec):
    """An int8 codec that puts `scale` (NaN, Inf) into every row's scale."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def encode(self, rows: torch.Tensor) -> EncodedRows:
        encoded = super().encode(rows)
        return EncodedRows(encoded.values, torch.full_like(encoded.scales, self.scale))


class Gadget:
    """What a peer's state may hold if the healing island unpickles it in full: a call of the peer's choice."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


class HostileCommunicator(Communicator):
    """Forwards every collective to the island's real communicator after rewriting what this island sends."""

    def __init__(self, inner: Communicator) -> None:
        super().__init__(inner.rank, inner.world_size)
        self.inner = inner
        self.attack = "honest"
        self.last_sent: torch.Tensor | None = None

    def begin_round(self) -> None:
        self.inner.begin_round()
        self.rank, self.world_size = self.inner.rank, self.inner.world_size

    def participants(self) -> int:
        return self.inner.participants()

    def round_number(self) -> int | None:
        return self.inner.round_number()

    def end_round(self) -> bool:
        return self.inner.end_round()

    def close(self) -> None:
        self.inner.close()

    def _tampered(self, tensor: torch.Tensor) -> torch.Tensor:
        sent = tensor.clone()
        if self.attack in HEADER_FIELDS and sent.dtype == torch.uint8:
            header = sent[:48].clone().view(torch.int64)
            header[HEADER_FIELDS[self.attack]] = 10**6 if self.attack == "contributors" else 1
            sent[:48] = header.view(torch.uint8)
        elif self.attack == "garble":
            noise = torch.randint(0, 256, (sent.numel() * sent.element_size(),), dtype=torch.uint8)
            sent = noise.view(sent.dtype).view(sent.shape)
        elif self.attack == "replay" and self.last_sent is not None and self.last_sent.shape == sent.shape:
            sent = self.last_sent
        elif self.attack == "oversize":  # along the last dimension: a 2-D all-to-all keeps its row count
            sent = torch.cat([sent, sent[..., : max(1, sent.shape[-1] // 4)]], dim=-1)
        elif self.attack == "truncate":
            sent = sent[..., : max(1, sent.shape[-1] // 2)].clone()
        if self.attack == "honest":
            self.last_sent = tensor.clone()
        return sent

    def _all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.attack == "contributors" and tensor.numel() == 1:  # a contributors flag summed by all-reduce
            tensor.mul_(1e6)
        return self.inner.all_reduce_mean(tensor)

    def _all_to_all(self, rows: torch.Tensor) -> torch.Tensor:
        return self.inner.all_to_all(self._tampered(rows))

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.inner.all_gather(self._tampered(tensor))


def _progress(params: list[torch.Tensor], island: int, round_index: int) -> None:
    """One island's local progress since the last merge: a small step in a direction of its own."""
    generator = torch.Generator().manual_seed(1000 * island + round_index)
    with torch.no_grad():
        for param in params:
            param.sub_(0.01 * torch.randn(param.shape, generator=generator))


def _merger(settings: IslandsConfig, communicator: Communicator) -> IslandMerger:
    torch.manual_seed(0)  # every island starts from the same policy
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 16))
    return IslandMerger(
        model,
        communicator,
        make_codec(settings.codec, settings.int8_clip_sigmas),
        outer_lr=settings.outer_lr,
        outer_momentum=settings.outer_momentum,
        max_norm_ratio=settings.max_norm_ratio,
        heal_max_change=settings.heal_max_change,
    )


def island_main(
    island: int, lighthouse: str, plan: list[str], settings_json: str, out: str, marker: str
) -> None:
    """Run one merge per entry of `plan` as island `island`; island 0 is honest, island 1 attacks."""
    torch.set_num_threads(1)
    settings = IslandsConfig.model_validate_json(settings_json)
    quorum = join_quorum(settings, island, lighthouse)
    merger = _merger(settings, quorum.communicator)
    if island == 0:
        quorum.serve(merger)
        try:
            for index, attack in enumerate(plan):
                _honest_round(merger, 0, index, attack, Path(out))
        finally:
            quorum.communicator.close()
        return
    hostile = HostileCommunicator(quorum.communicator)
    merger.communicator = hostile
    served: dict[str, object] = {"state": None}
    quorum.manager.register_state_dict_fn("islands", merger.heal_from_peer, lambda: served["state"])
    try:
        _hostile_rounds(merger, hostile, quorum.manager, served, plan, marker)
    finally:
        hostile.close()


def leader_main(
    island: int, lighthouse: str, settings_json: str, out: str, signals: str, join_after: int, rounds: int
):
    """An honest island that merges `join_after` times alone, says so and waits for a late peer to be ready
    (files in `signals`), merges until it has merged `rounds` times and says it is done."""
    torch.set_num_threads(1)
    settings = IslandsConfig.model_validate_json(settings_json)
    quorum = join_quorum(settings, island, lighthouse)
    merger = _merger(settings, quorum.communicator)
    quorum.serve(merger)
    try:
        for index in range(rounds):
            if index == join_after:
                (Path(signals) / "alone").touch()
            while index == join_after and not (Path(signals) / "ready").exists():
                time.sleep(0.2)
            _honest_round(merger, island, index, "leader", Path(out))
    finally:
        (Path(signals) / "done").touch()
        quorum.communicator.close()


def late_island_main(island: int, lighthouse: str, settings_json: str, out: str, signals: str) -> None:
    """An honest island that joins late (once the leader has merged alone): it says it is ready, heals from the
    leader and merges with it until the leader is done."""
    torch.set_num_threads(1)
    while not (Path(signals) / "alone").exists():
        time.sleep(0.2)
    settings = IslandsConfig.model_validate_json(settings_json)
    quorum = join_quorum(settings, island, lighthouse)
    merger = _merger(settings, quorum.communicator)
    quorum.serve(merger)
    (Path(signals) / "ready").touch()
    try:
        for index in range(100):  # bounded; the leader being done ends it far sooner
            if (Path(signals) / "done").exists():
                break
            _honest_round(merger, island, 100 + index, "late", Path(out))
    finally:
        quorum.communicator.close()


def _honest_round(merger: IslandMerger, island: int, index: int, attack: str, out: Path) -> None:
    """Local progress, one merge, and a line of what the merge did and left."""
    _progress(merger.params, island, index)
    record = merger.merge(step=index + 1)
    digest = hashlib.sha256(b"".join(g.numpy().tobytes() for g in merger.global_params)).hexdigest()
    line = {
        "attack": attack,
        **record.as_dict(),
        "max_abs": max(float(p.abs().max()) for p in merger.params),
        "global_digest": digest,
    }
    with out.open("a") as f:
        f.write(json.dumps(line) + "\n")


def _hostile_rounds(merger, hostile, manager, served, plan, marker) -> None:
    honest_codec = merger.codec
    for index, attack in enumerate(plan):
        with torch.no_grad():  # every round starts from its merged policy, however the last one went
            for param, global_param in zip(merger.params, merger.global_params, strict=True):
                param.copy_(global_param)
        _progress(merger.params, 1, index)
        hostile.attack = attack
        merger.codec = {"nan_scale": ScaleCodec(float("nan")), "inf_scale": ScaleCodec(float("inf"))}.get(
            attack, honest_codec
        )
        if attack == "offset":
            with torch.no_grad():
                for param in merger.params:
                    param.add_(1e30)
        served["state"] = merger.state_dict()
        if attack in HEAL_ATTACKS:
            # Claim to be far ahead, so the quorum heals the honest island from this island's state.
            manager._step += 1000
            served["state"] = Gadget(marker) if attack == "pickle" else _poisoned(merger.state_dict())
        try:
            merger.merge(step=index + 1)
        except Exception:  # the attacker's own round may break; it carries on with the next attack
            pass


def _poisoned(state: dict) -> dict:
    state["global_params"] = [g + 1e30 for g in state["global_params"]]
    state["outer_optimizer"]["param_groups"][0]["lr"] = 1e30
    return state
