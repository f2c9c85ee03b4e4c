"""A run with the user's own reward functions and dataset: the module lives outside the package (a temporary
directory on PYTHONPATH), trains locally and in a swarm, its rewards are what the validators recompute with
it, and a node whose copy of the module is missing or changed refuses in one line."""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import warnings

import pytest
import torch
from byo_testkit import edit_user_module, prompt_rows, write_jsonl, write_user_module
from integration.spine.spine_helpers import REPO, tiny_config, train_beside_a_worker
from integration.swarm.test_swarm import launch, quiet
from typer.testing import CliRunner

from swarmrl.cli import app
from swarmrl.coordinator.client import PublicReads
from swarmrl.entrypoints import EntryError
from swarmrl.launch.prepare import prepare_run
from swarmrl.launch.swarm import stop_swarm, supervise
from swarmrl.models import load_tokenizer
from swarmrl.rollouts import read_rollouts
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir
from swarmrl.tasks.completion import completion_text
from swarmrl.tasks.registry import build_tasks
from swarmrl.validator.service import run_validator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WEIGHTS = (0.5, 1.0)


def byo_overrides(module: str, dataset, *, chat: bool) -> list[str]:
    chat_settings = ["model.chat_template='chatml'", "prompt.format='chat'"] if chat else []
    return [
        *chat_settings,
        "sft.steps=0",
        f"tasks.sources=[{{type='prompts',name='mine',path='{dataset}'}}]",
        f"tasks.reward_functions=['{module}:format_reward','{module}:letter_reward']",
        f"tasks.reward_weights={list(WEIGHTS)}",
        "validator.reward_bounds=[0.0,1.5]",
    ]


def expected_rewards(module: str, tasks, tokenizer, rows) -> list[float]:
    """What the user's functions give each row, called here one row at a time."""
    user = importlib.import_module(module)
    rewards = []
    for row in rows:
        task = tasks[row.prompt_index]
        text = completion_text(tokenizer, row.completion_ids)
        completion = [{"role": "assistant", "content": text}] if task.messages else text
        prompt = [dict(m) for m in task.messages] if task.messages else task.prompt
        fmt = user.format_reward([completion])[0]
        letter = user.letter_reward([prompt], [completion], [task.verification_info["solution"]])[0]
        rewards.append(WEIGHTS[0] * fmt + (WEIGHTS[1] * letter if letter is not None else 0.0))
    return rewards


def test_a_local_run_trains_on_the_users_rewards_and_the_validator_agrees(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    write_user_module(tmp_path / "mine", "local_rewards", monkeypatch)
    dataset = write_jsonl(tmp_path / "prompts.jsonl", prompt_rows(40, chat=True))
    config = tiny_config(
        tmp_path,
        "byo-local",
        "trainer.steps=3",
        "contract.async_level=1",
        "contract.local_proofs=true",  # a validator reads these files, and it requires proofs
        *byo_overrides("local_rewards", dataset, chat=True),
    )
    rundir = prepare_run(config)
    assert set(config.tasks.reward_function_hashes) == set(config.tasks.reward_functions)
    assert train_beside_a_worker(rundir, tmp_path / "worker.log") == 3
    assert len(RunDir(rundir.root).read_metrics()) == 3
    assert run_validator(rundir.root, None, once=True) > 0
    tokenizer, tasks = load_tokenizer(checkpoint_dir(rundir.checkpoints, 0)), build_tasks(config.tasks)
    accepted = sorted((rundir.root / "accepted").rglob("*.parquet"))
    rows = [row for path in accepted for row in read_rollouts(path, scored=True, require_signature=False)[1]]
    assert rows and [r.task_reward for r in rows] == pytest.approx(
        expected_rewards("local_rewards", tasks, tokenizer, rows)
    )
    # Rows where the letter reward does not apply (no solution) were scored too, by the format reward alone.
    assert any(tasks[r.prompt_index].verification_info["solution"] is None for r in rows)


@pytest.mark.swarm
def test_a_swarms_validators_recompute_the_users_rewards(tmp_path, monkeypatch):
    write_user_module(tmp_path / "mine", "swarm_rewards", monkeypatch)
    dataset = write_jsonl(tmp_path / "prompts.jsonl", prompt_rows(40, chat=False))
    swarm = launch(tmp_path, "byo-swarm", 2, 1, 0, 1, *byo_overrides("swarm_rewards", dataset, chat=False))
    try:
        supervise(swarm, quiet(), timeout_s=500, interval_s=1.0)
        with PublicReads.at(swarm.coordinator_url) as client:
            verdicts = {v.submission_id: v for v in client.verdicts(swarm.config.run.id)}
    finally:
        stop_swarm(swarm)
    assert len(swarm.rundir.read_metrics()) == 2
    tokenizer = load_tokenizer(checkpoint_dir(swarm.rundir.checkpoints, 0))
    tasks = build_tasks(swarm.config.tasks)
    trained = sorted((swarm.rundir.root / "accepted").rglob("*.parquet"))  # as workers signed them
    assert trained
    for path in trained:
        rows = read_rollouts(path)[1]
        mean = sum(expected_rewards("swarm_rewards", tasks, tokenizer, rows)) / len(rows)
        verdict = verdicts[int(path.name.split("-")[0])]
        assert verdict.accepted and verdict.rewards_summary["mean_reward"] == pytest.approx(mean)


def swarmrl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarmrl.cli", *args], capture_output=True, text=True, timeout=240, cwd=REPO
    )


