"""End-to-end RL throughput: TRL's GRPOTrainer and swarmrl on the same model, task and batch, side by side.

Both start from the same policy (swarmrl's `step_0` of the run config), train on its reasoning-gym task with the
same reward (the generator's own score of the stripped completion), the config's group size and prompts per
optimizer step, its longest completion and temperature 1, for the same number of policy steps. Throughput =
completions generated and trained on per wall-clock second between the end of the first step and the end of
the last (model loading and the first step's warm-up excluded on both sides). swarmrl counts only the
completions it trained on (groups with non-zero advantage); the ones it sampled and dropped are not counted,
which favours TRL.

CPU (default): configs/demo.toml's SFT policy (0.5M parameters), group 8, 32 prompts, 8 new tokens; swarmrl
with 2 and with 1 local workers beside the trainer.

    python benchmarks/rl_throughput.py [--steps 10] [--quick]

GPU (issue 13): configs/one-gpu.toml, i.e. Qwen3-0.6B's shape (596M parameters, random weights: SFT skipped,
so every completion runs to its 512-token limit on both sides), basic_arithmetic, group 16, 32 prompts per
step; TRL in bf16 mixed precision with HF generate; swarmrl's trainer (bf16, chunked logprobs, packed flex
attention) with the paged engine in the same process (`trainer.colocate`), and with one worker process
beside it on the same GPU (asynchronous, the engine's `gpu_memory_fraction` of the device).

    python benchmarks/rl_throughput.py --gpu [--steps 4] [--out DIR]

`--smoke` runs the GPU arm's code path on the CPU with the shape cut to 2 layers and 16 new tokens (a test).
The GPU machine needs trl, accelerate, datasets and reasoning-gym beside torch/transformers: see
benchmarks/run_gpu.sh for the wheels that travel.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console

from swarmrl.configs import RunConfig, load_config
from swarmrl.launch.local import run_local
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.tasks.registry import build_tasks

REPO = Path(__file__).resolve().parents[1]
CPU_CONFIG = REPO / "configs" / "demo.toml"
GPU_CONFIG = REPO / "configs" / "one-gpu.toml"
# The GPU arm's shape, cut down for --smoke: the same code path on a CPU in seconds.
SMOKE = [
    "model.tiny.num_layers=2",
    "model.tiny.hidden_size=64",
    "model.tiny.num_heads=4",
    "model.tiny.num_kv_heads=2",
    "model.tiny.head_dim=16",
    "model.tiny.intermediate_size=128",
    "model.tiny.vocab_size=4096",
    "worker.max_new_tokens=16",
    "trainer.prompts_per_step=4",
    "worker.prompts_per_batch=4",
    "worker.group_size=4",
    "trainer.micro_batch_tokens=2048",
    "trainer.precision='fp32'",
    "trainer.device='cpu'",
    "worker.device='cpu'",
]


def swarmrl_run(base: RunConfig, start: Path, steps: int, name: str, colocate: bool, workers: int) -> float:
    data = base.model_dump(mode="json")
    data["run"]["name"] = name
    data["trainer"]["steps"] = steps
    data["trainer"]["colocate"] = colocate
    data["worker"]["num_workers"] = workers
    # TRL below takes one optimizer step per generation batch (gradient accumulation over it).
    data["trainer"]["optimizer_steps_per_policy_step"] = 1
    config = RunConfig.model_validate(data)
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


def trl_run(config: RunConfig, start: Path, steps: int, output: Path, *, gpu: bool, batch: int) -> float:
    """TRL's GRPOTrainer on the run's policy, task and batch shape; `batch` completions per forward/backward."""
    import reasoning_gym
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    prompts_per_step, group = config.trainer.prompts_per_step, config.worker.group_size
    tokenizer = load_tokenizer(start)
    tokenizer.padding_side = "left"
    model = load_model(start)
    tasks = build_tasks(config.tasks)
    prompts = prompt_format(tokenizer, config.prompt)
    rows = []
    for i in range(prompts_per_step * steps):
        task = tasks[i]
        # The text of the very ids swarmrl's workers send (BOS included for a plain prompt).
        prompt = tokenizer.decode(prompts.ids(task.prompt))
        rows.append({"prompt": prompt, "answer": task.verification_info["answer"]})
    scorer = reasoning_gym.create_dataset(config.tasks.sources[0].generator, seed=0, size=1)

    def reward(completions, answer, **kwargs):
        return [
            float(scorer.score_answer(c.strip(), {"answer": a}))
            for c, a in zip(completions, answer, strict=True)
        ]

    args = GRPOConfig(
        output_dir=str(output),
        use_cpu=not gpu,
        bf16=gpu,
        fp16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        max_steps=steps,
        learning_rate=config.trainer.lr,
        num_generations=group,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=prompts_per_step * group // batch,
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
    return (steps - 1) * prompts_per_step * group / (clock.stamps[-1] - clock.stamps[0])


def gpu_overrides(smoke: bool) -> list[str]:
    """The GPU arm's run: the real shape from its random initialisation (SFT skipped), both roles on the GPU."""
    return ["sft.steps=0", "trainer.device='cuda'", "worker.device='cuda'", *(SMOKE if smoke else [])]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=None, help="policy steps per arm (CPU 10, GPU 4)")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: 3 steps")
    parser.add_argument("--gpu", action="store_true", help="the Qwen3-0.6B-shape arm on a CUDA device")
    parser.add_argument("--smoke", action="store_true", help="the --gpu code path on the CPU, cut down")
    parser.add_argument("--out", type=Path, default=None, help="write rl_throughput.json here")
    args = parser.parse_args()
    gpu_arm = args.gpu or args.smoke
    steps = args.steps or (3 if args.quick or args.smoke else 4 if gpu_arm else 10)
    if args.gpu and not torch.cuda.is_available():
        raise SystemExit("--gpu needs a CUDA device (--smoke runs its code path on the CPU)")
    torch.set_num_threads(2)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="swarmrl-throughput-") as tmp:
        root = Path(tmp)
        overrides = [f"run.root='{root}'", "run.name='start'"]
        overrides += gpu_overrides(args.smoke) if gpu_arm else []
        config = load_config(GPU_CONFIG if gpu_arm else CPU_CONFIG, overrides)
        start = prepare_run(config).checkpoints / "step_0"
        batch = config.worker.group_size if gpu_arm else 64
        trl = trl_run(config, start, steps, root / "trl", gpu=args.gpu, batch=batch)
        console.print(f"TRL GRPOTrainer: {trl:.1f} samples/s")
        arms = {"colocated": (True, 1), "1 worker + trainer": (False, 1)}
        if not gpu_arm:
            arms = {"2 workers + trainer": (False, 2), "1 worker + trainer": (False, 1)}
        ours = {}
        for index, (name, (colocate, workers)) in enumerate(arms.items()):
            ours[name] = swarmrl_run(config, start, steps, f"swarmrl-{index}", colocate, workers)
            console.print(
                f"swarmrl ({name}): {ours[name]:.1f} samples/s  ratio vs TRL {ours[name] / trl:.2f}x"
            )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {
            "arm": "gpu" if args.gpu else "smoke" if args.smoke else "cpu",
            "device": torch.cuda.get_device_name() if args.gpu else "cpu",
            "steps": steps,
            "trl_samples_per_s": trl,
            "swarmrl_samples_per_s": ours,
            "ratio": {name: rate / trl for name, rate in ours.items()},
        }
        (args.out / "rl_throughput.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
