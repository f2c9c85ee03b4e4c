"""The dashboard's read side over real HTTP on a clocked coordinator: the run summary's counts, the step rate
and reward curve against hand-computed values, the event stream, the page's assets, and that no secret
reaches any of them. (The page itself, in a browser: tests/integration/dashboard.)"""

import json
import re
from importlib import resources
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.api import RunSummary
from swarmrl.coordinator.client import TrainerClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.server.routes import dashboard
from swarmrl.coordinator.server.routes.dashboard import STREAM_SHARE_S, shared_summary
from swarmrl.coordinator.server.summary import mean_rewards, steps_per_minute
from swarmrl_lab.coordinator_double import ClockedCoordinator, leased_submit


def test_steps_per_minute_over_the_recent_intervals():
    assert steps_per_minute([]) is None and steps_per_minute([5.0]) is None
    assert steps_per_minute([10.0, 10.0]) is None  # no time passed: no rate
    assert steps_per_minute([0.0, 30.0, 60.0]) == pytest.approx(2.0)
    # Only the last 10 intervals count: 11 steps 6 s apart after a 1000 s pause → 10 per minute.
    assert steps_per_minute([-1000.0] + [6.0 * i for i in range(11)]) == pytest.approx(10.0)


def test_mean_rewards_weigh_files_by_rows_and_ignore_malformed_summaries():
    rows = [
        (0, {"rows": 2, "mean_reward": 0.5}),
        (0, {"rows": 1, "mean_reward": -1.0}),
        (1, {"rows": 3, "mean_reward": "high"}),  # a validator's summary is data, not trusted to be numeric
        (1, {"rows": 0, "mean_reward": 1.0}),
        (2, {}),
        (2, None),
        (3, {"rows": 4, "mean_reward": 0.25}),
    ]
    assert mean_rewards(rows) == {0: (0.0, 3), 3: (0.25, 4)}


@pytest.fixture
def world(tmp_path):
    world = ClockedCoordinator(tmp_path / "coordinator")
    try:
        yield world
    finally:
        world.close()


def test_summary_counts_nodes_rejections_backlog_and_rate(world):
    run = world.run_id
    world.trainer.publish_step(run, 0)
    honest, cheater, idle = world.node(), world.node(), world.node()
    honest.heartbeat(run, 0)
    good = leased_submit(honest, run, b"good", rows=2, tokens=30)
    forged = leased_submit(cheater, run, b"forged", rows=2, tokens=30)
    waiting = leased_submit(honest, run, b"waiting", rows=1, tokens=7)
    for expected in (good, forged):
        lease = world.validator.lease_validation(run).submission
        assert lease.id == expected.id
        accept = lease.id == good.id
        world.validator.post_verdict(
            lease.id,
            accept=accept,
            check="all" if accept else "toploc",
            rewards_summary={"rows": 2, "mean_reward": 0.75 if accept else 0.0},
            rows=lease.rows,
            tokens=lease.tokens,
        )
    assert world.validator.lease_validation(run).submission.id == waiting.id  # held, not yet judged
    world.wait(30.0, idle)
    world.trainer.publish_step(run, 1)
    world.wait(30.0, idle)
    world.trainer.publish_step(run, 2)

    summary = world.admin.reads.summary(run)
    assert summary.run.current_step == 2 and summary.run.status == "open"
    assert summary.steps_per_minute == pytest.approx(2.0)  # three steps, 60 s
    assert [(s.step, s.mean_reward, s.rows) for s in summary.steps] == [
        (0, 0.75, 2),
        (1, None, 0),
        (2, None, 0),
    ]
    assert summary.submissions == {"pending": 1, "accepted": 1, "rejected": 1, "voided": 0}
    assert summary.rejections == {"toploc": 1}
    assert summary.backlog.pending == 1 and summary.backlog.judging == 1
    (validator,) = summary.backlog.validators
    assert (validator.node_id, validator.verdicts, validator.rejected, validator.judging) == (
        world.validator.node_id,
        2,
        1,
        1,
    )
    nodes = {n.node_id: n for n in summary.nodes}
    assert summary.nodes_total == 3 and set(nodes) == {honest.node_id, cheater.node_id, idle.node_id}
    h, c, i = nodes[honest.node_id], nodes[cheater.node_id], nodes[idle.node_id]
    assert (h.accepted, h.rejected, h.pending, h.credit_tokens, h.banned, h.policy_step) == (
        1,
        0,
        1,
        30,
        False,
        0,
    )
    assert (c.accepted, c.rejected, c.banned, c.status, c.rejections) == (
        0,
        1,
        True,
        "ejected",
        {"toploc": 1},
    )
    assert (i.accepted, i.pending, i.held, i.credit_tokens, i.banned, i.health) == (
        0,
        0,
        0,
        0,
        False,
        "healthy",
    )
    assert h.health != "healthy"  # silent for the minute the idle node kept heartbeating
    assert all(n.role == "worker" for n in summary.nodes)
    assert world.admin.reads.runs()[0].run_id == run

    # The same figures for Prometheus (parsed by prometheus_client's own parser).
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(httpx.get(f"{world.url}/metrics", timeout=5).text)
        for sample in family.samples
    }
    at = (("run", run),)
    assert samples["swarmrl_coordinator_run_step", at] == 2
    assert samples["swarmrl_coordinator_validator_backlog", (*at, ("state", "pending"))] == 1
    assert samples["swarmrl_coordinator_validator_backlog", (*at, ("state", "judging"))] == 1
    assert samples["swarmrl_coordinator_rejections", (("check", "toploc"), *at)] == 1
    assert samples["swarmrl_coordinator_nodes_banned", at] == 1


