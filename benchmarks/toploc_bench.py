"""TOPLOC proof build and verify: the reference `toploc` 0.1.6 (C++) and swarmrl side by side.

    .venv/bin/python benchmarks/toploc_bench.py [--hidden 1024 2048 4096 5120] [--tokens 512 2048 8192] [--threads N]

For every (hidden size, completion length) it times building the proofs of one completion (32-token chunks,
top-128, prompt not committed) and verifying them against the same states, takes the best of --repeats runs
(the machine may be shared), and prints µs per token, the swarmrl/reference ratio, ms per proof built, and
how many of swarmrl's proofs are byte-identical to the reference's (bf16 states: ties at the top-k border).
The reference is called the way prime-rl calls it: build from per-token activation tensors, verify through
its tensor fast path. Install it with
    pip install --no-binary toploc --no-build-isolation toploc==0.1.6
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from swarmrl.toploc import build_proofs, proof_size, verify_proofs

CHUNK, TOPK = 32, 128


def best_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up: first-call allocations and lazily built tables
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return min(timings)


def bench_one(reference, hidden: int, tokens: int, repeats: int) -> dict[str, float]:
    states = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(hidden + tokens))
    states = states.to(torch.bfloat16)
    activations = [row[None] for row in states]
    ref_proofs = reference.build_proofs_bytes(activations, CHUNK, TOPK, skip_prefill=True)
    our_proofs = build_proofs(states)
    if not verify_proofs(our_proofs, states).ok or not verify_proofs(ref_proofs, states).ok:
        raise SystemExit(f"honest proofs failed to verify at hidden={hidden} tokens={tokens}")
    per_token = 1e6 / tokens
    return {
        "ref_build": per_token
        * best_seconds(
            lambda: reference.build_proofs_bytes(activations, CHUNK, TOPK, skip_prefill=True), repeats
        ),
        "ref_verify": per_token
        * best_seconds(
            lambda: reference.verify_proofs_bytes(states, ref_proofs, CHUNK, TOPK, skip_prefill=True), repeats
        ),
        "our_build": per_token * best_seconds(lambda: build_proofs(states), repeats),
        "our_verify": per_token * best_seconds(lambda: verify_proofs(our_proofs, states), repeats),
        "bytes_per_chunk": len(our_proofs[0]),
        "identical": sum(ours == theirs for ours, theirs in zip(our_proofs, ref_proofs, strict=True)),
        "proofs": len(ref_proofs),
    }


def _tamperings(states: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Honest recomputations (noise) and attacks, each applied to every 32-token chunk of `states`."""
    generator = torch.Generator().manual_seed(seed)
    fp32 = states.float()
    chunks = states.shape[0] // CHUNK

    def noise(sigma: float) -> torch.Tensor:
        return (fp32 * (1 + sigma * torch.randn(fp32.shape, generator=generator))).to(torch.bfloat16)

    flipped, swapped = states.clone(), states.clone()
    for chunk in range(chunks):
        rows = slice(chunk * CHUNK, (chunk + 1) * CHUNK)
        top = states[rows].float().abs().reshape(-1).topk(TOPK).indices
        flat = flipped[rows].reshape(-1)
        flat[top[:5]] *= -1
        flipped[rows] = flat.reshape(CHUNK, -1)
        # Two distinct rows that hold committed points, picked at random among such rows.
        holders = torch.unique(top // states.shape[1])
        pick = holders[torch.randperm(len(holders), generator=generator)[:2]] + chunk * CHUNK
        swapped[pick] = states[pick.flip(0)]
    return {
        "honest: bf16 re-rounding, noise 0.1%": noise(1e-3),
        "honest: noise 0.4%": noise(4e-3),
        "honest: noise 1%": noise(1e-2),
        "honest?: noise 2%": noise(2e-2),
        "honest?: noise 5%": noise(5e-2),
        "attack: other states": torch.randn(states.shape, generator=generator).to(torch.bfloat16),
        "attack: noise 20% (cheaper compute)": noise(2e-1),
        "attack: scale x1.05": (fp32 * 1.05).to(torch.bfloat16),
        "attack: 5 top signs flipped": flipped,
        "attack: two rows swapped": swapped,
    }


def calibrate(reference, hidden: int, tokens: int) -> None:
    """Per-chunk reject rates of honest recomputations and accept rates (misses) of attacks, swarmrl's rule
    next to the reference rule (>= 90/128 exponent matches, mantissa mean <= 10, median <= 8)."""
    states = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    ours = build_proofs(states)
    theirs = reference.build_proofs_bytes([row[None] for row in states], CHUNK, TOPK, skip_prefill=True)
    print(f"\ncalibration, hidden {hidden}, {tokens // CHUNK} chunks: fraction of chunks rejected")
    print(f"{'case':<40} {'swarmrl':>8} {'reference':>10}")
    for name, validator_states in _tamperings(states, seed=hidden).items():
        report = verify_proofs(ours, validator_states)
        ours_rejected = len(report.failed_chunks) / len(report.chunks)
        results = reference.verify_proofs_bytes(validator_states, theirs, CHUNK, TOPK, skip_prefill=True)
        ref_rejected = sum(
            r.exp_mismatches > TOPK - 90 or r.mant_err_mean > 10 or r.mant_err_median > 8 for r in results
        ) / len(results)
        print(f"{name:<40} {ours_rejected:>8.3f} {ref_rejected:>10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[1024, 2048, 4096, 5120])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument(
        "--calibrate", action="store_true", help="also print honest-reject and attack-miss rates"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        import toploc as reference
    except ImportError as error:
        raise SystemExit(
            "reference package missing: pip install --no-binary toploc --no-build-isolation toploc==0.1.6"
        ) from error

    print(f"torch threads: {torch.get_num_threads()}; best of {args.repeats}; chunk {CHUNK}, top-{TOPK}")
    print(f"proof size: {proof_size(TOPK)} bytes per {CHUNK} tokens")
    header = (
        f"{'hidden':>6} {'tokens':>6} | {'build µs/tok ref':>16} {'swarmrl':>8} {'ratio':>6} {'ms/proof':>8} | "
        f"{'verify µs/tok ref':>17} {'swarmrl':>8} {'ratio':>6} | {'same bytes':>10}"
    )
    print(header)
    print("-" * len(header))
    build_ratios, verify_ratios = [], []
    for hidden in args.hidden:
        for tokens in args.tokens:
            r = bench_one(reference, hidden, tokens, args.repeats)
            build_ratio, verify_ratio = r["our_build"] / r["ref_build"], r["our_verify"] / r["ref_verify"]
            build_ratios.append(build_ratio)
            verify_ratios.append(verify_ratio)
            print(
                f"{hidden:>6} {tokens:>6} | {r['ref_build']:>16.1f} {r['our_build']:>8.1f} {build_ratio:>6.2f} "
                f"{r['our_build'] * CHUNK / 1000:>8.3f} | {r['ref_verify']:>17.1f} {r['our_verify']:>8.1f} "
                f"{verify_ratio:>6.2f} | {r['identical']:>5}/{r['proofs']:<4}"
            )
    print(
        f"ratio swarmrl/reference — build: best {min(build_ratios):.2f}, worst {max(build_ratios):.2f}; "
        f"verify: best {min(verify_ratios):.2f}, worst {max(verify_ratios):.2f}"
    )
    if args.calibrate:
        for hidden in (1024, 4096):
            calibrate(reference, hidden, tokens=2048)


if __name__ == "__main__":
    main()
