"""Progress off a terminal: a plain line per policy step, the latest state whenever a few seconds pass without a
line (SFT, a wait for rollouts, an eval), and a final table that holds every step or says how many it leaves out."""

import io
import threading

from rich.console import Console

from swarmrl.launch.progress import StepLines, sft_progress, waiting
from swarmrl.launch.report import metrics_table
from swarmrl.progress_lines import ProgressLines, duration, eta, seconds_per_step, step_line
from swarmrl.rundir import RunDir

RECORD = {
    "step": 3,
    "time": 130.0,
    "reward": 0.5312,
    "sampled_reward": 0.48,
    "loss": 0.01234,
    "samples": 64.0,
    "wait_seconds": 3.0,
    "train_seconds": 2.0,
    "rewards/correct/mean": 0.53,
    "rewards/correct/std": 0.5,
    "rewards/brief/mean": 0.2,
}


def test_a_step_line_holds_step_reward_loss_rate_eta_and_each_functions_mean():
    assert step_line(RECORD, 10, 20.0) == (
        "step 3/10 · reward 0.531 · sampled 0.480 · loss +0.0123 · 12.8 samples/s · ETA 2m20s · correct 0.530 · "
        "brief 0.200"
    )
    assert step_line({**RECORD, "wait_seconds": 0.0, "train_seconds": 0.0}, 10, None).endswith(
        "- samples/s · ETA - · correct 0.530 · brief 0.200"
    )


def test_durations_etas_and_the_pace_of_steps():
    assert [duration(s) for s in (4.4, 65, 7322)] == ["4s", "1m05s", "2h02m"]
    assert eta(0, 10, 5.0) == "-" and eta(5, 10, 50.0) == "50s" and eta(10, 10, 1.0) == "0s"
    records = [
        {"step": 1, "time": 100.0},
        {"step": 2, "time": 104.0, "eval/avg@4": 0.5},
        {"step": 4, "time": 112.0},
    ]
    assert seconds_per_step(records) == 4.0  # the eval line is not a step
    assert seconds_per_step(records[:1]) is None


class Collected:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()

    def write(self, line: str) -> None:
        with self.changed:
            self.lines.append(line)
            self.changed.notify_all()

    def wait_for(self, count: int) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.lines) >= count, timeout=10), self.lines
            return list(self.lines)


def test_the_latest_state_is_printed_whenever_the_interval_passes_without_a_line():
    out = Collected()
    with ProgressLines(out.write, interval=0.05) as lines:
        lines.note("step 1/3")
        lines.state("step 2/3: waiting")
        assert out.wait_for(3)[:3] == ["step 1/3", "step 2/3: waiting", "step 2/3: waiting"]
        lines.state(lambda: "computed when printed")
        assert "computed when printed" in out.wait_for(len(out.lines) + 2)


def test_on_a_terminal_the_lines_are_left_to_live_views():
    out = Collected()
    with ProgressLines(out.write, interval=0.01, enabled=False) as lines:
        lines.note("step 1/3")
        lines.state("waiting")
    assert out.lines == []


def plain_console() -> tuple[Console, io.StringIO]:
    stream = io.StringIO()
    return Console(file=stream, force_terminal=False, width=300), stream


def test_step_lines_follow_the_metrics_file_and_say_what_a_step_waits_for(tmp_path):
    rundir = RunDir(tmp_path)
    out = Collected()
    watch = StepLines(rundir, 4, ProgressLines(out.write, interval=60))
    watch.poll()
    assert (
        watch.waiting().startswith("step 1/4: 0 rollout file(s) in, ")
        and "since the start" in watch.waiting()
    )
    rundir.append_metrics({**RECORD, "step": 1, "time": 100.0})
    rundir.append_metrics({"step": 1, "time": 101.0, "eval/avg@4": 0.25, "eval/pass@4": 0.5})
    (rundir.rollouts(1) / "a.parquet").parent.mkdir(parents=True)
    (rundir.rollouts(1) / "a.parquet").write_bytes(b"")
    watch.poll()
    assert out.lines[0].startswith("step 1/4 · reward 0.531")
    assert out.lines[1] == "eval of step 1: avg@4 0.250 · pass@4 0.500"
    assert (
        watch.waiting().startswith("step 2/4: 1 rollout file(s) in, ") and "since step 1" in watch.waiting()
    )


def test_sft_off_a_terminal_prints_what_it_prepares_and_its_last_step(tmp_path):
    console, stream = plain_console()
    with sft_progress(console, 2) as report:
        report(1, 2.5)
        report(2, 1.25)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "preparing the starting policy: tasks, tokenizer, model, 2 SFT steps"
    assert lines[-1].startswith("sft step 2/2 · loss 1.250 · ") and lines[-1].endswith("ETA 0s")
    with waiting(console, "held-out eval of the SFT policy (8 completions)"):
        pass
    assert stream.getvalue().splitlines()[-1] == "held-out eval of the SFT policy (8 completions)"


def test_the_final_table_holds_every_step_or_says_how_many_it_leaves_out():
    records = [{**RECORD, "step": step} for step in range(1, 13)]
    console, stream = plain_console()
    console.print(metrics_table(records, last=200))
    shown = stream.getvalue()
    assert all(f"│ {step:>4} │" in shown for step in range(1, 13)) and "not shown" not in shown
    assert "correct" in shown and "brief" in shown  # a column per reward function
    console, stream = plain_console()
    console.print(metrics_table(records, last=8))
    assert "4 earlier step(s) not shown: metrics.jsonl holds every step" in stream.getvalue()


def test_the_swarm_demo_off_a_terminal_says_its_step_rewards_files_and_bans_on_one_line():
    from swarmrl.launch.swarm import NodeRecord, SwarmSnapshot, swarm_line

    nodes = {
        "worker-0": NodeRecord("worker-0", "a", generated=4, accepted=3, pending=1),
        "cheater": NodeRecord("cheater", "b", generated=2, rejected=2, banned=True),
    }
    state = SwarmSnapshot(step=3, rewards=[0.25, 0.5], nodes=nodes, reject_checks={}, run_status="open")
    assert swarm_line(state) == (
        "step 3 (open) · sampled reward 0.250 → 0.500 · files generated 6, accepted 3, rejected 2, pending 1 · "
        "banned: cheater"
    )
