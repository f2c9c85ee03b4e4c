"""The offline difficulty filter: solve rates written by `swarmrl filter`, a band kept, fewer wasted groups."""

import json

import torch

from swarmrl.configs import RunConfig
from swarmrl.configs.tasks import DatasetSourceConfig
from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.launch.filter import run_filter
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rollouts.advantages import informative_groups
from swarmrl.tasks import reward as reward_module
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.reward import RewardComputer, RewardRequest

K, G = 8, 8


class ContainsAnswerInitial:
    """Reward 1 when the completion holds the answer's first letter. A weak policy writes some letters far
    more often than others, so tasks differ in difficulty for real and fresh samples show it again."""

    def score(self, task, completion: str) -> float:
        return float(task.verification_info["answer"][0] in completion)


def uninformative_fraction(config: RunConfig, checkpoint, tasks) -> float:
    """Fresh groups of G samples (seeds unrelated to the filter's): share with all-equal rewards."""
    tokenizer = load_tokenizer(checkpoint)
    prompts = prompt_format(tokenizer, config.prompt)
    engine = TorchEngine(load_model(checkpoint))
    requests = [
        GenerationRequest(prompts.ids(t.prompt), 10_000 + slot * G + i)
        for slot, t in enumerate(tasks)
        for i in range(G)
    ]
    generations = engine.generate(requests, SamplingParams(max_new_tokens=config.contract.max_new_tokens))
    computer = RewardComputer(config.tasks)
    rewards = [
        r.task_reward
        for r in computer.compute_batch(
            [
                RewardRequest(
                    tasks[i // G], completion_text(tokenizer, g.completion_ids), len(g.completion_ids)
                )
                for i, g in enumerate(generations)
            ]
        )
    ]
    return 1.0 - informative_groups(rewards, G).float().mean().item()


def test_filter_writes_solve_rates_and_the_band_saves_samples(pregenerated_run, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    stand_in = reward_module.verifier_registry({"reasoning_gym": lambda config: ContainsAnswerInitial()})
    monkeypatch.setattr(reward_module, "VERIFIERS", stand_in)
    monkeypatch.setattr(reward_module, "_COMPUTERS", {})
    checkpoint = pregenerated_run.run.directory / "checkpoints" / "step_0"
    output = tmp_path / "rated.jsonl"
    rated = run_filter(pregenerated_run, checkpoint, output, num_tasks=96, k=K)

    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(lines) == len(rated) == 96
    assert all(line["solve_rate"] in {i / K for i in range(K + 1)} for line in lines)

    filtered = pregenerated_run.model_copy(deep=True)
    filtered.tasks.sources = [DatasetSourceConfig(name="rated", path=str(output))]
    filtered.tasks.solve_rate_band = (0.1, 0.8)
    kept = build_tasks(filtered.tasks)
    assert 0 < len(kept) < len(rated)
    assert all(0.1 <= kept[i].solve_rate <= 0.8 for i in range(len(kept)))

    everything = [rated[i] for i in range(len(rated))]
    in_band = [kept[i] for i in range(len(kept))]
    # Measured 0.24 vs 0.32 of groups wasted on this seeded policy.
    assert (
        uninformative_fraction(filtered, checkpoint, in_band)
        < uninformative_fraction(pregenerated_run, checkpoint, everything) - 0.03
    )
