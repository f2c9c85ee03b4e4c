"""One island's side of a merge: pseudo-gradient against the policy at the last merge, mean over the quorum,
outer Nesterov step, and the merged policy copied back into the trainer's model.

The maths is DiLoCo's (`swarmrl.diloco.outer`); what is specific to islands is who contributes and that
no island trusts another. Every island all-gathers every island's whole contribution and keeps only those
that pass its checks (`swarmrl.islands.contributions`): a peer that sends garbage, NaN, a replayed round or
a pseudo-gradient far outside the round's norm is dropped for the round (logged, counted in the record) and
the merge goes on with the rest. An island that has just healed from a peer (it restarted, or was dropped
and came back) has no pseudo-gradient of its own for the round: it takes part and contributes nothing, and
the mean is over the contributions kept. Healing itself trusts no peer either (`swarmrl.islands.peer_state`).

With streaming fragments a merge covers one fragment: its pseudo-gradient, its outer step (one SGD over the
whole global copy steps only the parameters that have a gradient, so each fragment keeps its own momentum)
and its copy back; the other parameters keep their local progress until their own merge.

A round may run in the background (`launch(..., background=True)`, then `finish`): its communication goes on
on a thread while the trainer takes its next steps, and its result lands a step or more late with the local
progress since its launch kept on top of it (Streaming DiLoCo's overlapped communication, with the eager choice
of adding the progress rather than mixing it), so the trainer waits only for what those steps did not cover.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from swarmrl.configs.islands import IslandsConfig
from swarmrl.diloco.codecs import Codec
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CodecError, CommunicatorError, DiLoCoStateError
from swarmrl.diloco.outer import make_outer_optimizer, pseudo_gradient, split_into_fragments
from swarmrl.islands.contributions import Judged, RoundKey, encode_contribution, judge_round
from swarmrl.islands.peer_state import checked_peer_state

log = logging.getLogger(__name__)
_DEFAULTS = IslandsConfig()


@dataclass(frozen=True)
class MergeRecord:
    """One merge as this island saw it (a line of merges.jsonl)."""

    round: int  # merges committed by this island's quorum so far, this one included when committed
    step: int
    fragment: int
    participants: int
    contributors: int
    wire_bytes: int
    seconds: float  # from the round's launch to its result in the model
    blocked_seconds: float  # of those, the trainer's: all of them unless the round ran in the background
    committed: bool
    healed: bool
    pseudo_gradient_norm: float
    dropped: int = 0  # peers whose contribution failed a check this round
    heal_refused: bool = False  # a peer's state was offered to heal from and not adopted
    drops: tuple[str, ...] = ()  # why each dropped contribution was dropped

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RoundExchange:
    """What the communication of one merge round found."""

    participants: int = 0
    healed: bool = False
    judged: Judged = field(default_factory=lambda: Judged(None, 0))
    agreed: bool = False  # the quorum voted to commit


@dataclass
class PendingMerge:
    """A merge round launched and not yet applied (`IslandMerger.launch` / `finish`)."""

    step: int
    fragment: int
    started: float
    bytes_before: int
    norm: float
    # The fragment's values at the launch, when the round runs in the background (None: it blocked).
    launched: list[torch.Tensor] | None
    exchange: Future[RoundExchange] | RoundExchange
    blocked: float  # seconds the launch itself took the trainer

    def done(self) -> bool:
        """Whether `finish` would not wait."""
        return not isinstance(self.exchange, Future) or self.exchange.done()


def apply_outer_step(
    global_params: list[torch.Tensor], outer: torch.optim.Optimizer, mean_delta: torch.Tensor
) -> None:
    """θ_global ← outer step with the averaged pseudo-gradient (a flat fp32 vector in parameter order)."""
    if mean_delta.numel() != sum(p.numel() for p in global_params):
        raise DiLoCoStateError(
            f"averaged pseudo-gradient has {mean_delta.numel()} values for "
            f"{sum(p.numel() for p in global_params)} parameters"
        )
    offset = 0
    for param in global_params:
        param.grad = mean_delta[offset : offset + param.numel()].view_as(param).clone()
        offset += param.numel()
    outer.step()
    outer.zero_grad(set_to_none=True)


class IslandMerger:
    """Keeps the fp32 policy of the last merge (on CPU) and the outer optimizer's momentum."""

    def __init__(
        self,
        model: torch.nn.Module,
        communicator: Communicator,
        codec: Codec,
        *,
        outer_lr: float,
        outer_momentum: float,
        fragments: int = 1,
        max_norm_ratio: float = _DEFAULTS.max_norm_ratio,
        heal_max_change: float = _DEFAULTS.heal_max_change,
    ) -> None:
        self.communicator = communicator
        self.codec = codec
        self.max_norm_ratio = max_norm_ratio
        self.heal_max_change = heal_max_change
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.global_params = [p.detach().to(device="cpu", dtype=torch.float32).clone() for p in self.params]
        self.fragments = split_into_fragments([p.numel() for p in self.params], fragments)
        self.outer = make_outer_optimizer(self.global_params, outer_lr, outer_momentum)
        self.rounds = 0
        # Merged or healed since this process started: from then on no peer's state replaces this island's.
        self.live = False
        self._healed = False
        self._heal_refused = False
        self._pool: ThreadPoolExecutor | None = None  # the background rounds' one thread

    def merge(self, step: int, fragment: int = 0) -> MergeRecord:
        """Run one merge round of `fragment`, blocking; on success the model holds the merged values of that
        fragment, on failure it keeps its own."""
        return self.finish(self.launch(step, fragment, background=False))

    def launch(self, step: int, fragment: int = 0, *, background: bool = True) -> PendingMerge:
        """Start a merge round of `fragment` from the model as it is now. In the background the round's
        communication runs on a thread (it never touches the model) while the trainer goes on; `finish`
        waits for it and applies it."""
        started = time.perf_counter()
        bytes_before = self.communicator.stats.bytes_sent
        indices = self.fragments[fragment]
        params = [self.params[i] for i in indices]
        delta = torch.cat(
            [d.reshape(-1) for d in pseudo_gradient([self.global_params[i] for i in indices], params)]
        )
        launched = None
        exchange: Future[RoundExchange] | RoundExchange
        if background:
            launched = [p.detach().to(device="cpu", dtype=torch.float32, copy=True) for p in params]
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="island-merge")
            exchange = self._pool.submit(self._communicate, delta, step, fragment)
        else:
            exchange = self._communicate(delta, step, fragment)
        return PendingMerge(
            step=step,
            fragment=fragment,
            started=started,
            bytes_before=bytes_before,
            norm=float(delta.norm()),
            launched=launched,
            exchange=exchange,
            blocked=time.perf_counter() - started,
        )

    def finish(self, pending: PendingMerge) -> MergeRecord:
        """Wait for a launched round and apply it: the outer step on the fragment's global copy and the merged
        values into the model. A round launched in the background keeps what the trainer learned since its
        launch (merged value + local progress since the launch, Streaming DiLoCo's overlapped outer step)."""
        waiting = time.perf_counter()
        exchange = pending.exchange.result() if isinstance(pending.exchange, Future) else pending.exchange
        for reason in exchange.judged.drops:
            log.warning("merge of fragment %d at step %d: dropped %s", pending.fragment, pending.step, reason)
        indices = self.fragments[pending.fragment]
        committed = exchange.agreed and exchange.judged.mean is not None
        if committed:
            assert exchange.judged.mean is not None
            apply_outer_step([self.global_params[i] for i in indices], self.outer, exchange.judged.mean)
            self.rounds += 1
            self.live = True
        if exchange.healed:
            # The peer's merged policy (with this round's step where it committed) is the best this island has,
            # whole: its own parameters and their progress are from before it restarted.
            self._copy_global_into_model()
        elif committed:
            self._copy_global_into_model(indices, pending.launched)
        heal_refused, self._heal_refused = self._heal_refused, False
        finished = time.perf_counter()
        return MergeRecord(
            round=self.rounds,
            step=pending.step,
            fragment=pending.fragment,
            participants=exchange.participants,
            contributors=exchange.judged.contributors,
            wire_bytes=self.communicator.stats.bytes_sent - pending.bytes_before,
            seconds=finished - pending.started,
            blocked_seconds=pending.blocked + finished - waiting,
            committed=committed,
            healed=exchange.healed,
            pseudo_gradient_norm=0.0 if exchange.healed else pending.norm,
            dropped=len(exchange.judged.drops),
            heal_refused=heal_refused,
            drops=tuple(exchange.judged.drops),
        )

    def _communicate(self, delta: torch.Tensor, step: int, fragment: int) -> RoundExchange:
        """The round with the other islands: quorum (a rejoining island heals here), all-gather, the checks
        on every contribution, the commit vote. Reads and writes the merge state, never the model."""
        exchange = RoundExchange()
        try:
            self.communicator.begin_round()
            exchange.healed, self._healed = self._healed, False
            exchange.participants = self.communicator.participants()
            key = RoundKey(self._round_number(), fragment, delta.numel())
            exchange.judged = self._exchange(delta, key, exchange.healed)
        except CommunicatorError as exc:
            log.warning("merge of fragment %d at step %d failed: %s", fragment, step, exc)
        exchange.agreed = self.communicator.end_round()
        return exchange

    def _round_number(self) -> int:
        """The number every member's contribution must claim: the quorum's agreed step where there is one."""
        agreed = self.communicator.round_number()
        return self.rounds if agreed is None else agreed

    def _exchange(self, delta: torch.Tensor, key: RoundKey, healed: bool) -> Judged:
        """All-gather every island's contribution and judge each. An island with nothing (healed) or nothing
        usable (its own training diverged) to contribute still takes part, so the collective completes."""
        own = None if healed or not bool(torch.isfinite(delta).all()) else delta
        try:
            message = encode_contribution(own, key, self.codec)
        except CodecError as exc:  # e.g. beyond the fp16 range
            log.warning("this island's pseudo-gradient cannot be encoded (%s): it contributes nothing", exc)
            message = encode_contribution(None, key, self.codec)
        return judge_round(self.communicator.all_gather(message), key, self.codec, self.max_norm_ratio)

    def _copy_global_into_model(
        self, indices: list[int] | None = None, launched: list[torch.Tensor] | None = None
    ) -> None:
        """The global copy into the model's parameters `indices` (all by default); with `launched` (their
        values when the round was launched) plus what each parameter moved since."""
        with torch.no_grad():
            for k, index in enumerate(range(len(self.params)) if indices is None else indices):
                param, value = self.params[index], self.global_params[index]
                if launched is not None:
                    value = value + (param.detach().to(device="cpu", dtype=torch.float32) - launched[k])
                param.copy_(value.to(device=param.device, dtype=param.dtype))

    def state_dict(self) -> dict[str, Any]:
        """What a (re)joining island needs from a peer, and what an island saves to resume on its own."""
        return {
            "rounds": self.rounds,
            "global_params": [g.clone() for g in self.global_params],
            "outer_optimizer": self.outer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], *, healed: bool = True) -> None:
        """Adopt merged state this island trusts (its own saved state); with `healed` this island sits the
        next contribution out (it has no pseudo-gradient against that state yet)."""
        saved = state.get("global_params")
        if not isinstance(saved, list) or [tuple(t.shape) for t in saved] != [
            tuple(g.shape) for g in self.global_params
        ]:
            raise DiLoCoStateError("merge state does not match this policy's parameter shapes")
        with torch.no_grad():
            for global_param, value in zip(self.global_params, saved, strict=True):
                global_param.copy_(value)
        self.outer.load_state_dict(state["outer_optimizer"])
        self.rounds = int(state["rounds"])
        self._healed = healed

    def heal_from_peer(self, state: object) -> None:
        """torchft's load_state_dict: a peer's merged state, adopted only by an island that has not merged since
        it started and only if it passes `checked_peer_state`; otherwise refused (logged, in the next record)
        and this island goes on with its own state and contributes as usual."""
        if self.live:
            self._refuse_heal("this island has merged since it started and keeps its own state")
            return
        try:
            peer = checked_peer_state(state, self.global_params, self.heal_max_change)
        except DiLoCoStateError as exc:
            self._refuse_heal(str(exc))
            return
        with torch.no_grad():
            for global_param, value in zip(self.global_params, peer.global_params, strict=True):
                global_param.copy_(value)
        outer = self.outer.state_dict()  # this island's own lr and momentum factor, the peer's buffers
        outer["state"] = {index: {"momentum_buffer": buffer} for index, buffer in peer.momentum.items()}
        self.outer.load_state_dict(outer)
        self.rounds = peer.rounds
        self._healed = self.live = True

    def _refuse_heal(self, reason: str) -> None:
        log.warning("not healing from a peer's merge state: %s", reason)
        self._heal_refused = True

    def heal_bytes_bound(self) -> int:
        """The most bytes a peer's merge state may take on the wire: twice this island's own (global policy
        and momentum in fp32) plus room for the pickle's framing."""
        return 2 * 8 * sum(g.numel() for g in self.global_params) + (16 << 20)
