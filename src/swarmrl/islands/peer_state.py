"""A peer's merged state, checked before a (re)joining island adopts it.

torchft heals an island that is behind the quorum's step from a peer's state, and any peer can claim to be
ahead. So an island adopts a peer's state at most once, before it has merged itself (a restarted island
catching up), and only if every value is finite and of this policy's shapes and the state moves the policy
by at most `heal_max_change` of its norm (a 1e30 "merged policy" never passes). The peer's outer momentum is
bounded the same way; its optimizer settings (learning rate, momentum factor) are never taken: they are this
island's own configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from swarmrl.diloco.errors import DiLoCoStateError

MAX_ROUNDS = 1 << 40  # far beyond any run; a bigger claim is a lie


@dataclass(frozen=True)
class PeerState:
    rounds: int
    global_params: list[torch.Tensor]
    momentum: dict[int, torch.Tensor]  # parameter index → outer momentum buffer


def _norm(tensors: list[torch.Tensor]) -> float:
    return float(torch.stack([t.double().norm() for t in tensors]).norm()) if tensors else 0.0


def _check_tensor(value: object, like: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.shape != like.shape:
        got = (
            f"{value.dtype} {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        )
        raise DiLoCoStateError(f"{what} is {got}, expected float32 {tuple(like.shape)}")
    if value.device.type != "cpu" or value.layout != torch.strided:
        # A meta or sparse tensor cannot even be checked for NaN; the pickle chose it, not the peer's policy.
        raise DiLoCoStateError(
            f"{what} is a {value.layout} tensor on {value.device}, expected a dense CPU one"
        )
    if not bool(torch.isfinite(value).all()):
        raise DiLoCoStateError(f"{what} holds NaN or Inf")
    return value


def _momentum(optimizer: object, own: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """The momentum buffers of a peer's outer optimizer state, checked against this policy's shapes."""
    state = optimizer.get("state") if isinstance(optimizer, dict) else None
    if not isinstance(state, dict):
        raise DiLoCoStateError("the outer optimizer state is missing or not a mapping")
    buffers: dict[int, torch.Tensor] = {}
    for index, entry in state.items():
        if type(index) is not int or not 0 <= index < len(own) or not isinstance(entry, dict):
            raise DiLoCoStateError(f"outer optimizer state names parameter {index!r} of {len(own)}")
        if set(entry) - {"momentum_buffer"}:
            raise DiLoCoStateError(f"outer optimizer state of parameter {index} holds {sorted(entry)}")
        if entry.get("momentum_buffer") is not None:
            what = f"momentum of parameter {index}"
            buffers[index] = _check_tensor(entry["momentum_buffer"], own[index], what).clone()
    return buffers


def checked_peer_state(state: object, own: list[torch.Tensor], max_change: float) -> PeerState:
    """The peer's state if this island may adopt it; DiLoCoStateError naming the first problem otherwise."""
    if not isinstance(state, dict):
        raise DiLoCoStateError(f"a peer's merge state is a {type(state).__name__}, not a mapping")
    rounds = state.get("rounds")
    if type(rounds) is not int or not 0 <= rounds <= MAX_ROUNDS:
        raise DiLoCoStateError(f"a peer's round count {rounds!r} is not a count")
    params = state.get("global_params")
    if not isinstance(params, list) or len(params) != len(own):
        raise DiLoCoStateError("merge state does not match this policy's parameter shapes")
    checked = [
        _check_tensor(p, o, f"parameter {i}") for i, (p, o) in enumerate(zip(params, own, strict=True))
    ]
    bound = max_change * _norm(own)
    change = _norm([p - o for p, o in zip(checked, own, strict=True)])
    if change > bound:
        raise DiLoCoStateError(
            f"the peer's policy is {change:.4g} from this island's, over the bound {bound:.4g}"
        )
    momentum = _momentum(state.get("outer_optimizer"), own)
    if _norm(list(momentum.values())) > bound:
        raise DiLoCoStateError(f"the peer's outer momentum exceeds the bound {bound:.4g}")
    return PeerState(rounds, [p.clone() for p in checked], momentum)
