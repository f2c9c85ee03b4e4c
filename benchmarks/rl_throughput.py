"""End-to-end RL throughput: TRL's GRPOTrainer and swarmrl on the same model, task and batch, side by side.

Both start from the same policy (swarmrl's `step_0` of the run config), train on its reasoning-gym task with the
same reward (swarmrl's own reward code on both sides: the task's score of the stripped completion, plus the
length term where the workload sets a target), the config's group size and prompts per optimizer step, its
longest completion and temperature 1, for the same number of policy steps. Throughput = completions generated
and trained on per wall-clock second between the end of the first step and the end of the last (model
loading and the first step's warm-up excluded on both sides). swarmrl counts only the completions it trained
on (groups with non-zero advantage); the ones it sampled and dropped are not counted, which favours TRL.
On the CPU both take one optimizer step per policy step (TRL: `num_iterations=1`, gradient accumulation over
the step's whole batch; swarmrl: `trainer.optimizer_steps_per_policy_step=1`, where its config's default of 2
would also recompute π_old with a forward pass of its own), so both arms run the same algorithm.

CPU workloads (`--workload`), each run `--runs` times with TRL and swarmrl interleaved in the same process
(the machine's load average printed with every figure; medians at the end):

- `demo` (default): configs/demo.toml's SFT policy (0.5M parameters), group 8, 32 prompts, 8 new tokens.
- `long`: a 6M-parameter Qwen2 shape (hidden 256, 6 layers, MLP 1024) from its random initialisation (SFT
  skipped, so completions run long: ~57 of 64 tokens), 64 new tokens, group 8, 32 prompts, learning rate
  1e-5; the prompt asks for 32 tokens and the reward is INTELLECT-2's exact length reward (task score −
  0.0003·|32 − L|), so a group's completions of different lengths carry an advantage.

swarmrl runs as `swarmrl rl` would with the workload's config: its local launcher picks the process layout from
the machine's cores (`layout.py`); `--arms` adds fixed layouts for comparison. TRL runs with each thread
count of `--trl-threads` (default 1 and 2: under load two threads can be slower than one) and the faster is the
anchor of the ratio.

`--precision bf16` trains in bf16 mixed precision on both sides (swarmrl: `trainer.precision='bf16'`, fp32 master
weights and AdamW state; TRL: `bf16=True`, the CPU autocast of HF's Trainer): on a CPU with AMX or AVX512-BF16
its matrix products run on the bf16 units. fp32 (default) on both sides otherwise.

    python benchmarks/rl_throughput.py [--workload demo|long] [--precision fp32|bf16] [--steps 10] [--runs 3]
        [--root DIR] [--quick]

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
import os
import re
import shutil
import statistics
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
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.length_reward import add_length_instruction
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.reward import RewardRequest, compute_rewards

REPO = Path(__file__).resolve().parents[1]
CPU_CONFIG = REPO / "configs" / "demo.toml"
GPU_CONFIG = REPO / "configs" / "one-gpu.toml"
LONG_TARGET = 32
# What TRL's arm does (see above): one optimizer step per batch of generations.
ONE_UPDATE_PER_STEP = ["trainer.optimizer_steps_per_policy_step=1"]
WORKLOADS = {
    "demo": [],
    "long": [
        "model.tiny.hidden_size=256",
        "model.tiny.num_layers=6",
        "model.tiny.num_heads=4",
        "model.tiny.num_kv_heads=2",
        "model.tiny.intermediate_size=1024",
        "model.tiny.max_position_embeddings=256",
        "sft.steps=0",
        "contract.max_new_tokens=64",
        "tasks.length.mode='exact'",
        f"tasks.length.targets=[{LONG_TARGET}]",
        # Small steps keep the workload what it is: at the demo's 5e-4 the policy learns to stop early within
        # a few steps and later steps generate and train on half the tokens.
        "trainer.lr=1e-5",
    ],
}
# Fixed local layouts `--arms` may add beside the launcher's own choice: (colocate, worker processes, the
# trainer generates while it waits).
ARMS = {
    "2 workers": (False, 2, False),
    "1 worker": (False, 1, False),
    "1 worker + generating trainer": (False, 1, True),
    "colocated": (True, 1, True),
}
# The GPU arm's shape, cut down for --smoke: the same code path on a CPU in seconds.
SMOKE = [
    "model.tiny.num_layers=2",
    "model.tiny.hidden_size=64",
    "model.tiny.num_heads=4",
    "model.tiny.num_kv_heads=2",
    "model.tiny.head_dim=16",
    "model.tiny.intermediate_size=128",
    "model.tiny.vocab_size=4096",
    "contract.max_new_tokens=16",
    "trainer.prompts_per_step=4",
    "contract.prompts_per_batch=4",
    "contract.group_size=4",
    "trainer.micro_batch_tokens=2048",
    "trainer.precision='fp32'",
    "trainer.device='cpu'",
    "worker.device='cpu'",
]


def swarmrl_run(
    base: RunConfig, start: Path, steps: int, name: str, layout: tuple[bool, int, bool] | None
) -> float:
    """samples/s of a local run from `start`; `layout` (an `ARMS` value) fixes the processes, None leaves
    them to the launcher."""
    data = base.model_dump(mode="json")
    data["run"]["name"] = name
    data["trainer"]["steps"] = steps
    # TRL below takes one optimizer step per generation batch (gradient accumulation over it).
    data["trainer"]["optimizer_steps_per_policy_step"] = 1
    if layout is not None:
        colocate, data["worker"]["num_workers"], data["trainer"]["generate_while_waiting"] = layout
        data["trainer"]["colocate"] = colocate
    config = RunConfig.model_validate(data)
    shutil.rmtree(config.run.directory, ignore_errors=True)
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


def trl_rows(config: RunConfig, tokenizer, steps: int) -> list[dict]:
    """The prompts TRL trains on: swarmrl's task prompts (with the length instruction when the run sets a
    target), as the text of the very ids swarmrl's workers send (BOS included for a plain prompt)."""
    tasks = build_tasks(config.tasks)
    prompts = prompt_format(tokenizer, config.prompt)
    length = config.tasks.length
    rows = []
    for i in range(config.trainer.prompts_per_step * steps):
        question, target = tasks[i].prompt, -1
        if length.mode != "none":
            target = length.targets[i % len(length.targets)]
            question = add_length_instruction(question, target, length.prompt_suffix)
        rows.append({"prompt": tokenizer.decode(prompts.ids(question)), "task_index": i, "target": target})
    return rows


