"""Make a run directory ready: resolved config, keys, and the starting policy `checkpoints/step_0`.

With no model path, a tokenizer is trained on the task text and a tiny model is built and warm-started
by SFT on task demonstrations; the SFT result is cached by the hash of everything that shapes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from swarmrl.configs import RunConfig
from swarmrl.launch.pins import pin_run_code
from swarmrl.models import (
    build_tiny_model,
    load_model,
    load_tokenizer,
    save_pretrained_atomic,
    train_tokenizer,
)
from swarmrl.models.prompting import fill, prompt_format
from swarmrl.models.tokenizer import CHATML_THINK_TEMPLATE
from swarmrl.rundir import RunDir, write_json_atomic
from swarmrl.steps import checkpoint_dir
from swarmrl.tasks.registry import build_tasks
from swarmrl.tasks.task import TaskSource
from swarmrl.trainer.sft import run_sft

log = logging.getLogger(__name__)

Progress = Callable[[int, float], None]


_CHAT_TEMPLATES = {"none": None, "chatml": CHATML_THINK_TEMPLATE}


def demonstrations(tasks: TaskSource, limit: int) -> list[tuple[str, str]]:
    """(task prompt, demonstration) of the first `limit` tasks that have a demonstration."""
    pairs = []
    for i in range(min(limit, len(tasks))):
        task = tasks[i]
        if task.demonstration is not None:
            pairs.append((task.prompt, task.demonstration))
    return pairs


def sft_cache_key(config: RunConfig) -> str:
    shaping = {
        "model": config.model.model_dump(mode="json"),
        "prompt": config.prompt.model_dump(mode="json"),
        "sft": config.sft.model_dump(mode="json", exclude={"cache"}),
        "sources": config.tasks.model_dump(mode="json")["sources"],
        "seed": config.contract.seed,
    }
    if config.env is not None:  # its demonstrations are played through the environment (tool or none)
        # How many tool runs are in flight changes no demonstration, so it keeps the cached start.
        shaping["env"] = config.env.model_dump(mode="json", exclude={"max_concurrent_steps"})
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]


def build_start_policy(config: RunConfig, destination: Path, progress: Progress | None = None) -> Path:
    """Tokenizer + tiny model + SFT, saved as an HF directory at `destination` (cached when allowed)."""
    cache = config.run.root / ".cache" / f"sft-{sft_cache_key(config)}"
    if config.sft.cache and (cache / "config.json").is_file():
        log.info("reusing the SFT model cached at %s", cache)
    else:
        torch.manual_seed(config.contract.seed)
        tokenizer, model = _sft_start_policy(config, progress)
        save_pretrained_atomic(model, tokenizer, cache)
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(cache, destination.with_name(destination.name + ".tmp"), dirs_exist_ok=True)
    (destination.with_name(destination.name + ".tmp")).rename(destination)
    return destination


def _sft_start_policy(config: RunConfig, progress: Progress | None):
    """A tokenizer trained on the demonstrations' text and a tiny model warm-started on them."""
    tasks = build_tasks(config.tasks)
    if config.env is not None:
        return _sft_env_start_policy(config, tasks, progress)
    pairs = demonstrations(tasks, config.sft.num_examples)
    if config.sft.steps and not pairs:
        raise ValueError("SFT needs tasks with demonstrations; these sources have none")
    chat_template = _CHAT_TEMPLATES[config.model.chat_template]
    if chat_template is None or config.prompt.format == "plain":
        # A plain prompt ends like "Answer:"; the demonstration follows after a space.
        pairs = [(question, " " + answer) for question, answer in pairs]
        around = config.prompt.template
    else:
        around = config.prompt.user_template
    texts = [fill(around, question) + answer for question, answer in pairs] or [
        tasks[i].prompt for i in range(min(2000, len(tasks)))
    ]
    tokenizer = train_tokenizer(
        texts, vocab_size=config.model.tokenizer_vocab_size, chat_template=chat_template
    )
    model = build_tiny_model(config.model.tiny, tokenizer, config.model.attn_implementation)
    _sft(config, model, prompt_format(tokenizer, config.prompt), pairs, progress)
    return tokenizer, model


def _sft_env_start_policy(config: RunConfig, tasks: TaskSource, progress: Progress | None):
    """The multi-turn warm start: every demonstration played through the run's environment (the model's turns
    are exactly what its rollouts will hold, so no space is put before them), environment tokens masked out."""
    from swarmrl.envs.build import TaskVerifier
    from swarmrl.envs.codec import PromptTurnCodec
    from swarmrl.envs.demonstrate import demonstration_examples, play_demonstrations

    assert config.env is not None  # the warm start of multi-turn runs only
    verifier = TaskVerifier(config.tasks)
    played = play_demonstrations(
        config.env, verifier, tasks, config.sft.num_examples if config.sft.steps else 0
    )
    chat_template = _CHAT_TEMPLATES[config.model.chat_template]
    texts = [demo.text() for demo in played] or [tasks[i].prompt for i in range(min(2000, len(tasks)))]
    tokenizer = train_tokenizer(
        texts, vocab_size=config.model.tokenizer_vocab_size, chat_template=chat_template
    )
    model = build_tiny_model(config.model.tiny, tokenizer, config.model.attn_implementation)
    fmt = prompt_format(tokenizer, config.prompt)
    _sft(config, model, fmt, demonstration_examples(played, fmt, PromptTurnCodec(fmt)), progress)
    return tokenizer, model


def _sft(config: RunConfig, model, fmt, examples, progress: Progress | None) -> None:
    if config.sft.steps:
        run_sft(
            model,
            fmt,
            examples,
            steps=config.sft.steps,
            batch_size=config.sft.batch_size,
            lr=config.sft.lr,
            weight_decay=config.sft.weight_decay,
            warmup_steps=config.sft.warmup_steps,
            seed=config.contract.seed,
            progress=progress,
        )


def prepare_run(config: RunConfig, progress: Progress | None = None) -> RunDir:
    """Create (or reopen, for resume) a run directory with its starting policy; `config` gets the source hashes
    of the code of yours it names (reward functions, a plugin environment), as the written config.json does."""
    rundir = RunDir(config.run.directory)
    pin_run_code(config, rundir.root / "config.json")
    rundir.root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(rundir.root / "config.json", config.model_dump(mode="json"))
    rundir.stop_file.unlink(missing_ok=True)
    start = checkpoint_dir(rundir.checkpoints, 0)
    if (start / "config.json").is_file():
        return rundir
    start.parent.mkdir(parents=True, exist_ok=True)
    if config.model.path is not None:
        model = load_model(config.model.path, config.model.dtype)
        save_pretrained_atomic(model, load_tokenizer(config.model.path), start)
    else:
        build_start_policy(config, start, progress)
    return rundir
