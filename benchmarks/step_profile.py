"""Where a local run's step goes: `swarmrl rl` under py-spy (every process), wall time sorted into the jobs of
a step — generation, TOPLOC proofs, hidden-state capture, rollout file write and read, rewards, the trainer's
forward/backward and optimizer, checkpoint and trainer-state writes, the workers' reloads, waiting.

    python benchmarks/step_profile.py [--root DIR] [--steps 12] [OVERRIDE ...]

Overrides are the run config's dotted settings (`worker.num_workers=1`). The run starts from `DIR`'s cached
SFT policy (built on first use). py-spy (`pip install py-spy`) samples every process at `--rate` Hz, idle
threads included, so a process's samples add up to its wall time; only each process's main thread is sorted
(background threads, e.g. an online eval's, are left out). Figures are per policy step: wall seconds over the
run divided by its steps, start-up (imports, model loading) reported apart.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (category, frame pattern), matched from the innermost frame outward: the first frame that matches names
# what the sample was doing. "function (module path)" as py-spy prints it with --nolineno.
CATEGORIES = [
    ("proofs", r"^build_proofs_batch "),
    ("hidden-state capture", r"^PagedEngine\._collect |^TorchEngine\._hidden"),
    ("generation", r"^PagedEngine\.generate |^TorchEngine\.generate "),
    ("rollout write (+sign)", r"^write_rollouts "),
    ("rollout read (+verify)", r"^read_rollouts "),
    ("rewards", r"^score_rows "),
    ("worker reload", r"^LiveWeights\.load_weights |^.*\.update_weights "),
    ("checkpoint write", r"^_save_policy |^save_checkpoint "),
    ("trainer-state write", r"^save_trainer_state "),
    ("optimizer", r"^(AdamW|Optimizer)\.\w+ |^_single_tensor_adamw |^_multi_tensor_adamw |^clip_grad_norm_"),
    ("backward", r"^backward \(torch/(_tensor|autograd/__init__)\.py\)"),
    ("forward + loss", r"^train_step "),
    ("batch planning", r"^plan_policy_step "),
    ("metrics", r"^MetricsSink\.log "),
    (
        "start-up",
        r"^_find_and_load |^load_model |^load_policy |^build_engine |^prepare_run |^BatchWriter\.for_run ",
    ),
    ("waiting for a policy", r"^wait_for_policy "),
    ("waiting for rollouts", r"^RolloutFeed\.collect "),
    ("worker loop (polling)", r"^run_local_worker "),
    ("prompt assignment", r"^assigned_prompts "),
]


def role_of(process_frame: str) -> str | None:
    """'trainer', 'worker-N' or None (the launcher) from py-spy's `process PID:"cmdline"` frame."""
    if " trainer " in process_frame:
        return "trainer"
    match = re.search(r" worker .*--index (\d+)", process_frame)
    return f"worker-{match.group(1)}" if match else None


def categorise(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, pattern in CATEGORIES:
            if re.search(pattern, frame):
                return name
    return "other"


def tally(raw: Path, rate: int) -> dict[str, dict[str, float]]:
    """Seconds per (role, category) from a py-spy raw file; main threads only."""
    seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        role = role_of(processes[-1]) if processes else None
        if role is None or not any(f.startswith("<module> (swarmrl/cli.py)") or "runpy" in f for f in frames):
            continue
        seconds[role][categorise(frames)] += int(count) / rate
    return seconds


def steps_of(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    return (
        sum(1 for line in metrics.read_text().splitlines() if '"samples"' in line) if metrics.exists() else 0
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.toml")
    parser.add_argument("--root", type=Path, default=Path("/tmp/swarmrl-step-profile"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rate", type=int, default=50, help="samples per second per process")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    run = args.root / "profile"
    shutil.rmtree(run, ignore_errors=True)
    raw = args.root / "profile.raw"
    command = [
        sys.executable, "-m", "swarmrl.cli", "rl", f"@{args.config}", f"run.root='{args.root}'",
        "run.name='profile'", f"trainer.steps={args.steps}", *args.overrides,
    ]  # fmt: skip
    subprocess.run(
        [spy, "record", "--subprocesses", "--idle", "--nolineno", "--nonblocking", "--format", "raw",
         "-r", str(args.rate), "-o", str(raw), "--", *command],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    steps = steps_of(run)
    print(
        f"{' '.join(args.overrides) or 'config as is'}: {steps} policy steps; seconds per step (start-up total)"
    )
    for role, categories in sorted(tally(raw, args.rate).items()):
        total = sum(v for k, v in categories.items() if k != "start-up")
        print(
            f"{role}: {total / steps:.3f} s/step after start-up ({categories.get('start-up', 0):.1f} s start-up)"
        )
        for name, value in sorted(categories.items(), key=lambda kv: -kv[1]):
            if name != "start-up":
                print(f"  {name:26s} {value / steps:7.3f}  {100 * value / total:5.1f}%")


if __name__ == "__main__":
    main()