def trl_run(config: RunConfig, start: Path, steps: int, output: Path, *, gpu: bool, batch: int) -> float:
    """TRL's GRPOTrainer on the run's policy, task and batch shape; `batch` completions per forward/backward."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    prompts_per_step, group = config.trainer.prompts_per_step, config.contract.group_size
    tokenizer = load_tokenizer(start)
    tokenizer.padding_side = "left"
    model = load_model(start)
    tasks = build_tasks(config.tasks)

    def reward(completions, completion_ids, task_index, target, **kwargs):
        requests = [
            RewardRequest(tasks[i], completion_text(tokenizer, ids), len(ids), t if t >= 0 else None)
            for ids, i, t in zip(completion_ids, task_index, target, strict=True)
        ]
        return [r.total for r in compute_rewards(requests, config=config.tasks)]

    args = GRPOConfig(
        output_dir=str(output),
        use_cpu=not gpu,
        bf16=config.trainer.precision == "bf16",  # mixed precision on both sides, or on neither
        fp16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=steps,  # one line of TRL metrics per run
        max_steps=steps,
        learning_rate=config.trainer.lr,
        num_generations=group,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=prompts_per_step * group // batch,
        max_completion_length=config.contract.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        num_iterations=1,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    clock = _StepClock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(trl_rows(config, tokenizer, steps)),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    return (steps - 1) * prompts_per_step * group / (clock.stamps[-1] - clock.stamps[0])


def gpu_overrides(smoke: bool) -> list[str]:
    """The GPU arm's run: the real shape from its random initialisation (SFT skipped), both roles on the GPU."""
    return ["sft.steps=0", "trainer.device='cuda'", "worker.device='cuda'", *(SMOKE if smoke else [])]


def load() -> float:
    """The 1-minute load average, as `uptime` prints it."""
    return os.getloadavg()[0]


