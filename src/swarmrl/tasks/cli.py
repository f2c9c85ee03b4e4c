"""Task commands: band-filter a dataset by solve rate, preview a reasoning-gym generator; task packs' commands
live in `tasks/packs/cli.py`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from swarmrl.configs.tasks import DatasetSourceConfig, ReasoningGymSourceConfig
from swarmrl.tasks.dataset_source import load_dataset_tasks, write_tasks_jsonl
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.packs.cli import archive_pack, check_pack, sign_pack
from swarmrl.tasks.reasoning_gym_source import ReasoningGymSource
from swarmrl.tasks.registry import filter_by_solve_rate
from swarmrl.tasks.task import ListTaskSource

__all__ = ["archive_pack", "check_pack", "filter_band", "preview_generator", "sign_pack"]


def filter_band(
    dataset: Annotated[
        Path, typer.Argument(help="Input .jsonl/.jsonl.gz/.parquet with a solve_rate column.")
    ],
    output: Annotated[Path, typer.Argument(help="Output .jsonl with the tasks inside the band.")],
    low: Annotated[float, typer.Option(help="Lowest solve rate kept.")] = 0.1,
    high: Annotated[float, typer.Option(help="Highest solve rate kept.")] = 0.8,
    keep_unmeasured: Annotated[bool, typer.Option(help="Keep tasks without a solve rate.")] = False,
) -> None:
    """Keep the tasks whose solve rate lies in [low, high] (INTELLECT-2: [0.1, 0.8])."""
    try:
        tasks = load_dataset_tasks(DatasetSourceConfig(name=dataset.stem, path=str(dataset)))
        kept = filter_by_solve_rate(ListTaskSource(dataset.stem, tasks), low, high, keep_unmeasured)
    except TaskError as exc:
        raise typer.BadParameter(str(exc)) from exc
    write_tasks_jsonl((kept[i] for i in range(len(kept))), output)
    typer.echo(f"kept {len(kept)} of {len(tasks)} tasks in [{low}, {high}] -> {output}")


def preview_generator(
    generator: Annotated[str, typer.Argument(help="reasoning-gym generator name, e.g. basic_arithmetic.")],
    count: Annotated[int, typer.Option(help="Number of tasks to print.")] = 5,
    kwargs: Annotated[str, typer.Option(help="Generator kwargs as a JSON object.")] = "{}",
    template: Annotated[
        str, typer.Option(help="Prompt template: question, system or a format string.")
    ] = "question",
    seed: Annotated[int, typer.Option(help="Train split seed.")] = 0,
) -> None:
    """Print sample prompts and answers of a reasoning-gym generator, with their lengths."""
    try:
        config = ReasoningGymSourceConfig(
            generator=generator,
            generator_kwargs=json.loads(kwargs),
            prompt_template=template,
            seed=seed,
            size=max(count, 1) * 4,
            eval_size=max(count, 1),
        )
        source = ReasoningGymSource(config)
        for index in range(min(count, len(source))):
            task = source[index]
            answer = task.verification_info["answer"]
            typer.echo(
                f"[{len(task.prompt):4d} chars] {task.prompt!r} -> {answer!r} [{len(str(answer))} chars]"
            )
    except (TaskError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