def test_a_hostile_check_name_reaches_prometheus_escaped(world):
    # A check name is any text a validator sends; quotes, backslashes and newlines must not end the label
    # value or the line (injecting a sample of another name), and the value must come back as sent.
    run = world.run_id
    world.trainer.publish_step(run, 0)
    submitted = leased_submit(world.node(), run, b"file", rows=1, tokens=5)
    hostile = 'x"} 1\nswarmrl_coordinator_runs 99\n\\'
    lease = world.validator.lease_validation(run).submission
    assert lease.id == submitted.id
    world.validator.post_verdict(lease.id, accept=False, check=hostile, rows=lease.rows, tokens=lease.tokens)

    text = httpx.get(f"{world.url}/metrics", timeout=5).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    (rejection,) = families["swarmrl_coordinator_rejections"].samples
    assert rejection.labels == {"run": run, "check": hostile} and rejection.value == 1
    assert [sample.value for sample in families["swarmrl_coordinator_runs"].samples] == [1]


def test_unknown_run_is_a_typed_404(world):
    with pytest.raises(CoordinatorError) as caught:
        world.admin.reads.summary("no-such-run")
    assert (caught.value.status, caught.value.kind) == (404, "unknown_run")
    response = httpx.get(f"{world.url}/v1/runs/no-such-run/summary/stream", timeout=5)
    assert response.status_code == 404 and response.json()["error"] == "unknown_run"


def test_the_stream_sends_a_summary_every_interval(world):
    world.trainer.publish_step(world.run_id, 0)
    events = []
    url = f"{world.url}/v1/runs/{world.run_id}/summary/stream?interval_s=0.2"
    with httpx.stream("GET", url, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, RunSummary.model_validate_json(line.removeprefix("data: "))))
                if len(events) == 1:
                    world.trainer.publish_step(world.run_id, 1)  # a later event must carry it
                if events[-1][1].run.current_step == 1 or len(events) == 20:  # bounded: 4 s
                    break
    assert {name for name, _ in events} == {"summary"} and len(events) >= 2
    assert events[0][1].run.current_step == 0 and events[-1][1].run.current_step == 1
    too_fast = httpx.get(f"{url.split('?')[0]}?interval_s=0.01", timeout=5)
    assert too_fast.status_code == 422 and too_fast.json()["error"] == "invalid_request"


def test_streams_share_one_read_per_second(world, monkeypatch):
    now = [1000.0]  # the streams' own clock, moved by the test
    monkeypatch.setattr(dashboard, "time", SimpleNamespace(monotonic=lambda: now[0]))
    state = world.app.state.coordinator
    world.trainer.publish_step(world.run_id, 0)
    first = shared_summary(state, world.run_id)
    world.trainer.publish_step(world.run_id, 1)
    now[0] += STREAM_SHARE_S - 0.01
    assert shared_summary(state, world.run_id) is first  # within the second: the same read
    now[0] += 0.02
    assert shared_summary(state, world.run_id).run.current_step == 1


