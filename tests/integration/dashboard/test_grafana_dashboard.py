"""dashboards/grafana-swarmrl.json queries only metrics the services export: each name in a panel's PromQL is
found in what a live coordinator, the SHARDCAST server metrics, a worker and a validator actually expose; a
trainer gauge must name a key of the trainer's metrics record."""

import json
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import generate_latest

from swarmrl.configs.metrics import MetricsSection
from swarmrl.coordinator.api import EVAL_PREFIX
from swarmrl.islands.island import merge_metrics
from swarmrl.islands.merge import MergeRecord
from swarmrl.node_metrics import metric_name, serve_metrics
from swarmrl.shardcast.server import ServerMetrics
from swarmrl.validator.node import validator_collector
from swarmrl.worker.node import WorkLog, worker_collector
from swarmrl_lab.coordinator_double import ClockedCoordinator, leased_submit

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "dashboards" / "grafana-swarmrl.json"
METRIC = re.compile(r"\b((?:swarmrl|shardcast)_[a-z0-9_]+)")
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created")


def exported(text: str) -> set[str]:
    """Every series name a scrape may hold, from the families' HELP lines."""
    families = re.findall(r"^# HELP (\S+)", text, flags=re.M)
    return {family + suffix for family in families for suffix in SUFFIXES}


def panel_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"]]
    return {name for expr in exprs for name in METRIC.findall(expr)}


@pytest.fixture
def names(tmp_path):
    world = ClockedCoordinator(tmp_path / "coordinator")
    try:
        world.trainer.publish_step(world.run_id, 0)
        node = world.node()
        leased_submit(node, world.run_id, b"file")
        lease = world.validator.lease_validation(world.run_id).submission
        world.validator.post_verdict(lease.id, accept=False, check="toploc")
        found = exported(httpx.get(f"{world.url}/metrics", timeout=5).text)
    finally:
        world.close()
    found |= exported(generate_latest(ServerMetrics("relay").registry).decode())
    log_book = WorkLog(tmp_path / "w" / "work.json")
    log_book.generated(1)
    servers = [
        serve_metrics(
            MetricsSection(prometheus_port=0), worker_collector(log_book, SimpleNamespace(step=0)), tmp_path
        ),
        serve_metrics(
            MetricsSection(prometheus_port=0),
            validator_collector(Counter({("accepted", "all"): 1}), {"judge_seconds_total": 0.1}),
            tmp_path,
        ),
    ]
    try:
        for server in servers:
            found |= exported(httpx.get(server.url, timeout=5).text)
    finally:
        for server in servers:
            server.close()
    return found


def test_every_panel_queries_an_exported_metric(names):
    wanted = panel_metrics()
    assert len(wanted) > 20
    trainer = {n for n in wanted if n.startswith("swarmrl_trainer_")}
    assert not (wanted - trainer) - names, (
        f"panels query metrics no service exports: {sorted(wanted - trainer - names)}"
    )
    record_keys = set(re.findall(r'"([a-z_]+)"', (ROOT / "src/swarmrl/trainer/train.py").read_text()))
    record_keys |= set(re.findall(r'"([a-z_]+)"', (ROOT / "src/swarmrl/trainer/losses.py").read_text()))
    # An island merge's figures join its step's record.
    merge = MergeRecord(1, 2, 0, 2, 2, 10, 0.1, 0.1, True, False, 1.0)
    record_keys |= {
        metric_name("trainer", k).removeprefix("swarmrl_trainer_") for k in merge_metrics(merge, 0, 2)
    }
    # The held-out evals are a family matched by prefix (eval/avg@k, eval/pass@k, ... for any k).
    families = {n for n in trainer if n.endswith("_")}
    assert families == {metric_name("trainer", EVAL_PREFIX) + "_"}
    unknown = {n for n in trainer - families if n.removeprefix("swarmrl_trainer_") not in record_keys}
    assert not unknown, f"trainer panels name keys its metrics record does not have: {sorted(unknown)}"
    assert "swarmrl_trainer_islands_round" in trainer


def test_the_check_can_fail(names):
    assert "swarmrl_coordinator_no_such_metric" not in names
    assert "swarmrl_coordinator_run_step" in names and "shardcast_bytes_served_total" in names
