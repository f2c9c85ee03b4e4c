"""One island's side of a merge: pseudo-gradient against the policy at the last merge, mean over the quorum,
outer Nesterov step, and the merged policy copied back into the trainer's model.

The maths is DiLoCo's (`swarmrl.diloco.outer`); what is specific to islands is who contributes. An island
that has just healed from a peer (it restarted, or was dropped and came back) has no pseudo-gradient of
its own for this round: it sends zeros, and every contributor scales its pseudo-gradient by
participants / contributors so the quorum's mean is the mean over the contributors alone.

With streaming fragments a merge covers one fragment: its pseudo-gradient, its outer step (one SGD over the
whole global copy steps only the parameters that have a gradient, so each fragment keeps its own momentum)
and its copy back; the other parameters keep their local progress until their own merge.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from swarmrl.diloco.codecs import Codec
from swarmrl.diloco.communicators.base import Communicator
from swarmrl.diloco.errors import CommunicatorError, DiLoCoStateError
from swarmrl.diloco.outer import make_outer_optimizer, pseudo_gradient, split_into_fragments
from swarmrl.diloco.reduce import all_reduce_mean_encoded


@dataclass(frozen=True)
class MergeRecord:
    """One merge as this island saw it (a line of merges.jsonl)."""

    round: int  # merges committed by this island's quorum so far, this one included when committed
    step: int
    fragment: int
    participants: int
    contributors: int
    wire_bytes: int
    seconds: float
    committed: bool
    healed: bool
    pseudo_gradient_norm: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def contribution_scale(participants: int, contributors: int) -> float:
    """Factor on a contributor's pseudo-gradient so a mean over `participants` rows (zeros from the rest)
    equals the mean over the `contributors`."""
    if not 1 <= contributors <= participants:
        raise ValueError(f"need 1 <= contributors <= participants, got {contributors}, {participants}")
    return participants / contributors


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
    ) -> None:
        self.communicator = communicator
        self.codec = codec
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.global_params = [p.detach().to(device="cpu", dtype=torch.float32).clone() for p in self.params]
        self.fragments = split_into_fragments([p.numel() for p in self.params], fragments)
        self.outer = make_outer_optimizer(self.global_params, outer_lr, outer_momentum)
        self.rounds = 0
        self._healed = False

    def merge(self, step: int, fragment: int = 0) -> MergeRecord:
        """Run one merge round of `fragment`; on success the model holds the merged values of that fragment,
        on failure it keeps its own."""
        indices = self.fragments[fragment]
        global_params = [self.global_params[i] for i in indices]
        local_params = [self.params[i] for i in indices]
        started = time.perf_counter()
        bytes_before = self.communicator.stats.bytes_sent
        participants = contributors = 0
        norm = 0.0
        healed = False
        mean: torch.Tensor | None = None
        try:
            self.communicator.begin_round()
            healed, self._healed = self._healed, False
            participants = self.communicator.participants()
            if healed:
                self._copy_global_into_model()
            delta = torch.cat([d.reshape(-1) for d in pseudo_gradient(global_params, local_params)])
            norm = float(delta.norm())
            flag = torch.tensor([0.0 if healed else 1.0])
            contributors = round(float(self.communicator.all_reduce_mean(flag)[0]) * participants)
            if contributors > 0:
                delta.mul_(contribution_scale(participants, contributors))
                mean = all_reduce_mean_encoded(delta, self.codec, self.communicator)
                if not bool(torch.isfinite(mean).all()):
                    # A peer island sent NaN/Inf (fp32 rides torchft's all-reduce unchecked): never apply it.
                    raise CommunicatorError("averaged pseudo-gradient holds NaN or Inf")
        except CommunicatorError:
            mean = None
        committed = self.communicator.end_round() and mean is not None
        if committed:
            assert mean is not None
            apply_outer_step(global_params, self.outer, mean)
            self.rounds += 1
            self._copy_global_into_model(indices)
        elif healed:
            # The peer's merged policy is still the best this island has.
            self._copy_global_into_model()
        return MergeRecord(
            round=self.rounds,
            step=step,
            fragment=fragment,
            participants=participants,
            contributors=contributors,
            wire_bytes=self.communicator.stats.bytes_sent - bytes_before,
            seconds=time.perf_counter() - started,
            committed=committed,
            healed=healed,
            pseudo_gradient_norm=norm,
        )

    def _copy_global_into_model(self, indices: list[int] | None = None) -> None:
        with torch.no_grad():
            for index in range(len(self.params)) if indices is None else indices:
                param = self.params[index]
                param.copy_(self.global_params[index].to(device=param.device, dtype=param.dtype))

    def state_dict(self) -> dict[str, Any]:
        """What a (re)joining island needs from a peer, and what an island saves to resume on its own."""
        return {
            "rounds": self.rounds,
            "global_params": [g.clone() for g in self.global_params],
            "outer_optimizer": self.outer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], *, healed: bool = True) -> None:
        """Adopt merged state; with `healed` this island sits the next contribution out (it has no
        pseudo-gradient against that state yet)."""
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
