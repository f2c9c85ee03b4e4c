import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from swarmrl.config import MetricsSection
from swarmrl.rundir import RunDir
from swarmrl.trainer.metrics import MetricsSink, MetricsSinkError


def test_metrics_go_to_jsonl_and_tensorboard(tmp_path):
    rundir = RunDir(tmp_path)
    sink = MetricsSink(MetricsSection(tensorboard=True), rundir, {})
    sink.log({"step": 1, "time": 0.0, "reward": 0.25, "loss": -0.5})
    sink.log({"step": 2, "time": 0.0, "reward": 0.75, "loss": -0.25})
    sink.close()
    assert [r["reward"] for r in rundir.read_metrics()] == [0.25, 0.75]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(1, 0.25), (2, 0.75)]
    assert "time" not in events.Tags()["scalars"]


def test_missing_backend_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(MetricsSinkError, match="wandb is not installed"):
        MetricsSink(MetricsSection(wandb_project="p"), RunDir(tmp_path), {})
