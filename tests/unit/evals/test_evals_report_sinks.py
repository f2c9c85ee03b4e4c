"""Online-eval lines in the run's outputs: the reward-curve plot, the live table, Prometheus and W&B."""

import sys
from types import SimpleNamespace

import httpx
from prometheus_client.parser import text_string_to_metric_families

from swarmrl.configs.metrics import MetricsSection
from swarmrl.launch.report import eval_curves, metrics_table, plot_reward_curve
from swarmrl.rundir import RunDir
from swarmrl.trainer.metrics import MetricsSink


def _step(step: int, reward: float) -> dict:
    return {"step": step, "time": 0.0, "sampled_reward": reward, "reward": reward, "samples": 8.0}


def _eval(step: int, avg: float, passed: float) -> dict:
    return {"step": step, "time": 0.0, "eval/avg@2": avg, "eval/pass@2": passed, "eval/seconds": 1.0}


# As a trainer writes them: an eval lands after the training steps that ran while it was generating.
RECORDS = [_eval(0, 0.1, 0.2), _step(1, 0.3), _step(2, 0.4), _step(3, 0.5), _eval(2, 0.3, 0.5), _step(4, 0.6)]


def test_eval_curves_are_per_score_in_step_order():
    assert eval_curves(RECORDS) == {"avg@2": [(0, 0.1), (2, 0.3)], "pass@2": [(0, 0.2), (2, 0.5)]}
    assert eval_curves([_step(1, 0.3)]) == {}


def test_the_reward_curve_plots_the_eval_curve(tmp_path, monkeypatch):
    import matplotlib.axes

    labels = []
    plot = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        labels.append((kwargs.get("label"), [list(a) for a in args]))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    path = plot_reward_curve(RECORDS, tmp_path / "curve.png")
    assert path is not None and path.stat().st_size > 0
    assert ("held-out avg@2", [[0, 2], [0.1, 0.3]]) in labels
    assert ("held-out pass@2", [[0, 2], [0.2, 0.5]]) in labels
    assert ("all samples", [[1, 2, 3, 4], [0.3, 0.4, 0.5, 0.6]]) in labels


def test_the_live_table_shows_training_steps_only():
    table = metrics_table(RECORDS)
    assert list(table.columns[0].cells) == ["1", "2", "3", "4"]


def _scrape(url: str) -> dict[str, float]:
    text = httpx.get(url, timeout=5).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_prometheus_keeps_the_training_step_and_adds_the_last_eval(tmp_path):
    sink = MetricsSink(MetricsSection(prometheus_port=0), RunDir(tmp_path), {})
    try:
        url = (tmp_path / "metrics.url").read_text()
        for record in RECORDS[:4]:
            sink.log(record)
        samples = _scrape(url)
        assert samples["swarmrl_trainer_step"] == 3.0  # the eval of step 0 did not move it back
        assert samples["swarmrl_trainer_eval_step"] == 0.0 and samples["swarmrl_trainer_eval_avg_2"] == 0.1
        sink.log(RECORDS[4])
        samples = _scrape(url)
        assert samples["swarmrl_trainer_step"] == 3.0 and samples["swarmrl_trainer_sampled_reward"] == 0.5
        assert samples["swarmrl_trainer_eval_step"] == 2.0 and samples["swarmrl_trainer_eval_pass_2"] == 0.5
    finally:
        sink.close()
    assert [r["step"] for r in RunDir(tmp_path).read_metrics()] == [0, 1, 2, 3, 2]


def test_wandb_gets_evals_on_their_own_axis_never_below_its_step(tmp_path, monkeypatch):
    logged, defined = [], []
    run = SimpleNamespace(
        log=lambda data, step: logged.append((step, data)),
        define_metric=lambda name, **kw: defined.append((name, kw)),
        finish=lambda: None,
    )
    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(init=lambda **kw: run))
    sink = MetricsSink(MetricsSection(wandb_project="p"), RunDir(tmp_path), {})
    for record in RECORDS:
        sink.log(record)
    sink.close()
    assert ("eval/*", {"step_metric": "eval/step"}) in defined
    assert [step for step, _ in logged] == [0, 1, 2, 3, 3, 4]  # W&B drops a step below its current one
    assert logged[4][1]["eval/step"] == 2 and logged[4][1]["eval/avg@2"] == 0.3
    assert "eval/step" not in logged[3][1]