def test_the_page_loads_only_its_own_assets_and_shows_no_secret(world):
    page = httpx.get(f"{world.url}/dashboard", timeout=5)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name in re.findall(r'(?:src|href)="/dashboard/([^"]+)"', page.text):
        asset = httpx.get(f"{world.url}/dashboard/{name}", timeout=5)
        assert asset.status_code == 200, name
    for name in ("index.html", "dashboard.js", "dashboard.css"):
        text = resources.files("swarmrl.coordinator").joinpath("dashboard", name).read_text()
        # Only the SVG namespace (an identifier, never fetched) may look like an address.
        assert (
            re.findall(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text.replace("http://www.w3.org/2000/svg", ""))
            == []
        )
    missing = httpx.get(f"{world.url}/dashboard/../app.py", timeout=5)
    assert missing.status_code == 404
    assert httpx.get(f"{world.url}/dashboard/secrets.txt", timeout=5).json()["error"] == "unknown_asset"
    world.trainer.report_metrics(world.run_id, 1, {"eval/avg@8": 0.5})
    world.node(role="relay").heartbeat(world.run_id, relay=relay_report("http://r", "http://o", []))
    created = world.admin.reads.runs()
    summary = httpx.get(f"{world.url}/v1/runs/{world.run_id}/summary", timeout=5).text
    for text in (page.text, summary, json.dumps([r.model_dump() for r in created])):
        assert ClockedCoordinator.ADMIN not in text and "run_secret" not in text


