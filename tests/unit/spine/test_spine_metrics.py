import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from swarmrl.configs.metrics import MetricsSection
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


def test_forward_gets_each_records_finite_scalars_by_step(tmp_path):
    sent = []
    sink = MetricsSink(MetricsSection(), RunDir(tmp_path), {}, forward=lambda step, m: sent.append((step, m)))
    sink.log({"step": 4, "time": 9.0, "loss": float("nan"), "eval/avg@8": 0.5, "note": "text", "files": 3})
    sink.close()
    # NaN stays in metrics.jsonl but is not sent (the coordinator takes finite figures only).
    assert sent == [(4, {"eval/avg@8": 0.5, "files": 3.0})]


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


def _scrape(url: str) -> dict[str, float]:
    """Prometheus text → {sample with labels: value}, parsed by prometheus_client's own parser."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url, timeout=5).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_trainer_serves_its_last_step_on_the_configured_port(tmp_path):
    rundir = RunDir(tmp_path)
    sink = MetricsSink(MetricsSection(prometheus_port=0), rundir, {})
    try:
        url = (tmp_path / "metrics.url").read_text()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert not [
            k for k in _scrape(url) if k.startswith("swarmrl_trainer_")
        ]  # no step yet: nothing made up
        sink.log({"step": 3, "time": 12.5, "sampled_reward": 0.25, "loss/policy": -0.5, "note": "text"})
        samples = _scrape(url)
        assert samples["swarmrl_trainer_step"] == 3.0
        assert (
            samples["swarmrl_trainer_sampled_reward"] == 0.25
            and samples["swarmrl_trainer_loss_policy"] == -0.5
        )
        assert "swarmrl_trainer_time" not in samples and "swarmrl_trainer_note" not in samples
    finally:
        sink.close()
    import httpx

    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


def test_no_port_configured_serves_nothing(tmp_path):
    sink = MetricsSink(MetricsSection(), RunDir(tmp_path), {})
    sink.close()
    assert not (tmp_path / "metrics.url").exists()


def test_worker_and_validator_collectors_read_their_own_records(tmp_path):
    from collections import Counter
    from types import SimpleNamespace

    from swarmrl.node_metrics import serve_metrics
    from swarmrl.validator.node import validator_collector
    from swarmrl.worker.node import WorkLog, worker_collector

    log_book = WorkLog(tmp_path / "w" / "work.json")
    log_book.generated(8)
    log_book.count("submitted")
    policy = SimpleNamespace(step=4)
    worker = serve_metrics(
        MetricsSection(prometheus_port=0), worker_collector(log_book, policy), tmp_path / "w"
    )
    tally, timing = Counter({("accepted", "all"): 3, ("rejected", "toploc"): 1}), {"judge_seconds_total": 1.5}
    validator = serve_metrics(
        MetricsSection(prometheus_port=0), validator_collector(tally, timing), tmp_path / "v"
    )
    try:
        samples = _scrape((tmp_path / "w" / "metrics.url").read_text())
        assert samples["swarmrl_worker_work_total{count=generated_rows}"] == 8.0
        assert samples["swarmrl_worker_work_total{count=submitted}"] == 1.0
        assert samples["swarmrl_worker_policy_step"] == 4.0
        log_book.count("submitted")  # read at scrape time
        assert _scrape(worker.url)["swarmrl_worker_work_total{count=submitted}"] == 2.0
        samples = _scrape(validator.url)
        assert samples["swarmrl_validator_verdicts_total{check=toploc,outcome=rejected}"] == 1.0
        assert samples["swarmrl_validator_verdicts_total{check=all,outcome=accepted}"] == 3.0
        assert samples["swarmrl_validator_judge_seconds_total"] == 1.5
    finally:
        worker.close()
        validator.close()


def test_a_swarm_trainer_sends_what_the_coordinator_takes_and_survives_a_refusal(caplog):
    from swarmrl.coordinator.errors import CoordinatorError
    from swarmrl.trainer.role import _report_metrics

    class Coordinator:
        def __init__(self, refuse: bool) -> None:
            self.refuse, self.sent = refuse, []

        def report_metrics(self, run_id, step, metrics):
            self.sent.append((run_id, step, metrics))
            if self.refuse:
                raise CoordinatorError(503, "unavailable", "down for a moment")

    up = Coordinator(refuse=False)
    _report_metrics(up, "r", 3, {"eval/avg@8": 0.5, "eval/acc (n=200)": 0.4, "loss": 1.0})
    assert up.sent == [("r", 3, {"eval/avg@8": 0.5, "loss": 1.0})]  # a name it would refuse is left out
    down = Coordinator(refuse=True)
    _report_metrics(down, "r", 4, {"loss": 1.0})  # the training step goes on
    assert len(down.sent) == 1 and "step 4: metrics not reported" in caplog.text
