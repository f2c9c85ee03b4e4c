"""`swarmrl filter`: the offline difficulty filter — pass@k of a policy on each task, written as solve rates.

A run then keeps a band of them (`tasks.solve_rate_band`, INTELLECT-2: [0.1, 0.8]) by loading the written
file as a dataset source, so it spends fewer samples on groups that are all right or all wrong.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from swarmrl.configs import RunConfig
from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.factory import build_engine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.dataset_source import write_tasks_jsonl
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.reward import RewardComputer
from swarmrl.tasks.solve_rate import solve_rate
from swarmrl.tasks.task import Task

_FILTER_SEED = 0xF117E2


def measure_solve_rates(config: RunConfig, checkpoint: Path, num_tasks: int, k: int) -> list[Task]:
    """The first `num_tasks` training tasks, each with the solve rate of k seeded samples of the policy."""
    tokenizer = load_tokenizer(checkpoint)
    prompts = prompt_format(tokenizer, config.prompt)
    engine = build_engine(
        config.engine, load_model(checkpoint, config.model.dtype), eos_token_id=prompts.stop_token_ids
    )
    source = build_tasks(config.tasks)
    tasks = [source[i] for i in range(min(num_tasks, len(source)))]
    requests = [
        GenerationRequest(prompts.ids(task.prompt, task.messages), sample_seed(_FILTER_SEED, slot, sample))
        for slot, task in enumerate(tasks)
        for sample in range(k)
    ]
    params = SamplingParams(
        max_new_tokens=config.contract.max_new_tokens,
        temperature=config.contract.temperature,
        top_p=config.contract.top_p,
    )
    generations = engine.generate(requests, params)
    computer = RewardComputer(config.tasks)
    try:
        return [
            task.with_solve_rate(
                solve_rate(
                    task,
                    [completion_text(tokenizer, g.completion_ids) for g in generations[i * k : (i + 1) * k]],
                    computer,
                )
            )
            for i, task in enumerate(tasks)
        ]
    finally:
        computer.close()


def solve_rate_histogram(tasks: list[Task], k: int) -> dict[float, int]:
    counts = Counter(round(task.solve_rate or 0.0, 6) for task in tasks)
    return {round(i / k, 6): counts.get(round(i / k, 6), 0) for i in range(k + 1)}


def run_filter(config: RunConfig, checkpoint: Path, output: Path, num_tasks: int, k: int) -> list[Task]:
    rated = measure_solve_rates(config, checkpoint, num_tasks, k)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_tasks_jsonl(rated, output)
    return rated
