"""`[loss.objective] kind = "plugin"`: the worked example's objective (examples/byo, SAPO's soft gate) against
hand-computed values; found by module path or entry point; pinned by its source like a reward function; and
every way a plugin can be wrong refused in one line that names it."""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from byo_testkit import write_user_module

from swarmrl.cli.failures import expected_failure
from swarmrl.configs import RunConfig, load_config
from swarmrl.configs.loss import LossConfig, PluginObjective
from swarmrl.entrypoints import EntryError
from swarmrl.launch.pins import pin_run_code
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.objectives import build_objective
from swarmrl.trainer.train import run_trainer

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "byo"
EXAMPLE_LOSSES = EXAMPLE / "byo_example" / "losses.py"
F64 = torch.float64
TERMS = "from swarmrl.trainer.token_batch import TokenTerms\n\n\ndef terms(batch, objective):\n"


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def pinned_config(entry: str, **objective) -> RunConfig:
    """A run config with the plugin objective, pinned as `swarmrl rl` pins it."""
    config = RunConfig.model_validate(
        {"loss": {"objective": {"kind": "plugin", "entry": entry, **objective}}}
    )
    pin_run_code(config)
    return config


def write_plugin(directory: Path, name: str, body: str, monkeypatch) -> str:
    """A module `name` whose `terms(batch, objective)` runs `body`; returns its entry."""
    (directory / f"{name}.py").write_text(TERMS + body)
    monkeypatch.syspath_prepend(str(directory))
    return f"{name}:terms"


def run_plugin(entry: str) -> None:
    objective = pinned_config(entry).loss.objective
    logprobs = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    policy_loss(
        logprobs, torch.zeros(2, 3), torch.ones(2), torch.ones(2, 3), config=LossConfig(objective=objective)
    )


def test_the_example_soft_gate_by_hand() -> None:
    # r = [1, 2], A = [+1, −1], τ_pos = 1, τ_neg = 2; ℓ = −(4/τ)·σ(τ(r − 1))·A, ∂ℓ/∂log π = −A·4σ(1 − σ)·r:
    #   t0: ℓ = −4·σ(0) = −2,              gradient −1 (REINFORCE's at r = 1)
    #   t1: ℓ = +2·σ(2),                    gradient 4·σ(2)·(1 − σ(2))·2
    # token normalisation over 2 tokens.
    config = LossConfig(
        objective=pinned_config(
            "byo_example.losses:soft_gate", options={"tau_pos": 1.0, "tau_neg": 2.0}
        ).loss.objective,
        normalisation="token",
    )
    old = torch.full((1, 2), -1.0, dtype=F64)
    logprobs = (old + torch.tensor([[0.0, math.log(2.0)]], dtype=F64)).requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0]], dtype=F64)
    out = policy_loss(logprobs, old, advantages, torch.ones(1, 2, dtype=torch.bool), config=config)
    s2 = 1.0 / (1.0 + math.exp(-2.0))
    assert out.loss.item() == pytest.approx((-2.0 + 2.0 * s2) / 2, abs=1e-12)
    out.loss.backward()
    expected = torch.tensor([[-1.0, 4.0 * s2 * (1.0 - s2) * 2.0]], dtype=F64) / 2
    torch.testing.assert_close(logprobs.grad, expected, atol=1e-12, rtol=0)
    assert out.metrics["clip_high_fraction"].item() == 0.0  # a soft gate clips nothing


def test_the_soft_gate_survives_a_huge_ratio() -> None:
    objective = pinned_config("byo_example.losses:soft_gate").loss.objective
    logprobs = torch.tensor([[200.0, 0.0]], dtype=torch.float32, requires_grad=True)
    out = policy_loss(
        logprobs,
        torch.zeros(1, 2),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        config=LossConfig(objective=objective),
    )
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(logprobs.grad).all() and logprobs.grad[0, 0] == 0.0