def cpu_runs(args: argparse.Namespace, config: RunConfig, start: Path, console: Console) -> dict:
    """`args.runs` rounds of TRL (each thread count) and swarmrl (the launcher's layout, then `--arms`)."""
    arms = {"swarmrl": None, **{f"swarmrl ({name})": ARMS[name] for name in args.arms}}
    figures: dict[str, list[float]] = {f"TRL {t} thread(s)": [] for t in args.trl_threads} | {
        a: [] for a in arms
    }
    ratios: list[float] = []
    for run in range(args.runs):
        anchor = 0.0
        for threads in args.trl_threads:
            torch.set_num_threads(threads)
            before = load()
            rate = trl_run(config, start, args.steps, args.root / f"trl-{run}", gpu=False, batch=64)
            figures[f"TRL {threads} thread(s)"].append(rate)
            anchor = max(anchor, rate)
            console.print(
                f"run {run + 1}: TRL {threads} thread(s) {rate:.1f} samples/s (load {before:.1f}→{load():.1f})"
            )
        for name, layout in arms.items():
            before = load()
            label = "auto" if layout is None else re.sub(r"\W+", "-", name.split("(")[1].rstrip(")"))
            rate = swarmrl_run(config, start, args.steps, f"swarmrl-{run}-{label}", layout)
            figures[name].append(rate)
            if layout is None:
                ratios.append(rate / anchor)
            console.print(
                f"run {run + 1}: {name} {rate:.1f} samples/s, {rate / anchor:.2f}x the faster TRL "
                f"(load {before:.1f}→{load():.1f})"
            )
    console.print(
        f"medians over {args.runs} runs ({args.workload} workload, {args.precision}, {args.steps} steps each):"
    )
    for name, rates in figures.items():
        console.print(f"  {name}: {statistics.median(rates):.1f} samples/s")
    console.print(f"  swarmrl / faster TRL, median of the per-run ratios: {statistics.median(ratios):.2f}x")
    return {"samples_per_s": figures, "ratio": ratios, "median_ratio": statistics.median(ratios)}


def gpu_run(args: argparse.Namespace, config: RunConfig, start: Path, console: Console) -> dict:
    """TRL, then swarmrl colocated and with one worker process, once each (the GPU arm and its smoke test)."""
    trl = trl_run(
        config, start, args.steps, args.root / "trl", gpu=args.gpu, batch=config.contract.group_size
    )
    console.print(f"TRL GRPOTrainer: {trl:.1f} samples/s")
    ours = {}
    for name in ("colocated", "1 worker"):
        ours[name] = swarmrl_run(config, start, args.steps, f"swarmrl-{name.replace(' ', '-')}", ARMS[name])
        console.print(f"swarmrl ({name}): {ours[name]:.1f} samples/s  ratio vs TRL {ours[name] / trl:.2f}x")
    return {
        "trl_samples_per_s": trl,
        "swarmrl_samples_per_s": ours,
        "ratio": {name: rate / trl for name, rate in ours.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="demo", help="CPU workload")
    parser.add_argument("--steps", type=int, default=None, help="policy steps per arm (CPU 10, GPU 4)")
    parser.add_argument("--runs", type=int, default=3, help="CPU: rounds of TRL and swarmrl, interleaved")
    parser.add_argument("--trl-threads", type=int, nargs="+", default=[1, 2], help="CPU: TRL's torch threads")
    parser.add_argument("--arms", nargs="*", default=[], choices=sorted(ARMS), help="CPU: fixed layouts too")
    parser.add_argument(
        "--precision", choices=["fp32", "bf16"], default="fp32", help="CPU: training precision of both sides"
    )
    parser.add_argument("--root", type=Path, default=None, help="run root; keeps the SFT cache between calls")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: 3 steps, one round")
    parser.add_argument("--gpu", action="store_true", help="the Qwen3-0.6B-shape arm on a CUDA device")
    parser.add_argument("--smoke", action="store_true", help="the --gpu code path on the CPU, cut down")
    parser.add_argument("--out", type=Path, default=None, help="write rl_throughput.json here")
    args = parser.parse_args()
    gpu_arm = args.gpu or args.smoke
    args.steps = args.steps or (3 if args.quick or args.smoke else 4 if gpu_arm else 10)
    args.runs = 1 if args.quick else args.runs
    if args.gpu and not torch.cuda.is_available():
        raise SystemExit("--gpu needs a CUDA device (--smoke runs its code path on the CPU)")
    console = Console()
    with tempfile.TemporaryDirectory(prefix="swarmrl-throughput-") as tmp:
        args.root = (args.root or Path(tmp)).resolve()
        overrides = [f"run.root='{args.root}'", "run.name='start'"]
        overrides += (
            gpu_overrides(args.smoke)
            if gpu_arm
            else [*ONE_UPDATE_PER_STEP, *WORKLOADS[args.workload], f"trainer.precision='{args.precision}'"]
        )
        config = load_config(GPU_CONFIG if gpu_arm else CPU_CONFIG, overrides)
        start = prepare_run(config).checkpoints / "step_0"
        if gpu_arm:
            torch.set_num_threads(2)
            result = gpu_run(args, config, start, console)
        else:
            result = cpu_runs(args, config, start, console)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result |= {
            "arm": "gpu" if args.gpu else "smoke" if args.smoke else f"cpu-{args.workload}",
            "device": torch.cuda.get_device_name() if args.gpu else "cpu",
            "steps": args.steps,
        }
        (args.out / "rl_throughput.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
