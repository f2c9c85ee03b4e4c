"""`swarmrl validator calibrate`: measure how far honest work and each attack land from the validator's view.

Honest rollouts are generated under every combination of attention implementation, CPU thread count and
generation batch size (what differs between honest machines); each attack changes one thing a cheater would.
The validator then recomputes every completion with the true policy (its own batch size, its own kernels) and
the statistics its numeric checks compare are recorded per completion:

    toploc           worst chunk: exponent-match fraction, mantissa difference mean / median (report.ok)
    logprobs         largest |reported − recomputed| logprob
    seeded_sampling  smallest Gumbel-max choice margin (negative: the seeded sampler would not pick it)

The tolerances of `logprobs` and `seeded_sampling` are chosen as `safety ×` the worst honest value (and at
least the floor below which float32 noise lives); TOPLOC keeps its reference rule and the report shows the
margin each side has to it. False-reject rate = honest completions a check fails; miss rate = attack
completions that pass it (and that pass every check).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from swarmrl.configs.validator import ValidatorConfig
from swarmrl.inference.engine import Generation, GenerationRequest, SamplingParams
from swarmrl.inference.prefill import prefill
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.models import load_model
from swarmrl.models.lm_types import CausalLM
from swarmrl.models.prompting import PromptFormat
from swarmrl.tasks.task import TaskSource
from swarmrl.toploc import build_proofs_batch, verify_proofs_batch

TOLERANCE_FLOOR = 1e-4


@dataclass(frozen=True)
class Measured:
    """The validator's view of one completion."""

    source: str  # "honest:<variant>" or "attack:<name>"
    toploc_ok: bool
    exponent_match: float
    mantissa_mean: float
    mantissa_median: float
    logprob_gap: float
    choice_margin: float


@dataclass(frozen=True)
class Setting:
    attn: str
    threads: int
    batch: int

    @property
    def name(self) -> str:
        return f"{self.attn}/t{self.threads}/b{self.batch}"


def quantised_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Weights rounded to int8 per output channel, as a cheaper server would run them."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for module in clone.modules():
            if isinstance(module, torch.nn.Linear):
                scale = module.weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127
                module.weight.copy_((module.weight / scale).round().clamp(-127, 127) * scale)
    return clone


def bf16_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Weights stored in bf16 (computation in float32): lower precision than the run's float32."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in clone.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
    return clone


