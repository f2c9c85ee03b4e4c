"""Online evals in the local loop's trainer: eval lines at steps 0, every_steps, 2*every_steps, ... with
scores in [0, 1], each the held-out score of that step's checkpoint."""

import pytest

from swarmrl.evaluation import HeldOutEval
from swarmrl.launch.report import eval_curves
from swarmrl.rundir import RunDir
from swarmrl.steps import checkpoint_dir
from swarmrl.trainer.role import trainer_role

from .conftest import STEPS

EVERY, TASKS, K = 2, 6, 2


def test_the_trainer_writes_eval_lines_at_every_nth_step(run_copy):
    config = run_copy("online-eval")
    config.eval.every_steps, config.eval.online_num_tasks, config.eval.samples_per_task = EVERY, TASKS, K
    (config.run.directory / "config.json").write_text(config.model_dump_json(indent=2))

    assert trainer_role(config.run.directory) == STEPS

    records = RunDir(config.run.directory).read_metrics()
    evals = [r for r in records if "eval/avg@2" in r]
    assert [r["step"] for r in evals] == list(range(0, STEPS + 1, EVERY))
    assert sorted(r["step"] for r in records if "sampled_reward" in r) == list(range(1, STEPS + 1))
    for record in evals:
        assert 0.0 <= record["eval/avg@2"] <= record["eval/pass@2"] <= 1.0
        assert record["eval/completions"] == TASKS * K
    assert set(eval_curves(records)) == {"avg@2", "pass@2"}
    # The eval of step 2 scored exactly the policy of checkpoint 2: the weights copied in place are the
    # checkpoint's, and the held-out tasks and sampling seeds are fixed.
    expected = HeldOutEval.from_checkpoint(
        config, checkpoint_dir(config.run.directory / "checkpoints", EVERY), EVERY, TASKS
    ).run()
    (second,) = [r for r in evals if r["step"] == EVERY]
    assert second["eval/avg@2"] == pytest.approx(expected.accuracy)
    assert second["eval/pass@2"] == pytest.approx(expected.pass_at_k)
    assert second["eval/mean_reward"] == pytest.approx(expected.mean_reward)
    assert second["eval/completion_tokens"] == pytest.approx(expected.mean_completion_tokens)
