"""`swarmrl demo`: SFT a tiny model (cached), asynchronous RL with local workers, held-out accuracy before/after."""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass

import torch
from rich.console import Console
from rich.table import Table

from swarmrl.configs import RunConfig
from swarmrl.evaluation import EvalResult, HeldOutEval
from swarmrl.inference.engine import SamplingParams
from swarmrl.launch.local import run_local
from swarmrl.launch.prepare import prepare_run
from swarmrl.launch.progress import sft_progress, waiting
from swarmrl.models.prompting import PromptFormat
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import checkpoint_dir, latest_checkpoint
from swarmrl.tasks.task import Task


def evaluate_checkpoint(config: RunConfig, rundir: RunDir, step: int) -> EvalResult:
    path = checkpoint_dir(rundir.checkpoints, step)
    held_out = HeldOutEval.from_checkpoint(config, path, step, config.eval.num_tasks)
    if config.env is not None:
        return _evaluate_env(config, held_out.engine, held_out.prompts, held_out.tasks)
    return held_out.run()


def _evaluate_env(config: RunConfig, engine, prompts: PromptFormat, tasks: list[Task]) -> EvalResult:
    """Held-out accuracy of a multi-turn run: whole episodes in its environment (tool calls and all), k per task."""
    from swarmrl.envs.build import TaskVerifier
    from swarmrl.envs.codec import PromptTurnCodec
    from swarmrl.envs.evaluate import env_accuracy

    assert config.env is not None  # multi-turn runs only
    k = config.eval.samples_per_task
    params = SamplingParams(
        max_new_tokens=config.contract.max_new_tokens,
        temperature=config.eval.temperature,
        top_p=config.contract.top_p,
    )
    repeated = [task for task in tasks for _ in range(k)]
    result = env_accuracy(
        engine, PromptTurnCodec(prompts), config.env, TaskVerifier(config.tasks), repeated, params
    )
    correct = [sum(result.solved[i * k : (i + 1) * k]) for i in range(len(tasks))]
    return EvalResult.from_counts(
        correct, k, mean_reward=result.mean_reward, mean_completion_tokens=result.mean_model_tokens
    )


def _completions(config: RunConfig) -> int:
    return config.eval.num_tasks * config.eval.samples_per_task


@dataclass
class DemoResult:
    before: EvalResult
    after: EvalResult
    steps: int
    seconds: float

    @property
    def gain_points(self) -> float:
        return 100 * (self.after.accuracy - self.before.accuracy)


def run_demo(config: RunConfig, console: Console | None = None) -> DemoResult:
    console = console or Console()
    config.metrics.check_installed()
    started = time.monotonic()
    torch.set_num_threads(1)
    if config.run.directory.exists():
        shutil.rmtree(config.run.directory)
    with sft_progress(console, config.sft.steps) as progress:
        rundir = prepare_run(config, progress=progress)
    console.print(f"run directory: {rundir.root}")
    with waiting(console, f"held-out eval of the SFT policy ({_completions(config)} completions)"):
        before = evaluate_checkpoint(config, rundir, 0)
    console.print(f"held-out accuracy of the SFT policy: {100 * before.accuracy:.1f}%")
    run_local(config, rundir, console=console)
    last = latest_checkpoint(rundir.checkpoints) or 0
    with waiting(
        console, f"held-out eval of the RL policy, step {last} ({_completions(config)} completions)"
    ):
        after = evaluate_checkpoint(config, rundir, last)
    result = DemoResult(before, after, last, time.monotonic() - started)
    table = Table(title=f"held-out accuracy ({before.completions} completions, T={config.eval.temperature})")
    k = config.eval.samples_per_task
    for column in ("policy", f"accuracy (avg@{k})", f"pass@{k}", "mean reward", "tokens/completion"):
        table.add_column(column, justify="right")
    table.add_row(
        "SFT (step 0)",
        f"{100 * before.accuracy:.1f}%",
        f"{100 * before.pass_at_k:.1f}%",
        f"{before.mean_reward:.3f}",
        f"{before.mean_completion_tokens:.1f}",
    )
    table.add_row(
        f"RL (step {last})",
        f"{100 * after.accuracy:.1f}%",
        f"{100 * after.pass_at_k:.1f}%",
        f"{after.mean_reward:.3f}",
        f"{after.mean_completion_tokens:.1f}",
    )
    console.print(table)
    console.print(
        f"gain: {result.gain_points:+.1f} points in {result.seconds:.0f}s · reward curve: {rundir.root / 'reward_curve.png'}"
    )
    write_json_atomic(rundir.root / "demo_result.json", {**asdict(result), "gain_points": result.gain_points})
    return result