def swarmrl_here(*args: str) -> subprocess.CompletedProcess:
    """The same command through the same entry point (`swarmrl.cli.app`) in this process, which has imported
    torch already: what a subprocess would print, without paying for its imports. A warning the command raises
    under Python's default filters counts as printed (a process would print it to stderr). Undoes what the
    command sets for the process (torch's threads, the CLI's log handler)."""
    threads, root = torch.get_num_threads(), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            for ignored in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.filterwarnings("ignore", category=ignored)
            result = CliRunner().invoke(app, list(args))
    finally:
        torch.set_num_threads(threads)
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)
    assert not isinstance(result.exception, Exception), (result.output, result.exc_info)
    printed = "".join(
        warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught
    )
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr + printed)


def refused_in_one_line(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert all(needle in lines[0] for needle in needles), lines[0]


def test_a_missing_or_changed_function_is_refused_in_one_line(tmp_path, monkeypatch):
    module = write_user_module(tmp_path / "mine", "refused_rewards", monkeypatch)
    dataset = write_jsonl(tmp_path / "prompts.jsonl", prompt_rows(20, chat=False))
    overrides = [
        f"run.root='{tmp_path}'",
        "run.name='refused'",
        *byo_overrides("refused_rewards", dataset, chat=False),
    ]
    # The dry run records the pin it would write.
    dry = swarmrl("rl", "configs/demo.toml", *overrides, "--dry-run")
    assert dry.returncode == 0 and '"refused_rewards:format_reward": "' in dry.stdout, dry.stderr
    missing = [*overrides, "tasks.reward_functions=['refused_rewards:format_reward','refused_rewards:nope']"]
    refused_in_one_line(swarmrl("rl", "configs/demo.toml", *missing, "--dry-run"), "'refused_rewards:nope'")
    rundir = prepare_run(
        tiny_config(tmp_path, "refused", *byo_overrides("refused_rewards", dataset, chat=False))
    )
    config_json = str(rundir.root / "config.json")
    edit_user_module(module)
    changed = ("reward function 'refused_rewards:format_reward'", "differs from the one the run pinned")
    refused_in_one_line(swarmrl("rl", config_json, "--dry-run"), *changed)
    # The local validator and the trainer refuse through the same entry point in this process (each process
    # would pay torch's import first); the validator node below refuses as a process of its own.
    refused_in_one_line(swarmrl_here("validator", "--run-dir", str(rundir.root), "--once"), *changed)
    refused_in_one_line(swarmrl_here("trainer", "--run-dir", str(rundir.root)), *changed)
    node = ["--coordinator", "http://127.0.0.1:9", "--config", config_json, "--key", str(tmp_path / "v.pem")]
    node += ["--relay", "http://127.0.0.1:9", "--work-dir", str(tmp_path / "validator")]
    refused_in_one_line(swarmrl("validator", *node), *changed)  # before it contacts the coordinator
    # A resumed run refuses the new code too: its earlier steps were judged with the old.
    with pytest.raises(EntryError, match="differs from the one .* was prepared with"):
        prepare_run(tiny_config(tmp_path, "refused", *byo_overrides("refused_rewards", dataset, chat=False)))