def test_status_command_prints_the_summary(world):
    from typer.testing import CliRunner

    from swarmrl.cli import app

    run = world.run_id
    world.trainer.publish_step(run, 0)
    honest, cheater = world.node(), world.node()
    leased_submit(honest, run, b"good", rows=2, tokens=30)
    leased_submit(cheater, run, b"forged", rows=2, tokens=30)
    while (lease := world.validator.lease_validation(run).submission) is not None:
        accept = lease.node_id == honest.node_id
        world.validator.post_verdict(
            lease.id,
            accept=accept,
            check="all" if accept else "prefill",
            rewards_summary={"rows": 2, "mean_reward": 0.5},
            rows=lease.rows,
            tokens=lease.tokens,
        )
    world.trainer.publish_step(run, 1)
    world.trainer.report_metrics(run, 1, {"eval/avg@8": 0.25, "islands/round": 2.0, "islands/islands": 3.0})
    world.trainer.report_metrics(run, 1, {"islands/island": 1.0, "islands/participants": 3.0})
    world.trainer.report_metrics(run, 1, {"islands/contributors": 2.0})
    world.trainer.report_metrics(run, 2, {"eval/avg@8": 0.5, "eval/pass@8": 0.75})
    relay = world.node(role="relay")
    # A relay's URL is its own claim: printed as text, never read as terminal markup.
    relay.heartbeat(
        run,
        relay=relay_report(
            "http://[red]relay", "http://origin", [{"version": 1, "complete": True, "bytes": 1}]
        ),
    )

    result = CliRunner().invoke(app, ["status", "--coordinator", world.url], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"{run} (open) · step 1" in out and f"{world.url}/dashboard" in out
    assert "0.500@0" in out and "prefill×1" in out and "BANNED" in out
    assert "held-out evals: eval/avg@8 0.500@2 · eval/pass@8 0.750@2" in out
    assert "DiLoCo island 1 of 3: 2 merges committed; at step 1 2 of 3 islands contributed" in out
    (relay_line,) = [line for line in out.splitlines() if relay.node_id[:12] in line and "http" in line]
    assert "http://[red]relay" in relay_line and "http://origin" in relay_line
    (cheater_line,) = [line for line in out.splitlines() if cheater.node_id[:12] in line]
    (honest_line,) = [line for line in out.splitlines() if honest.node_id[:12] in line]
    assert "BANNED" in cheater_line and "BANNED" not in honest_line

    as_json = CliRunner().invoke(app, ["status", "--coordinator", world.url, "--run-id", run, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert RunSummary.model_validate_json(as_json.output).run.current_step == 1

    unknown = CliRunner().invoke(app, ["status", "--coordinator", world.url, "--run-id", "nope"])
    assert unknown.exit_code == 2 and "unknown_run" in unknown.output  # one line, exit code 2

    # The trainer trains its last step (opened as step 1) into policy 2, reports it and drains the run:
    # status then says how far it trained, not the last step opened for work.
    world.trainer.drain(run)
    ended = CliRunner().invoke(app, ["status", "--coordinator", world.url], env={"COLUMNS": "240"})
    assert f"{run} (drained) · trained to step 2 ·" in ended.output, ended.output


def test_trainer_metrics_merge_by_step_and_the_summary_keeps_the_eval_curve(world):
    run = world.run_id
    world.trainer.publish_step(run, 0)
    world.trainer.report_metrics(run, 1, {"loss": 0.5, "reward": 0.1})
    merged = world.trainer.report_metrics(run, 1, {"eval/avg@8": 0.25, "eval/pass@8": 0.5, "reward": 0.2})
    assert merged.metrics == {"loss": 0.5, "reward": 0.2, "eval/avg@8": 0.25, "eval/pass@8": 0.5}
    # A step without an eval: no point on the curve; an island merge goes to the islands view instead.
    world.trainer.report_metrics(run, 2, {"loss": 0.4, "islands/round": 1.0, "islands/participants": 2.0})
    world.trainer.report_metrics(run, 3, {"eval/avg@8": 0.375, "rewards/correct/mean": 0.5})
    summary = world.admin.reads.summary(run)
    assert [(p.step, p.metrics) for p in summary.evals] == [
        (1, {"eval/avg@8": 0.25, "eval/pass@8": 0.5}),
        (3, {"eval/avg@8": 0.375}),
    ]
    assert [(p.step, p.metrics) for p in summary.islands] == [
        (2, {"islands/round": 1.0, "islands/participants": 2.0})
    ]
    assert [(p.step, p.metrics) for p in summary.reward_functions] == [(3, {"rewards/correct/mean": 0.5})]

    with pytest.raises(CoordinatorError) as caught:
        TrainerClient(world.node().transport).report_metrics(run, 4, {"eval/avg@8": 1.0})  # only the trainer
    assert (caught.value.status, caught.value.kind) == (403, "not_trainer")
    for bad in ({"bad name": 1.0}, {"x" * 65: 1.0}, {"eval/avg@8": float("inf")}):
        with pytest.raises(CoordinatorError) as caught:
            world.trainer.report_metrics(run, 4, bad)
        assert caught.value.status == 422, bad
    world.trainer.report_metrics(run, 5, {f"m{i}": 0.0 for i in range(128)})
    with pytest.raises(CoordinatorError) as caught:
        world.trainer.report_metrics(run, 5, {"one-more": 0.0})
    assert (caught.value.status, caught.value.kind) == (409, "too_many_metrics")


def relay_report(url: str, upstream: str, versions: list[dict]) -> dict:
    return {"url": url, "upstreams": [upstream], "versions": versions, "served_bytes": 4096}


def test_relays_report_their_place_in_the_tree_with_their_heartbeat(world):
    run = world.run_id
    world.trainer.publish_step(run, 0)
    first, second, worker = world.node(role="relay"), world.node(role="relay"), world.node()
    origin, a, b = "http://127.0.0.1:9000", "http://127.0.0.1:9001", "http://127.0.0.1:9002"
    done = {"version": 3, "complete": True, "bytes": 2_000_000, "seconds": 0.5}
    first.heartbeat(run, relay=relay_report(a, origin, [done]))
    second.heartbeat(run, relay=relay_report(b, a, [{"version": 3, "complete": False, "bytes": 10}]))
    second.heartbeat(run, relay=relay_report(b, a, [{**done, "seconds": 1.0}]))  # the newest report wins
    worker.heartbeat(run, 3)

    summary = world.admin.reads.summary(run)
    roles = {n.node_id: n.role for n in summary.nodes}
    assert (roles[first.node_id], roles[second.node_id], roles[worker.node_id]) == (
        "relay",
        "relay",
        "worker",
    )
    relays = {r.node_id: r for r in summary.relays}
    assert set(relays) == {first.node_id, second.node_id}
    assert (relays[first.node_id].url, relays[first.node_id].upstreams) == (a, [origin])
    assert relays[second.node_id].upstreams == [a] and relays[second.node_id].health == "healthy"
    assert [(v.version, v.complete, v.bytes, v.seconds) for v in relays[second.node_id].versions] == [
        (3, True, 2_000_000, 1.0)
    ]
    assert relays[second.node_id].served_bytes == 4096

    for bad in (
        {**relay_report(a, origin, []), "admin_token": "x"},  # nothing but the report's own fields
        relay_report(a, origin, [{"version": -1, "complete": True, "bytes": 1}]),
        {**relay_report(a, origin, []), "upstreams": [origin] * 17},
    ):
        with pytest.raises(CoordinatorError) as caught:
            first.heartbeat(run, relay=bad)
        assert caught.value.status == 422


def test_a_relay_member_takes_no_share_of_the_work(tmp_path):
    # Leases as large as the step allows, so that only the fair share limits one.
    config = CoordinatorConfig(
        lease_initial_unit_s=1.0, lease_target_s=100.0, lease_max_units=100, lease_proven_files=0
    )
    world = ClockedCoordinator(tmp_path / "coordinator", config=config)
    try:
        run = world.run_id
        world.trainer.publish_step(run, 0, units=4)
        worker, relay = world.node(), world.node(role="relay")
        relay.heartbeat(run, relay=relay_report("http://r", "http://o", []))
        # Two live members, one a relay: the worker's share is the whole step (4 units + 1 slack), not 3 of 5.
        assert len(worker.lease_work(run).units) == 5
        with pytest.raises(CoordinatorError) as refused:
            relay.lease_work(run)
        assert (refused.value.status, refused.value.kind) == (403, "relay_member")
    finally:
        world.close()
