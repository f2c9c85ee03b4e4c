"""End-to-end RL throughput: TRL's GRPOTrainer and swarmrl on the same tiny model, task and batch.

Both start from the same SFT policy (swarmrl's `step_0` directory of configs/demo.toml), train on reasoning-gym
spell_backward with the same reward (the generator's own score of the stripped completion), group size 8,
32 prompts (256 completions) per optimizer step, at most 8 new tokens, temperature 1, for the same number of
policy steps. Throughput = completions generated and trained on per wall-clock second between the end of the
first step and the end of the last (model loading and the first step's warm-up excluded on both sides).
swarmrl counts only the completions it trained on (groups with non-zero advantage); the ones it sampled and
dropped are not counted, which favours TRL.

    python benchmarks/rl_throughput.py [--steps 10] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console

from swarmrl.config import RunConfig, load_config
from swarmrl.launch.local import run_local
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.tasks.registry import build_tasks

REPO = Path(__file__).resolve().parents[1]
GROUP, PROMPTS = 8, 32


def swarmrl_run(root: Path, start: Path, steps: int, workers: int) -> float:
    config = load_config(
        REPO / "configs" / "demo.toml",
        [
            f"run.root='{root}'",
            f"run.name='swarmrl-{workers}w'",
            f"trainer.steps={steps}",
            f"worker.num_workers={workers}",
            f"trainer.prompts_per_step={PROMPTS}",
            f"worker.group_size={GROUP}",
            # TRL below takes one optimizer step per generation batch (gradient accumulation over it).
            "trainer.optimizer_steps_per_policy_step=1",
        ],
    )
    target = config.run.directory / "checkpoints" / "step_0"
    target.parent.mkdir(parents=True)
    shutil.copytree(start, target)
    records = run_local(config, prepare_run(config), console=Console(quiet=True))
    trained = sum(r["samples"] for r in records[1:])
    return trained / (records[-1]["time"] - records[0]["time"])


class _StepClock:
    """A TrainerCallback that records the wall-clock time at the end of every optimizer step."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __getattr__(self, name):  # TRL calls every on_* hook; only on_step_end matters here
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_step_end(self, args, state, control, **kwargs):
        self.stamps.append(time.monotonic())


def trl_run(config: RunConfig, start: Path, steps: int, output: Path) -> float:
    import reasoning_gym
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = load_tokenizer(start)
    tokenizer.padding_side = "left"
    model = load_model(start)
    tasks = build_tasks(config.tasks)
    prompts = prompt_format(tokenizer, config.prompt)
    rows = []
    for i in range(PROMPTS * steps):
        task = tasks[i]
        # The text of the very ids swarmrl's workers send (BOS included for a plain prompt).
        prompt = tokenizer.decode(prompts.ids(task.prompt))
        rows.append({"prompt": prompt, "answer": task.verification_info["answer"]})
    scorer = reasoning_gym.create_dataset("spell_backward", seed=0, size=1)

    def reward(completions, answer, **kwargs):
        return [
            float(scorer.score_answer(c.strip(), {"answer": a}))
            for c, a in zip(completions, answer, strict=True)
        ]

    args = GRPOConfig(
        output_dir=str(output),
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        max_steps=steps,
        learning_rate=config.trainer.lr,
        num_generations=GROUP,
        per_device_train_batch_size=64,
        gradient_accumulation_steps=PROMPTS * GROUP // 64,
        max_completion_length=config.worker.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        num_iterations=1,
        dataloader_num_workers=0,
        seed=0,
    )
    clock = _StepClock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    return (steps - 1) * PROMPTS * GROUP / (clock.stamps[-1] - clock.stamps[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 steps")
    args = parser.parse_args()
    if args.quick:
        args.steps = 3
    torch.set_num_threads(2)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="swarmrl-throughput-") as tmp:
        root = Path(tmp)
        config = load_config(REPO / "configs" / "demo.toml", [f"run.root='{root}'", "run.name='sft'"])
        start = prepare_run(config).checkpoints / "step_0"
        trl = trl_run(config, start, args.steps, root / "trl")
        console.print(f"TRL GRPOTrainer: {trl:.1f} samples/s")
        ours = {workers: swarmrl_run(root, start, args.steps, workers) for workers in (2, 1)}
    for workers, rate in ours.items():
        console.print(
            f"swarmrl ({workers} workers + trainer): {rate:.1f} samples/s  ratio vs TRL {rate / trl:.2f}x"
        )


if __name__ == "__main__":
    main()