def test_an_entry_point_names_the_function(tmp_path, monkeypatch) -> None:
    info = tmp_path / "my_losses-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-losses\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[swarmrl.losses]\nsoft = byo_example.losses:soft_gate\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    objective = pinned_config("soft").loss.objective
    assert build_objective(objective).keywords["objective"] is objective
    with pytest.raises(EntryError, match="loss objective 'nothing': no installed package declares it"):
        pinned_config("nothing")


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("no_such_loss_module:terms", "cannot import 'no_such_loss_module'"),
        ("byo_example.losses:no_such_function", "has no 'no_such_function'"),
        ("byo_example.losses:MAX_LOG_RATIO", "is not callable"),
        ("byo_example.rewards:brief", r"cannot be called as terms\(batch, objective\)"),
    ],
)
def test_a_missing_or_uncallable_entry_is_one_line(entry: str, problem: str) -> None:
    with pytest.raises(EntryError, match=f"loss objective '{entry}'.*{problem}") as refused:
        pinned_config(entry)
    line = expected_failure(refused.value)  # what the command line prints before it exits 2
    assert line == str(refused.value) and "\n" not in line


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("    return batch.logprobs", r"returned Tensor, not swarmrl\.trainer\.token_batch\.TokenTerms"),
        (
            "    flags = batch.mask.new_zeros(batch.mask.shape)\n"
            "    return TokenTerms(batch.logprobs.sum(-1), batch.logprobs, flags, flags, flags)",
            r"returned loss of shape \(2,\), not the batch's shape \(2, 3\)",
        ),
        (
            "    return TokenTerms(batch.logprobs, batch.logprobs, 0, 0, 0)",
            "returned clipped_low of int, not the batch's shape",
        ),
        (
            "    return TokenTerms(batch.logprobs, batch.logprobs, *[batch.logprobs.detach()] * 3)",
            "returned clipped_low of dtype torch.float64, not bool",
        ),
        (
            "    flags = batch.mask.new_zeros(batch.mask.shape)\n"
            "    return TokenTerms(batch.logprobs.detach(), batch.logprobs, flags, flags, flags)",
            "returned a loss with no gradient",
        ),
    ],
    ids=["not-terms", "wrong-shape", "not-a-tensor", "float-flags", "detached"],
)
def test_a_plugin_that_returns_the_wrong_terms_is_refused_by_name(
    tmp_path, monkeypatch, request, body: str, problem: str
) -> None:
    name = f"bad_loss_{request.node.callspec.id.replace('-', '_')}"
    entry = write_plugin(tmp_path, name, body, monkeypatch)
    with pytest.raises(EntryError, match=f"loss objective '{entry}' {problem}"):
        run_plugin(entry)
    sys.modules.pop(name, None)


def test_a_trainer_with_other_code_refuses_to_train(tmp_path, monkeypatch) -> None:
    mine = write_user_module(tmp_path, "losses_copy", monkeypatch, EXAMPLE_LOSSES.read_text())
    config = pinned_config("losses_copy:soft_gate")
    mine.write_text(mine.read_text().replace("MAX_LOG_RATIO = 20.0", "MAX_LOG_RATIO = 30.0"))
    with pytest.raises(
        EntryError, match="loss objective 'losses_copy:soft_gate': the source here .* differs"
    ):
        build_objective(config.loss.objective)
    unpinned = config.loss.objective.model_copy(update={"source_hash": None})
    with pytest.raises(EntryError, match="has no source hash in this config"):
        build_objective(unpinned)
    # the trainer refuses before it loads a checkpoint or trains a step
    config.loss.objective = unpinned
    with pytest.raises(EntryError, match="has no source hash in this config"):
        run_trainer(config, collect=lambda step: pytest.fail("collected a batch"))
    sys.modules.pop("losses_copy", None)


def test_a_resumed_run_whose_loss_changed_is_refused(tmp_path, monkeypatch) -> None:
    mine = write_user_module(tmp_path, "losses_resumed", monkeypatch, EXAMPLE_LOSSES.read_text())
    prepared = tmp_path / "run" / "config.json"
    prepared.parent.mkdir()
    prepared.write_text(json.dumps(pinned_config("losses_resumed:soft_gate").model_dump(mode="json")))
    mine.write_text(mine.read_text().replace("1.05", "1.5"))
    again = RunConfig.model_validate(
        {"loss": {"objective": {"kind": "plugin", "entry": "losses_resumed:soft_gate"}}}
    )
    with pytest.raises(
        EntryError, match="loss objective 'losses_resumed:soft_gate': its source .* prepared with"
    ):
        pin_run_code(again, prepared)
    sys.modules.pop("losses_resumed", None)


def test_the_entry_must_have_the_form_of_one() -> None:
    with pytest.raises(ValueError, match="entry must be 'package.module:function'"):
        PluginObjective(entry="not an entry")
    with pytest.raises(ValueError, match="sha256"):
        PluginObjective(entry="pkg.mod:terms", source_hash="abc")


def test_the_readmes_plugin_section_is_a_run_config(tmp_path) -> None:
    readme = (REPO / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", readme, flags=re.S) if "[loss.objective]" in b]
    (tmp_path / "run.toml").write_text(textwrap.dedent(block))
    config = load_config(tmp_path / "run.toml")
    pin_run_code(config)
    assert config.loss.objective.options == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert len(config.loss.objective.source_hash) == 64