def half_layers(model: torch.nn.Module) -> torch.nn.Module:
    clone: CausalLM = copy.deepcopy(model)
    keep = max(1, clone.config.num_hidden_layers // 2)
    clone.model.layers = clone.model.layers[:keep]
    clone.config.num_hidden_layers = keep
    return clone


def different_model(model: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(1234)
    return type(model)(copy.deepcopy(model.config)).eval()


@dataclass(frozen=True)
class Attack:
    name: str
    model: Callable[[torch.nn.Module], torch.nn.Module] | None = None  # generate with this model instead
    temperature: float | None = None  # sample at this temperature, claim the run's
    flip_sign: bool = False  # commit proofs of the negated hidden states


ATTACKS = (
    Attack("different_model", model=different_model),
    Attack("int8_weights", model=quantised_int8),
    Attack("bf16_weights", model=bf16_weights),
    Attack("half_layers", model=half_layers),
    Attack("wrong_temperature", temperature=0.5),
    Attack("sign_flipped_proofs", flip_sign=True),
)


def _generate(
    model: torch.nn.Module,
    requests: list[GenerationRequest],
    params: SamplingParams,
    batch: int,
    stop_token_ids: tuple[int, ...],
) -> list[Generation]:
    engine = TorchEngine(model, eos_token_id=stop_token_ids)
    return [
        g
        for start in range(0, len(requests), batch)
        for g in engine.generate(requests[start : start + batch], params)
    ]


def commit(generations: list[Generation], flip_sign: bool = False) -> list[list[bytes]]:
    """The worker's TOPLOC proofs of its generations (of the negated hidden states, for the sign attack)."""
    return build_proofs_batch([(-g.hidden_states if flip_sign else g.hidden_states) for g in generations])


def measure(
    source: str,
    policy: torch.nn.Module,
    generations: list[Generation],
    proofs: list[list[bytes]],
    params: SamplingParams,
    settings: ValidatorConfig,
) -> list[Measured]:
    """The validator's view of each committed completion, recomputed with `policy` (on any device)."""
    results = prefill(
        policy,
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=params.temperature,
        top_p=params.top_p,
        seeds=[g.seed for g in generations],
        batch_size=settings.prefill_batch_size,
    )
    reports = verify_proofs_batch(
        proofs, [r.hidden_states.cpu() for r in results], thresholds=settings.toploc
    )
    measured = []
    for generation, result, report in zip(generations, results, reports, strict=True):
        chunks = report.chunks
        assert result.choice_margins is not None  # the prefill replayed the seeds
        measured.append(
            Measured(
                source=source,
                toploc_ok=report.ok,
                exponent_match=min((c.exponent_matches / max(c.points, 1) for c in chunks), default=0.0),
                mantissa_mean=max((c.mantissa_diff_mean for c in chunks), default=float("inf")),
                mantissa_median=max((c.mantissa_diff_median for c in chunks), default=float("inf")),
                logprob_gap=float((torch.tensor(generation.logprobs) - result.logprobs.cpu()).abs().max()),
                choice_margin=float(result.choice_margins.min()),
            )
        )
    return measured


@dataclass
class Calibration:
    measured: list[Measured]
    logprob_tolerance: float
    choice_margin_tolerance: float

    def passes(self, m: Measured) -> dict[str, bool]:
        return {
            "toploc": m.toploc_ok,
            "logprobs": m.logprob_gap <= self.logprob_tolerance,
            "seeded_sampling": m.choice_margin >= -self.choice_margin_tolerance,
        }

    def rates(self) -> dict[str, dict[str, float]]:
        """source group → check → fraction passing ("all": every check passes)."""
        groups: dict[str, list[Measured]] = {}
        for m in self.measured:
            key = "honest" if m.source.startswith("honest:") else m.source
            groups.setdefault(key, []).append(m)
        table = {}
        for key, members in groups.items():
            verdicts = [self.passes(m) for m in members]
            row = {check: sum(v[check] for v in verdicts) / len(verdicts) for check in verdicts[0]}
            row["all"] = sum(all(v.values()) for v in verdicts) / len(verdicts)
            table[key] = row
        return table


def calibrate(
    policy_path,
    tasks: TaskSource,
    prompts: PromptFormat,
    *,
    params: SamplingParams,
    completions: int = 64,
    safety: float = 4.0,
    settings: ValidatorConfig | None = None,
    attn_implementations: tuple[str, ...] = ("sdpa", "eager"),
    thread_counts: tuple[int, ...] = (1, 2),
    batch_sizes: tuple[int, ...] = (1, 8, 32),
    progress: Callable[[str], None] = lambda _: None,
) -> Calibration:
    settings = settings or ValidatorConfig()
    stops = prompts.stop_token_ids
    requests = [
        GenerationRequest(prompts.ids(tasks[i % len(tasks)].prompt), 10_000 + i) for i in range(completions)
    ]
    policy = load_model(policy_path).eval()
    threads_before = torch.get_num_threads()
    measured: list[Measured] = []
    try:
        for attn, threads, batch in itertools.product(attn_implementations, thread_counts, batch_sizes):
            setting = Setting(attn, threads, batch)
            progress(f"honest {setting.name}")
            torch.set_num_threads(threads)
            worker_model = load_model(policy_path, attn_implementation=attn)
            generations = _generate(worker_model, requests, params, batch, stops)
            torch.set_num_threads(threads_before)
            source = f"honest:{setting.name}"
            measured += measure(source, policy, generations, commit(generations), params, settings)
        for attack in ATTACKS:
            progress(f"attack {attack.name}")
            model = attack.model(policy) if attack.model else policy
            sampled = (
                params
                if attack.temperature is None
                else dataclasses.replace(params, temperature=attack.temperature)
            )
            generations = _generate(model, requests, sampled, 8, stops)
            if attack.temperature is not None:
                # The cheater reports logprobs as if it sampled at the run's temperature.
                generations = _with_logprobs_at(policy, generations, params)
            proofs = commit(generations, attack.flip_sign)
            measured += measure(f"attack:{attack.name}", policy, generations, proofs, params, settings)
    finally:
        torch.set_num_threads(threads_before)
    honest = [m for m in measured if m.source.startswith("honest:")]
    worst_gap = max(m.logprob_gap for m in honest)
    worst_margin = max(0.0, -min(m.choice_margin for m in honest))
    return Calibration(
        measured,
        logprob_tolerance=max(TOLERANCE_FLOOR, safety * worst_gap),
        choice_margin_tolerance=max(TOLERANCE_FLOOR, safety * worst_margin),
    )


def _with_logprobs_at(
    policy: torch.nn.Module, generations: list[Generation], params: SamplingParams
) -> list[Generation]:
    results = prefill(
        policy,
        [g.prompt_ids for g in generations],
        [g.completion_ids for g in generations],
        temperature=params.temperature,
        top_p=params.top_p,
        seeds=None,
    )
    return [
        dataclasses.replace(g, logprobs=r.logprobs.tolist())
        for g, r in zip(generations, results, strict=True)
    ]
