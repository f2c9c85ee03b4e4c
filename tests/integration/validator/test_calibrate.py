"""`swarmrl validator calibrate` on a tiny policy: honest settings pass, every attack is caught by some check."""

import pytest
from integration.spine.spine_helpers import tiny_config

from swarmrl.inference.engine import SamplingParams
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.steps import checkpoint_dir
from swarmrl.tasks.registry import build_tasks
from swarmrl.validator.calibrate import ATTACKS, TOLERANCE_FLOOR, calibrate


@pytest.mark.slow
def test_calibration_separates_honest_settings_from_every_attack(tmp_path, shared_sft):
    config = tiny_config(tmp_path, "calibrate")
    shared_sft(config)
    policy = checkpoint_dir(prepare_run(config).checkpoints, 0)
    result = calibrate(
        policy,
        build_tasks(config.tasks),
        prompt_format(load_tokenizer(policy), config.prompt),
        params=SamplingParams(max_new_tokens=8, temperature=1.0),
        completions=16,
        thread_counts=(1, 2),
        batch_sizes=(1, 16),
    )
    rates = result.rates()
    assert rates["honest"] == {"toploc": 1.0, "logprobs": 1.0, "seeded_sampling": 1.0, "all": 1.0}
    assert len([m for m in result.measured if m.source.startswith("honest:")]) == 2 * 2 * 2 * 16
    for attack in ATTACKS:
        # Per completion a temperature change can pick the same token; over 16 completions it cannot hide.
        assert rates[f"attack:{attack.name}"]["all"] < 1.0, attack.name
    for name in ("different_model", "half_layers", "sign_flipped_proofs"):
        assert rates[f"attack:{name}"]["all"] == 0.0, name
    assert TOLERANCE_FLOOR <= result.logprob_tolerance < 1e-2
