"""`swarmrl demo`: SFT a tiny model (cached), asynchronous RL with local workers, held-out accuracy before/after."""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from swarmrl.config import RunConfig
from swarmrl.evaluation import EvalResult, evaluate
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.launch.local import run_local
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import PromptFormat, prompt_format
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.tasks.registry import heldout_sources
from swarmrl.tasks.task import Task
from swarmrl.trainer.checkpoint import checkpoint_dir, latest_checkpoint


def evaluate_checkpoint(config: RunConfig, rundir: RunDir, step: int) -> EvalResult:
    path = checkpoint_dir(rundir.checkpoints, step)
    prompts = prompt_format(load_tokenizer(path), config.prompt)
    engine = build_engine(
        config.engine,
        load_model(path, config.model.dtype),
        eos_token_id=prompts.stop_token_ids,
        policy_step=step,
    )
    sources = heldout_sources(config.tasks)
    if not sources:
        raise ValueError("held-out evaluation needs a reasoning-gym or arithmetic source")
    tasks = [sources[0][i] for i in range(min(config.eval.num_tasks, len(sources[0])))]
    params = SamplingParams(
        max_new_tokens=config.worker.max_new_tokens,
        temperature=config.eval.temperature,
        top_p=config.worker.top_p,
    )
    if config.env is not None:
        return _evaluate_env(config, engine, prompts, tasks, params)
    return evaluate(
        engine,
        tasks,
        prompts=prompts,
        tasks_config=config.tasks,
        params=params,
        samples_per_task=config.eval.samples_per_task,
    )


def _evaluate_env(
    config: RunConfig, engine, prompts: PromptFormat, tasks: list[Task], params: SamplingParams
) -> EvalResult:
    """Held-out accuracy of a multi-turn run: whole episodes in its environment (tool calls and all)."""
    from swarmrl.envs.build import TaskVerifier
    from swarmrl.envs.codec import PromptTurnCodec
    from swarmrl.envs.evaluate import env_accuracy

    repeated = [task for task in tasks for _ in range(config.eval.samples_per_task)]
    result = env_accuracy(
        engine, PromptTurnCodec(prompts), config.env, TaskVerifier(config.tasks), repeated, params
    )
    return EvalResult(result.accuracy, result.mean_reward, result.episodes, result.mean_model_tokens)


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
    with Progress(
        TextColumn("[bold]SFT warm start"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("sft", total=config.sft.steps, loss="-")
        rundir = prepare_run(
            config, progress=lambda step, loss: bar.update(task, completed=step, loss=f"{loss:.3f}")
        )
    console.print(f"run directory: {rundir.root}")
    before = evaluate_checkpoint(config, rundir, 0)
    console.print(f"held-out accuracy of the SFT policy: {100 * before.accuracy:.1f}%")
    run_local(config, rundir, console=console)
    last = latest_checkpoint(rundir.checkpoints) or 0
    after = evaluate_checkpoint(config, rundir, last)
    result = DemoResult(before, after, last, time.monotonic() - started)
    table = Table(title=f"held-out accuracy ({before.completions} completions, T={config.eval.temperature})")
    for column in ("policy", "accuracy", "mean reward", "tokens/completion"):
        table.add_column(column, justify="right")
    table.add_row(
        "SFT (step 0)",
        f"{100 * before.accuracy:.1f}%",
        f"{before.mean_reward:.3f}",
        f"{before.mean_completion_tokens:.1f}",
    )
    table.add_row(
        f"RL (step {last})",
        f"{100 * after.accuracy:.1f}%",
        f"{after.mean_reward:.3f}",
        f"{after.mean_completion_tokens:.1f}",
    )
    console.print(table)
    console.print(
        f"gain: {result.gain_points:+.1f} points in {result.seconds:.0f}s · reward curve: {rundir.root / 'reward_curve.png'}"
    )
    write_json_atomic(rundir.root / "demo_result.json", {**asdict(result), "gain_points": result.gain_points})
    return result
